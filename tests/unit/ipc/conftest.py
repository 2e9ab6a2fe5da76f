"""Shared-memory fixture of the ipc tests: a unique segment prefix, checked clean afterwards."""

import os
import secrets

import pytest
from support import shm_entries

from pytriton.ipc.shm import SHM_DIR


@pytest.fixture
def shm_prefix():
    """A unique segment-name prefix; the test must leave nothing with it in /dev/shm."""
    prefix = f"pytriton-test-{secrets.token_hex(4)}"
    yield prefix
    leftovers = shm_entries(prefix)
    for name in leftovers:
        os.unlink(os.path.join(SHM_DIR, name))
    assert leftovers == []
