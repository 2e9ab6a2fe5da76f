"""Builds the bundle for a GPU machine without network (see bench/README.md, "On a lent GPU machine").

Writes .device/tritonserver-py312.tar.xz and .device/perf_analyzer.tar.xz (the folder is
git-ignored through .git/info/exclude); the wheels go to .device/whl with pip download.
Usage: python bench/device/make_bundle.py NUMPY_1.26.4_CP312_WHEEL TRITONCLIENT_2.41.1_WHEEL

The server tree: pytriton/tritonserver minus stub_python/3.11, the stubs of other Pythons and the
3.13 stub's libpython, plus stub_python/3.12 unpacked from the pinned numpy 1.26.4 cp312 wheel
exactly as build_backend/stub_numpy.py does (same PINNED marker), without numpy's tests folders.
"""

import lzma
import os
import pathlib
import shutil
import sys
import tarfile
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build_backend"))
from stub_numpy import PINNED, sha256_of, unpack_wheel  # noqa: E402

SERVER = REPO / "pytriton" / "tritonserver"
DEV = REPO / ".device"
NUMPY_WHEEL = pathlib.Path(sys.argv[1])  # numpy-1.26.4-cp312-...-x86_64.whl
PA_WHEEL = pathlib.Path(sys.argv[2])  # tritonclient-2.41.1-py3-none-manylinux1_x86_64.whl
STAGE = pathlib.Path("/tmp/devbuild/tritonserver")

version, sha = PINNED[("3.12", "x86_64")]
assert sha256_of(NUMPY_WHEEL) == sha, "numpy wheel hash differs from the pin"


def skip(rel: pathlib.PurePath) -> bool:
    parts = rel.parts
    if parts[:2] == ("stub_python", "3.11") or (parts[:1] == ("stub_python",) and len(parts) >= 2):
        return True  # every existing stub_python/<X.Y>; 3.12 is made below
    if parts[:1] == ("python_backend_stubs",) and len(parts) >= 2 and parts[1] != "3.12":
        return True
    if parts[:1] == ("lib",) and len(parts) == 2 and parts[1].startswith("libpython3-") and ".13." in parts[1]:
        return True  # needed only by the 3.13 stub
    return False


shutil.rmtree(STAGE.parent, ignore_errors=True)
STAGE.mkdir(parents=True)
for dirpath, dirnames, filenames in os.walk(SERVER):
    rel_dir = pathlib.Path(dirpath).relative_to(SERVER)
    dirnames[:] = [d for d in dirnames if not skip(rel_dir / d)]
    (STAGE / rel_dir).mkdir(parents=True, exist_ok=True)
    for name in filenames:
        if not skip(rel_dir / name):
            shutil.copy2(os.path.join(dirpath, name), STAGE / rel_dir / name, follow_symlinks=False)

# stub_python/3.12, the way stub_numpy.ensure_stub_numpy unpacks it, less NumPy's test suites
target = STAGE / "stub_python" / "3.12"
target.mkdir(parents=True)
unpack_wheel(NUMPY_WHEEL, target, f"numpy=={version} sha256={sha}\n", without_tests=True)


def make_tar(out: pathlib.Path, root: pathlib.Path, arcname: str) -> None:
    with lzma.open(out, "wb", preset=9 | lzma.PRESET_EXTREME) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        tar.add(root, arcname=arcname)
    print(f"{out.name}: {out.stat().st_size / 2**20:.1f} MiB")


make_tar(DEV / "tritonserver-py312.tar.xz", STAGE, "tritonserver")

# perf_analyzer: only the binary, from the pinned tritonclient 2.41.1 wheel
sys.path.insert(0, str(REPO / "bench"))
import perfanalyzer  # noqa: E402

assert sha256_of(PA_WHEEL) == perfanalyzer.WHEEL_SHA256, "tritonclient 2.41.1 wheel hash differs from the pin"
pa_stage = pathlib.Path("/tmp/devbuild/pa/bench/bin")
pa_stage.mkdir(parents=True)
binary = pa_stage / f"perf_analyzer-{perfanalyzer.TRITONCLIENT_VERSION}"
with zipfile.ZipFile(PA_WHEEL) as archive, archive.open(perfanalyzer.WHEEL_MEMBER) as src, binary.open("wb") as dst:
    shutil.copyfileobj(src, dst)
binary.chmod(0o755)
make_tar(DEV / "perf_analyzer.tar.xz", pa_stage.parent, "bench")

# The GPU block of the published docs is a test (tests/docs); its page lives beside the checkout
# (../shared/seeds), which does not travel: gpu_check.sh puts this copy there.
seeds = DEV / "seeds"
seeds.mkdir(exist_ok=True)
for page in (REPO.parent / "shared" / "seeds").glob("004_*.txt"):
    shutil.copy2(page, seeds / page.name)
