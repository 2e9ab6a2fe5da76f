"""PEP 517 build backend: setuptools, plus the Triton server tree the package bundles.

This is the step before every flow of the package: it puts the real ``tritonserver`` binary
where ``pytriton.server`` looks for it. Before ``build_wheel`` and ``build_editable`` it makes
sure ``pytriton/tritonserver/`` exists in the source tree, laid out as::

    pytriton/tritonserver/
      bin/tritonserver
      backends/python/libtriton_python.so
      backends/python/triton_python_backend_utils.py
      backends/pytriton/libtriton_pytriton.so   pytriton's own backend, compiled here (native.py)
      caches/local/libtritoncache_local.so
      python_backend_stubs/3.8 ... 3.13/triton_python_backend_stub
      lib/                      every shared library the files above need
      VERSION                   which wheel the tree came from, with its sha256

The only registry package that ships a working server is the ``nvidia-pytriton==0.7.0`` wheel
(Triton Inference Server 2.51.0). It is fetched with ``pip download`` (so the user's pip
configuration and index apply), checked against a pinned sha256, kept in a cache, and only
the server files above are unpacked from it. None of that wheel's Python package is used.

Environment:
    PYTRITON_CACHE_DIR: where fetched wheels are kept (under ``wheels/``); default
        ``${XDG_CACHE_HOME:-~/.cache}/pytriton``.
    PYTRITON_SKIP_SERVER_FETCH=1: build without fetching, for users who bring their own
        server; the wheel then holds whatever ``pytriton/tritonserver/`` already has.

A regular build (``pip install .``, ``pip wheel .``, an sdist) leaves the source tree as it found it:
what it had to create there (the server tree, about 210 MB; setuptools' ``build/``, of the same
size, and ``*.egg-info``) is removed once the wheel is written. Only an
editable install keeps them, since it runs from the source tree.

The files of the client-only distribution ``pytriton-client`` (``build_backend/client_set.py``;
built by ``pytriton-client/``) stay out of this one's wheel (`BuildPy`), which requires that
distribution instead. An editable install runs the whole source tree, client files included, so
its metadata leaves that requirement out: ``pip install -e .`` needs nothing that is not on PyPI.

pytriton-client is on no package index, so a requirement on it by version alone fails the
natural first try, ``pip install /path/to/pytriton``, with pip's "No matching distribution found
for pytriton-client==0.1.0". The metadata prepared for a build from a source tree that holds
``pytriton-client/`` (a checkout, a git clone) therefore names that folder instead
(``pytriton-client @ file:///path/to/pytriton/pytriton-client``, `with_local_client`): pip, which
resolves from the prepared metadata, builds the clients from the same tree, and the one path is
enough, from a checkout and from the git URL alike. The wheel itself keeps the requirement by
version: a wheel copied to another machine (``pip wheel``, the Dockerfile's build stage) must
install beside pytriton-client's wheel, and a file URL of the building machine would stop it (an
index refuses such metadata too), so `build_wheel` lets setuptools write the metadata afresh
instead of copying the prepared one. That knowingly departs from PEP 517's rule that a wheel built
after ``prepare_metadata_for_build_wheel`` carries identical metadata, in this one requirement;
pip resolves from the prepared metadata and checks only the wheel's name and version against it.

Everything else is ``setuptools.build_meta``, re-exported unchanged.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Dict, Iterator, List, Mapping, Optional, Tuple, Union

import client_set
from native import ensure_built as ensure_native_backend
from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (hooks passed through unchanged)
    get_requires_for_build_editable,
)
from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
from setuptools.command.build_py import build_py as _build_py
from stub_numpy import ensure_stub_numpy, sha256_of

SOURCE_DISTRIBUTION = "nvidia-pytriton"
SOURCE_VERSION = "0.7.0"
TRITON_SERVER_VERSION = "2.51.0"
# The server binaries need glibc 2.35; the source wheel carries the same platform tag.
MANYLINUX = "manylinux_2_35"
# sha256 of nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_<arch>.whl as published on PyPI.
WHEEL_SHA256: Dict[str, str] = {
    "x86_64": "21f063ff93bb426d0c06b7a55e7eb9efcfe62c0dddd9a908e9877e18710128df",
    "aarch64": "f99e07ee56fe065337453956afba17d2673e02ec6a632c3de26ce6e7b32a0898",
}
STUB_PYTHON_VERSIONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SERVER_DIR = PROJECT_ROOT / "pytriton" / "tritonserver"

# Members of the source wheel -> their place in the server tree.
_WHEEL_SERVER_PREFIX = "pytriton/tritonserver/"
_WHEEL_LIBS_PREFIX = "nvidia_pytriton.libs/"
_SERVER_FILES = (
    "bin/tritonserver",
    "backends/python/libtriton_python.so",
    "backends/python/triton_python_backend_utils.py",
    "caches/local/libtritoncache_local.so",
) + tuple(f"python_backend_stubs/{v}/triton_python_backend_stub" for v in STUB_PYTHON_VERSIONS)

_TRUE = ("1", "true", "yes", "on")

ConfigSettings = Optional[Mapping[str, Union[str, List[str], None]]]


class ServerFetchError(RuntimeError):
    """The Triton server tree could not be fetched, verified or unpacked."""


def _log(message: str) -> None:
    # pip shows a backend's output only with -v, or when the build fails.
    print(f"pytriton-build: {message}", file=sys.stderr, flush=True)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _platform_tag(arch: str) -> str:
    return f"{MANYLINUX}_{arch}"


def _wheel_filename(arch: str) -> str:
    return f"nvidia_pytriton-{SOURCE_VERSION}-py3-none-{_platform_tag(arch)}.whl"


def cache_dir() -> Path:
    """Folder that keeps fetched wheels: ``$PYTRITON_CACHE_DIR/wheels``."""
    root = os.environ.get("PYTRITON_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "pytriton")
    return Path(root).expanduser() / "wheels"


def _version_line(sha256: str) -> str:
    return f"{SOURCE_DISTRIBUTION}=={SOURCE_VERSION} triton-server={TRITON_SERVER_VERSION} sha256={sha256}\n"


def _tree_is_current(server_dir: Path, sha256: str) -> bool:
    version_file = server_dir / "VERSION"
    try:
        if version_file.read_text() != _version_line(sha256):
            return False
    except OSError:
        return False
    return all((server_dir / name).is_file() for name in _SERVER_FILES)


def _download(arch: str, cache: Path) -> Path:
    """``pip download`` the pinned wheel into ``cache``; the user's pip config applies."""
    cache.mkdir(parents=True, exist_ok=True)
    # Download next to the cache so the final move is atomic (concurrent builds, interrupted
    # downloads never leave a half-written wheel under the cached name).
    with tempfile.TemporaryDirectory(prefix=".download-", dir=str(cache)) as tmp:
        command = [
            sys.executable, "-m", "pip", "download",
            "--no-deps", "--only-binary=:all:", "--no-input", "--progress-bar=off",
            "--platform", _platform_tag(arch),
            "--dest", tmp,
            f"{SOURCE_DISTRIBUTION}=={SOURCE_VERSION}",
        ]  # fmt: skip
        _log(f"downloading {_wheel_filename(arch)}: {' '.join(command)}")
        # pip writes its progress to stdout; send it to stderr with ours so that stdout stays
        # free for the PEP 517 frontend.
        result = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, check=False)
        downloaded = Path(tmp) / _wheel_filename(arch)
        if result.returncode != 0 or not downloaded.is_file():
            raise ServerFetchError(
                f"could not download {SOURCE_DISTRIBUTION}=={SOURCE_VERSION} for {arch} "
                f"(pip exited with {result.returncode}). The build needs it for the Triton server "
                f"binary. Either make it reachable through your pip index, or put "
                f"{_wheel_filename(arch)} into {cache} yourself, or set "
                f"PYTRITON_SKIP_SERVER_FETCH=1 and bring your own server."
            )
        target = cache / downloaded.name
        os.replace(str(downloaded), str(target))
    return target


