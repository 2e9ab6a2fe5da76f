"""pytest configuration: makes `tests/support.py` importable as `support` for every test layer,
and the fixtures more than one layer uses."""

import pathlib
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))


@pytest.fixture
def short_dir():
    """A folder with a short path, removed after the test: a workspace's sockets must stay under
    the Unix limit, and pytest's `tmp_path` (`popen-gwN/...` under a parallel run) can be too long."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="ptws-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
