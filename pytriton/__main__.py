"""``pytriton`` on the command line (``python -m pytriton``, or the ``pytriton`` script).

``pytriton check [--build] [--timeout SECONDS]`` runs `pytriton.server.checks`: one line per
check, ``PASS``/``WARN``/``FAIL``, the remedy after each failure; the exit status is 1 when a
check failed, so a container build or a deployment script can stop on it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from pytriton.server.checks import SERVER_START_TIMEOUT_S, exit_status, format_result, run_checks


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytriton", description="Tools of the pytriton library.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    check = commands.add_parser(
        "check",
        help="check that this machine or image can run a pytriton server",
        description="Check that this machine or container image can run a pytriton server: glibc, libpython, "
        "the server tree and its Python-backend stub, the stub's NumPy, a throwaway server start, /dev/shm, "
        "the configured ports and the workspace folder. Exits 1 when a check fails.",
    )
    check.add_argument(
        "--build",
        action="store_true",
        help="leave out the checks of the running container (/dev/shm, ports): for a container image build, "
        "whose build container has other ones",
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=SERVER_START_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long the throwaway server may take to become ready (default {SERVER_START_TIMEOUT_S:.0f})",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command in `argv` (default: the process's arguments); returns the exit status."""
    args = _parser().parse_args(argv)
    # The throwaway server's log lines belong to the check's own verdict, not to stderr.
    logging.getLogger("pytriton").addHandler(logging.NullHandler())
    results = run_checks(build=args.build, timeout_s=args.timeout)
    width = max(len(result.name) for result in results)
    for result in results:
        print(format_result(result, width), flush=True)
    status = exit_status(results)
    counts = {verdict: sum(r.verdict.value == verdict for r in results) for verdict in ("PASS", "WARN", "FAIL")}
    summary = ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count)
    print(f"pytriton check: {summary}" + ("" if status == 0 else " -- this machine cannot serve yet"), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
