"""The lock: one file of exact versions for every environment this checkout builds.

``constraints.txt`` (at the checkout's root) pins every package that ``make install`` puts in
``.venv`` (the run-time dependencies, every extra, the test tools, torch for the examples, pip
and setuptools) and that the Docker image installs. pip reads it as a constraints file: it
installs nothing by itself, it only fixes the version of whatever the install pulls in. So the
test suite, the image and a developer's ``make install`` run the same versions, and a release
upstream changes nothing here until someone moves the lock (``make lock``) and the tests pass
on it. The package's own metadata keeps its ranges: a library must not pin its users.

A lock is made for one interpreter and platform (its header says which): on another, where a
pinned release may have no build, ``make install`` warns and installs from pyproject's ranges.

Commands (standard library only; run with the Python the lock is for):
    python build_backend/lock.py applies     exit 0 when the lock is for this interpreter, else
                                             say why on stderr and exit 1
    python build_backend/lock.py write [--torch SPEC]
                                             resolve the newest releases pyproject admits in a
                                             scratch virtual environment, and write the lock
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
# The distributions built from this checkout: never pinned, their versions are the checkout's.
OURS = ("pytriton", "pytriton-client")
TARGET_LINE = "# for: "

HEADER = """\
# The lock (build_backend/lock.py): the exact version of every package that `make install` puts in
# .venv and the Docker image installs, as pip constraints (they pin, they install nothing). Moved
# only by `make lock`, which takes the newest releases pyproject.toml admits; commit it with a
# test run that passed on it. tests/unit/test_lock.py checks that pyproject's ranges admit every pin.
"""


def target() -> str:
    """The interpreter and platform a lock made here is for, e.g. ``cpython-3.11 linux-x86_64``."""
    implementation = sys.implementation.name
    return f"{implementation}-{sys.version_info[0]}.{sys.version_info[1]} {sys.platform}-{platform.machine()}"


def read(path: Path = LOCK) -> Tuple[str, Dict[str, str]]:
    """The lock's target and its pins (canonical name -> version)."""
    locked_for = ""
    pins: Dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith(TARGET_LINE):
            locked_for = line[len(TARGET_LINE):].strip()
        elif line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonical(name)] = version.strip()
    return locked_for, pins


def canonical(name: str) -> str:
    """PEP 503's normalised name: ``typing_inspect`` and ``Typing-Inspect`` are one package."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def applies() -> int:
    locked_for, _ = read()
    if locked_for == target():
        return 0
    print(f"constraints.txt is locked for {locked_for or 'an unknown interpreter'}, this is {target()}: "
          "installing the newest releases pyproject.toml admits instead (run `make lock` to lock for this one)",
          file=sys.stderr)
    return 1


def requirements(torch_spec: str) -> List[str]:
    """Everything `make install` and the image ask for, less the distributions built here."""
    import tomllib  # Python 3.11+: the lock is made with the Python it is for

    wanted: List[str] = []
    for pyproject in (ROOT / "pyproject.toml", ROOT / "pytriton-client" / "pyproject.toml"):
        project = tomllib.loads(pyproject.read_text())["project"]
        extras = project.get("optional-dependencies", {})
        extras.pop("examples", None)  # torch: torch_spec below, the build make install takes
        wanted += project.get("dependencies", []) + [line for extra in extras.values() for line in extra]
        wanted += tomllib.loads(pyproject.read_text())["build-system"]["requires"]
    wanted.append(torch_spec)
    return [line for line in dict.fromkeys(wanted) if canonical(re.split(r"[\s\[<>=!~;@]", line)[0]) not in OURS]


def freeze(python: Path) -> Dict[str, str]:
    listed = subprocess.run([str(python), "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout
    pins: Dict[str, str] = {}
    for line in listed.splitlines():
        name, sep, version = line.partition("==")
        if sep and canonical(name) not in OURS:
            # A local label (torch's "+cpu") names one build of a release; `==2.13.0` admits every
            # build of it, so the lock works where that file is not on disk.
            pins[canonical(name)] = version.split("+")[0]
    return pins


def write(torch_spec: str) -> int:
    with tempfile.TemporaryDirectory(prefix="pytriton-lock-") as scratch:
        venv = Path(scratch) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip", "setuptools"], check=True)
        subprocess.run([*pip, *requirements(torch_spec)], check=True)
        pins = freeze(python)
    body = "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    LOCK.write_text(f"{HEADER}{TARGET_LINE}{target()}\n{body}")
    print(f"{LOCK.name}: {len(pins)} packages locked for {target()}")
    return 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("applies", help="exit 0 when the lock is for this interpreter")
    writer = commands.add_parser("write", help="lock the newest releases pyproject.toml admits")
    writer.add_argument("--torch", default="torch", help="the torch requirement (make install's TORCH_SPEC)")
    args = parser.parse_args(argv)
    return applies() if args.command == "applies" else write(args.torch)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