def _verified(path: Path, sha256: str) -> bool:
    actual = sha256_of(path)
    if actual == sha256:
        return True
    _log(f"sha256 mismatch for {path}: expected {sha256}, got {actual}; deleting it")
    path.unlink()
    return False


def fetch_wheel(arch: str) -> Path:
    """Return the verified ``nvidia-pytriton`` wheel for ``arch``, downloading it if needed."""
    sha256 = WHEEL_SHA256[arch]
    cache = cache_dir()
    cached = cache / _wheel_filename(arch)
    if cached.is_file():
        if _verified(cached, sha256):
            _log(f"using cached {cached} (sha256 verified, no download)")
            return cached
        _log("the cached wheel was damaged; downloading it again")
    downloaded = _download(arch, cache)
    if not _verified(downloaded, sha256):
        raise ServerFetchError(
            f"{downloaded.name} from your pip index does not have the pinned sha256 {sha256}; "
            f"the file was deleted. Check which index serves {SOURCE_DISTRIBUTION}."
        )
    _log(f"downloaded and verified {downloaded}")
    return downloaded


def _tree_path(member: str) -> Optional[str]:
    """Where a wheel member goes in the server tree, or None if it is not taken."""
    if member.startswith(_WHEEL_LIBS_PREFIX):
        name = member[len(_WHEEL_LIBS_PREFIX) :]
        if name and "/" not in name:
            return f"lib/{name}"
        return None
    if member.startswith(_WHEEL_SERVER_PREFIX):
        relative = member[len(_WHEEL_SERVER_PREFIX) :]
        if relative in _SERVER_FILES:
            return relative
    return None


