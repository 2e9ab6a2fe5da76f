"""Build step: a NumPy 1.x for the Python-backend stub of the bundled Triton 2.51.

The stubs in the nvidia-pytriton 0.7.0 wheel are compiled against the NumPy 1.x ABI. Under
NumPy 2 they hand the model corrupted input arrays and send empty outputs (checked on this
project's machines: a plain identity ``model.py`` answers ``binary_data_size: 0``). The stub's
embedded interpreter therefore imports a private NumPy 1.x, unpacked here into
``pytriton/tritonserver/stub_python/<X.Y>/``; the user's own process keeps whatever NumPy it has.

The pinned wheels are fetched through ``pip download`` (the user's index applies), checked
against the hashes below, cached beside the server wheel and unpacked whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Tuple

# (python X.Y, arch) -> (numpy version, wheel sha256). NumPy 1.x has no release for Python 3.13.
PINNED: Dict[Tuple[str, str], Tuple[str, str]] = {
    ("3.8", "x86_64"): ("1.24.4", "dd80e219fd4c71fc3699fc1dadac5dcf4fd882bfc6f7ec53d30fa197b8ee22dc"),
    ("3.8", "aarch64"): ("1.24.4", "a5425b114831d1e77e4b5d812b69d11d962e104095a5b9c3b641a218abcc050e"),
    ("3.9", "x86_64"): ("1.26.4", "f870204a840a60da0b12273ef34f7051e98c3b5961b61b0c2c1be6dfd64fbcd3"),
    ("3.9", "aarch64"): ("1.26.4", "d5241e0a80d808d70546c697135da2c613f30e28251ff8307eb72ba696945764"),
    ("3.10", "x86_64"): ("1.26.4", "ffa75af20b44f8dba823498024771d5ac50620e6915abac414251bd971b4529f"),
    ("3.10", "aarch64"): ("1.26.4", "d209d8969599b27ad20994c8e41936ee0964e6da07478d6c35016bc386b66ad4"),
    ("3.11", "x86_64"): ("1.26.4", "666dbfb6ec68962c033a450943ded891bed2d54e6755e35e5835d63f4f6931d5"),
    ("3.11", "aarch64"): ("1.26.4", "7ab55401287bfec946ced39700c053796e7cc0e3acbef09993a9ad2adba6ca6e"),
    ("3.12", "x86_64"): ("1.26.4", "675d61ffbfa78604709862923189bad94014bef562cc35cf61d3a07bba02a7ed"),
    ("3.12", "aarch64"): ("1.26.4", "9fad7dcb1aac3c7f0584a5a8133e3a43eeb2fe127f47e3632d43d677c66c102b"),
}


def _log(message: str) -> None:
    print(f"[pytriton build] {message}", file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (wheels are tens of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(version: str, sha256: str, python: str, arch: str, cache: Path) -> Path:
    tag = python.replace(".", "")
    for cached in cache.glob(f"numpy-{version}-cp{tag}-cp{tag}-*{arch}*.whl"):
        if sha256_of(cached) == sha256:
            _log(f"using cached {cached} (sha256 verified, no download)")
            return cached
        cached.unlink()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=str(cache)) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
            "--progress-bar=off", "--python-version", python, "--implementation", "cp",
            "--platform", f"manylinux2014_{arch}", "--dest", tmp, f"numpy=={version}",
        ]  # fmt: skip
        _log(f"downloading numpy {version} for the Triton stub: {' '.join(command)}")
        subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, check=True)
        (downloaded,) = Path(tmp).glob("numpy-*.whl")
        if sha256_of(downloaded) != sha256:
            raise RuntimeError(f"{downloaded.name} from your pip index does not have the pinned sha256 {sha256}")
        target = cache / downloaded.name
        os.replace(str(downloaded), str(target))
    return target


def unpack_wheel(wheel: Path, folder: Path, pinned: str, without_tests: bool = False) -> None:
    """Unpack `wheel` into `folder` as the stub imports it, with the `pinned` line in its PINNED
    file (what the install check reads); `without_tests` leaves NumPy's own test suites out."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            parts = Path(info.filename).parts
            if ".." in parts:
                raise RuntimeError(f"refusing suspicious member {info.filename!r} in {wheel}")
            if without_tests and "tests" in parts:
                continue
            archive.extract(info, folder)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                (folder / info.filename).chmod(mode | 0o644)
    (folder / "PINNED").write_text(pinned)
    folder.chmod(0o755)


def ensure_stub_numpy(server_dir: Path, cache: Path, arch: str) -> None:
    """Unpack the pinned NumPy 1.x for the building interpreter's Python into the server tree."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    pinned = PINNED.get((python, arch))
    if pinned is None:
        _log(f"no NumPy 1.x exists for Python {python}/{arch}; the Triton stub will use the environment's NumPy")
        return
    version, sha256 = pinned
    target = server_dir / "stub_python" / python
    marker = target / "PINNED"
    if marker.is_file() and marker.read_text() == f"numpy=={version} sha256={sha256}\n":
        return
    wheel = _fetch(version, sha256, python, arch, cache)
    staging = Path(tempfile.mkdtemp(prefix=".stub-python-", dir=str(server_dir)))
    try:
        unpack_wheel(wheel, staging, f"numpy=={version} sha256={sha256}\n")
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(str(staging), str(target))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"unpacked numpy {version} for the Triton stub into {target}")
