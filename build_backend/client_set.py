"""Which files of the package make the client-only distribution, ``pytriton-client``.

The tree builds two distributions that install into the one ``pytriton`` package folder:

* ``pytriton-client`` (``pytriton-client/pyproject.toml``): the files named here, the clients and
  what they import (the exceptions, the model configuration types, the constants, the
  access-token header, the parameters both sides read). Pure Python, any OS, no server.
* ``pytriton`` (``pyproject.toml``): every other file (the server side and the bundled
  tritonserver), with a requirement on ``pytriton-client`` of the same version.

No file belongs to both, so installing, upgrading or removing one never touches the other's
files: the full build leaves out what `owns` names (``pytriton_build.BuildPy``) and the client's
build takes only what `files` lists (``pytriton-client/client_build.py``). The set is closed
under imports, which ``tests/unit/test_client_set.py`` checks. Standard library only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path, PurePosixPath
from typing import List

PACKAGES = ("pytriton/client", "pytriton/model_config")
"""Subpackages shipped whole."""

FILES = (
    "pytriton/__init__.py",
    "pytriton/py.typed",
    "pytriton/access_token.py",
    "pytriton/client_contract.py",
    "pytriton/client_regions.py",
    "pytriton/constants.py",
    "pytriton/environment.py",
    "pytriton/exceptions.py",
    "pytriton/install_hints.py",
    "pytriton/notices.py",
)
"""Single files of the top-level package."""


def owns(path: str) -> bool:
    """Whether `path`, relative to the repository root, is a file of ``pytriton-client``."""
    posix = PurePosixPath(*Path(path).parts).as_posix()
    return posix in FILES or any(posix.startswith(package + "/") for package in PACKAGES)


def files(root: Path) -> List[str]:
    """The client files under `root` (a checkout), as sorted paths relative to it."""
    found = [name for name in FILES if (root / name).is_file()]
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                found.append(path.relative_to(root).as_posix())
    return sorted(found)


def copy(source: Path, target: Path) -> List[str]:
    """Copy the client files of the checkout `source` into `target`, keeping their paths."""
    names = files(source)
    for name in names:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, destination)
    return names


if __name__ == "__main__":  # `python build_backend/client_set.py`: list them
    print(os.linesep.join(files(Path(__file__).resolve().parent.parent)))