def extract_server(wheel: Path, server_dir: Path, sha256: str) -> None:
    """Unpack the server files of ``wheel`` into ``server_dir``, replacing what is there."""
    server_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tritonserver-", dir=str(server_dir.parent)))
    staging.chmod(0o755)  # mkdtemp makes it private; an editable install uses it in place
    try:
        taken = set()
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                relative = None if info.is_dir() else _tree_path(info.filename)
                if relative is None:
                    continue
                if ".." in PurePosixPath(relative).parts:
                    raise ServerFetchError(f"refusing suspicious member {info.filename!r} in {wheel}")
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
                # Keep the exec bits of the archive, drop any write bit for group and others.
                executable = (info.external_attr >> 16) & 0o111
                target.chmod(0o755 if executable else 0o644)
                taken.add(relative)
        missing = [name for name in _SERVER_FILES if name not in taken]
        if missing or not any(name.startswith("lib/") for name in taken):
            raise ServerFetchError(f"{wheel} lacks expected server files: {missing or ['lib/*']}")
        (staging / "VERSION").write_text(_version_line(sha256))
        if server_dir.is_symlink():
            _log(f"replacing the link {server_dir}")
            server_dir.unlink()
        elif server_dir.exists():
            _log(f"replacing {server_dir}")
            shutil.rmtree(server_dir)
        os.rename(str(staging), str(server_dir))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"unpacked {len(taken)} files into {server_dir}")


def ensure_server_tree(server_dir: Path = SERVER_DIR) -> None:
    """Make sure ``server_dir`` holds the pinned server tree; fetch and unpack it if not."""
    if os.environ.get("PYTRITON_SKIP_SERVER_FETCH", "").strip().lower() in _TRUE:
        _log("PYTRITON_SKIP_SERVER_FETCH is set: not fetching the Triton server")
        return
    arch = _arch()
    if not sys.platform.startswith("linux") or arch not in WHEEL_SHA256:
        raise ServerFetchError(
            f"no pinned Triton server for {sys.platform}/{arch}: "
            f"{SOURCE_DISTRIBUTION}=={SOURCE_VERSION} is known only for Linux "
            f"{', '.join(sorted(WHEEL_SHA256))}. Set PYTRITON_SKIP_SERVER_FETCH=1 to build "
            "without it and bring your own server."
        )
    sha256 = WHEEL_SHA256[arch]
    if _tree_is_current(server_dir, sha256):
        _log(f"{server_dir} is current ({SOURCE_DISTRIBUTION}=={SOURCE_VERSION}, {arch})")
    else:
        extract_server(fetch_wheel(arch), server_dir, sha256)
    ensure_stub_numpy(server_dir, cache_dir(), arch)


class BdistWheel(_bdist_wheel):  # type: ignore[misc]  # setuptools ships no type information
    """``bdist_wheel`` that tags the wheel for the platform of the bundled server binaries.

    The Python code is the same for every interpreter, so the tag is ``py3-none-<platform>``;
    without a server tree (``PYTRITON_SKIP_SERVER_FETCH``) the wheel stays ``py3-none-any``.
    """

    def get_tag(self) -> Tuple[str, str, str]:
        if (SERVER_DIR / "bin" / "tritonserver").is_file() and _arch() in WHEEL_SHA256:
            # The stub's NumPy (stub_numpy.py) is built for this interpreter's minor version.
            python = "cp{}{}".format(*sys.version_info[:2]) if (SERVER_DIR / "stub_python").is_dir() else "py3"
            return (python, "none", _platform_tag(_arch()))
        python, abi, plat = super().get_tag()
        return python, abi, plat


class BuildPy(_build_py):  # type: ignore[misc]  # setuptools ships no type information
    """``build_py`` that leaves out the files of ``pytriton-client`` (modules and data alike, the
    implicit ``py.typed`` included): two distributions never own one file."""

    def find_package_modules(self, package: str, package_dir: str) -> List[Tuple[str, str, str]]:
        found: List[Tuple[str, str, str]] = super().find_package_modules(package, package_dir)
        return [module for module in found if not _client_file(module[2])]

    def find_data_files(self, package: str, src_dir: str) -> List[str]:
        return [name for name in super().find_data_files(package, src_dir) if not _client_file(name)]


