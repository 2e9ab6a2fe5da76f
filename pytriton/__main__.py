"""``pytriton`` on the command line (``python -m pytriton``, or the ``pytriton`` script).

``pytriton --version`` prints the library's version and the Triton server's it runs.
``pytriton backend-path`` prints where pytriton's own Triton backend library is (exit 1 when
this installation built none): what to copy into a Triton server image's backend directory, as
``<backend directory>/pytriton/libtriton_pytriton.so``, so that `RemoteTriton` serves through it.
``pytriton check [--build] [--timeout SECONDS] [SCRIPT]`` runs `pytriton.check.runtime`: the
versions, then one line per check, ``PASS``/``INFO``/``WARN``/``FAIL``, the remedy after each failure;
the exit status is 1 when a check failed, so a container build or a deployment script can stop
on it. Given the serving script, the port check reads the ports its ``TritonConfig`` sets.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
from typing import Optional, Sequence

from pytriton.check.install import SERVER_START_TIMEOUT_S
from pytriton.check.runtime import run_checks, summary, versions_line
from pytriton.check.verdicts import exit_status, format_result
from pytriton.server.distribution import NATIVE_LIBRARY, native_library


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pytriton", description="Tools of the pytriton library.")
    parser.add_argument("--version", action="version", version=versions_line(),
                        help="print the versions of pytriton, of the Triton server it runs and of Python")
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
    commands.add_parser(
        "backend-path",
        help="print the path of pytriton's Triton backend library (to copy into a server image)",
        description="Print where pytriton's own Triton backend library is. Copy it into a Triton server's backend "
        "directory as <backend directory>/pytriton/libtriton_pytriton.so (e.g. /opt/tritonserver/backends/pytriton/ "
        "in NVIDIA's server image) so that RemoteTriton serves through it. Exits 1 when this installation was "
        "built without a C compiler and has none.",
    )
    check.add_argument(
        "script",
        nargs="?",
        type=pathlib.Path,
        help="your serving script: the port check then reads the ports its TritonConfig(...) sets (without it, "
        "only the defaults and the PYTRITON_TRITON_CONFIG_* variables)",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command in `argv` (default: the process's arguments); returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "backend-path":
        library = native_library()
        if library is None:
            print(f"pytriton's backend was not built here (no {NATIVE_LIBRARY}); reinstall pytriton with a C compiler",
                  file=sys.stderr)
            return 1
        print(library)
        return 0
    # The throwaway server's log lines belong to the check's own verdict, not to stderr.
    logging.getLogger("pytriton").addHandler(logging.NullHandler())
    print(versions_line(), flush=True)
    results = run_checks(build=args.build, timeout_s=args.timeout, script=args.script)
    width = max(len(result.name) for result in results)
    for result in results:
        print(format_result(result, width), flush=True)
    print(summary(results), flush=True)
    return exit_status(results)


if __name__ == "__main__":
    sys.exit(main())
