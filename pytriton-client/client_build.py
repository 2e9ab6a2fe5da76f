"""PEP 517 build backend of ``pytriton-client``: setuptools, run on a copy of the client files.

The client files live in the checkout's ``pytriton/`` beside the server side, and a project
cannot take files from outside its folder. So in a checkout every hook first makes a temporary
project: this folder's ``pyproject.toml``, ``MANIFEST.in``, ``README.md`` and this backend, the
checkout's ``LICENSE`` and ``NOTICE``, the files ``build_backend/client_set.py`` names, and the
blocking clients written from the asyncio ones (``build_backend/unasync.py``). setuptools builds
there; the checkout is left as it was. An sdist built that way is such a project already: there
the hooks are setuptools' own.

There is no editable install of this distribution alone: ``pip install -e .`` at the repository
root runs the whole source tree, the client files included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, Mapping, Optional, Union

from setuptools import build_meta as _setuptools

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
OWN_FILES = ("pyproject.toml", "MANIFEST.in", "README.md", "client_build.py")
"""This folder's files that go into the temporary project."""
CHECKOUT_FILES = ("LICENSE", "NOTICE")

ConfigSettings = Optional[Mapping[str, Union[str, List[str], None]]]


def _staged() -> bool:
    """Whether this is a project with the client files in place (a temporary one, or an sdist)."""
    return (HERE / "pytriton" / "__init__.py").is_file()


def stage(target: Path, checkout: Path = CHECKOUT) -> List[str]:
    """Lay out the project of ``pytriton-client`` in `target` from `checkout`; the files copied."""
    sys.path.insert(0, str(checkout / "build_backend"))
    try:
        import client_set
        import unasync
    finally:
        sys.path.remove(str(checkout / "build_backend"))
    for name in OWN_FILES:
        shutil.copy2(checkout / "pytriton-client" / name, target / name)
    for name in CHECKOUT_FILES:
        shutil.copy2(checkout / name, target / name)
    copied: List[str] = client_set.copy(checkout, target)
    unasync.write(target)
    return copied


@contextlib.contextmanager
def _project() -> Iterator[None]:
    """Run a hook inside the project: this folder when staged, else a temporary copy."""
    if _staged():
        yield
        return
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="pytriton-client-") as folder:
        stage(Path(folder))
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(previous)


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
    with _project():
        requires: List[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    return requires


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> List[str]:
    with _project():
        requires: List[str] = _setuptools.get_requires_for_build_sdist(config_settings)
    return requires


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    metadata_directory = os.path.abspath(metadata_directory)
    with _project():
        name: str = _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    return name


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    wheel_directory = os.path.abspath(wheel_directory)
    metadata_directory = os.path.abspath(metadata_directory) if metadata_directory else None
    with _project():
        name: str = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    return name


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    sdist_directory = os.path.abspath(sdist_directory)
    with _project():
        name: str = _setuptools.build_sdist(sdist_directory, config_settings)
    return name


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    raise RuntimeError(
        "pytriton-client has no editable install of its own: its files are the checkout's pytriton/ "
        "ones. `pip install -e .` at the repository root installs the whole package in editable mode."
    )