def _client_file(path: str) -> bool:
    return client_set.owns(os.path.relpath(os.path.realpath(path), PROJECT_ROOT))


_CLIENT_REQUIREMENT = re.compile(r"^Requires-Dist:\s*pytriton[-_.]client\b", re.IGNORECASE)


def without_client_requirement(metadata: str) -> str:
    """Core metadata (a ``METADATA`` file's text) without its ``Requires-Dist`` on pytriton-client."""
    return "".join(line for line in metadata.splitlines(keepends=True) if not _CLIENT_REQUIREMENT.match(line))


CLIENT_PROJECT = PROJECT_ROOT / "pytriton-client"
"""The client distribution's project folder, in a checkout (an sdist holds none)."""


def with_local_client(metadata: str, client_project: Path) -> str:
    """Core metadata whose ``Requires-Dist`` on pytriton-client names the folder `client_project`
    (a direct reference, ``pytriton-client @ file://...``), for pip to build it from there."""
    reference = f"Requires-Dist: pytriton-client @ {client_project.resolve().as_uri()}"
    lines = []
    for line in metadata.splitlines(keepends=True):
        if _CLIENT_REQUIREMENT.match(line):
            _, semicolon, marker = line.partition(";")
            # After a URL, PEP 508 wants a space before the marker's semicolon.
            line = f"{reference} ; {marker.strip()}\n" if semicolon else f"{reference}\n"
        lines.append(line)
    return "".join(lines)


def build_outputs(root: Path = PROJECT_ROOT) -> List[Path]:
    """What a build may create in the source tree at `root` (the server tree, setuptools'
    ``build/`` and ``*.egg-info``); ``*.egg-info`` as found now. The blocking clients generated
    from the asyncio ones are committed source (``make generate`` writes them), not build output."""
    return [
        root / "pytriton" / "tritonserver",
        root / "build",
        *root.glob("*.egg-info"),
    ]


@contextlib.contextmanager
def source_tree_kept(root: Path = PROJECT_ROOT) -> Iterator[None]:
    """Run a regular build's step, then remove from `root` what it created there (see the module
    docstring): a user who installs from a checkout keeps a checkout, not 400 MB of build output."""
    present = {path for path in build_outputs(root) if path.exists() or path.is_symlink()}
    try:
        yield
    finally:
        for path in build_outputs(root):
            if path in present:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists() or path.is_symlink():
                path.unlink()
            else:
                continue
            _log(f"removed {path} (made by this build; a regular install leaves the source tree as it was)")


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
    # setuptools answers this by running egg_info, which writes *.egg-info into the checkout.
    with source_tree_kept():
        requires: List[str] = _setuptools.get_requires_for_build_wheel(config_settings)
    return requires


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> List[str]:
    with source_tree_kept():
        requires: List[str] = _setuptools.get_requires_for_build_sdist(config_settings)
    return requires


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    with source_tree_kept():
        name: str = _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    if (CLIENT_PROJECT / "pyproject.toml").is_file():
        # What pip resolves with: the clients from this tree (see the module docstring).
        metadata = Path(metadata_directory) / name / "METADATA"
        metadata.write_text(with_local_client(metadata.read_text(encoding="utf-8"), CLIENT_PROJECT), encoding="utf-8")
    return name


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    with source_tree_kept():
        ensure_server_tree()
        ensure_native_backend(SERVER_DIR)
        # Not the prepared metadata (setuptools would copy it into the wheel): the wheel requires
        # pytriton-client by version, so that a copy installs elsewhere (see the module docstring).
        name: str = _setuptools.build_wheel(wheel_directory, config_settings, None)
    return name


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    # The editable install imports the client files from the source tree: pytriton-client (not on
    # PyPI) is not needed, and a requirement on it would fail the install.
    name: str = _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)
    metadata = Path(metadata_directory) / name / "METADATA"
    metadata.write_text(without_client_requirement(metadata.read_text(encoding="utf-8")), encoding="utf-8")
    return name


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    ensure_server_tree()
    ensure_native_backend(SERVER_DIR)
    # setuptools puts the metadata it finds in the folder it is given into the wheel as it is, and
    # writes its own (with the requirement) otherwise; pip passes the .dist-info folder itself,
    # which setuptools does not take. So the metadata is prepared again, where setuptools finds it.
    with tempfile.TemporaryDirectory(prefix="pytriton-metadata-") as prepared:
        prepare_metadata_for_build_editable(prepared, config_settings)
        name: str = _setuptools.build_editable(wheel_directory, config_settings, prepared)
    return name


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    with source_tree_kept():
        name: str = _setuptools.build_sdist(sdist_directory, config_settings)
    return name
