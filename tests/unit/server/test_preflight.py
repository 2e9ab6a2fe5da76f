"""pytriton.server.preflight: the start-up warning about a small /dev/shm."""

from __future__ import annotations

import logging

import numpy as np

from pytriton.ipc.shm import MIB, ShmUsage
from pytriton.model_config import ModelConfig, Tensor
from pytriton.server import preflight
from pytriton.server.preflight import SHM_FLOOR_BYTES, full_batch_bytes, shm_warning, warn_if_shm_small
from pytriton.worker.context import TritonContext


def _context(name, inputs, outputs, config=None):
    return TritonContext(name, 1, tuple(inputs), tuple(outputs), config or ModelConfig())


MATRIX = Tensor(shape=(1024, 1024), dtype=np.float32, name="M")  # 4 MiB a sample


def test_full_batch_bytes_of_fixed_shapes_times_max_batch_size():
    assert full_batch_bytes([MATRIX], [MATRIX], ModelConfig(max_batch_size=16)) == 2 * 16 * 4 * MIB
    assert full_batch_bytes([MATRIX], [MATRIX], ModelConfig(batching=False)) == 8 * MIB


def test_full_batch_bytes_unknown_for_variable_axes_or_bytes():
    variable = Tensor(shape=(-1, 3), dtype=np.float32, name="V")
    text = Tensor(shape=(1,), dtype=object, name="T")
    assert full_batch_bytes([MATRIX, variable], [MATRIX], ModelConfig()) is None
    assert full_batch_bytes([MATRIX], [text], ModelConfig()) is None


def test_no_warning_for_a_large_shm():
    assert shm_warning(SHM_FLOOR_BYTES, SHM_FLOOR_BYTES, {}) is None
    assert shm_warning(8 << 30, 8 << 30, {"m": 100 * MIB}) is None


def test_docker_default_shm_is_warned_about_with_its_size_and_the_fix():
    message = shm_warning(64 * MIB, 63 * MIB, {})
    assert message is not None
    assert message.startswith("/dev/shm is 64.0 MiB (63.0 MiB free)")
    assert "less than 256 MiB" in message
    assert "docker run --shm-size=256m" in message
    assert "emptyDir" in message and "sizeLimit: 256Mi" in message


def test_a_model_that_needs_more_than_the_floor_is_named():
    message = shm_warning(256 * MIB, 250 * MIB, {"small": 1 * MIB, "big": 128 * MIB})
    assert message is not None
    assert "model 'big' moves 128.0 MiB" in message
    assert "wants 512 MiB" in message
    assert "--shm-size=512m" in message
    assert shm_warning(512 * MIB, 500 * MIB, {"big": 128 * MIB}) is None


def test_warn_if_shm_small_logs_once_and_returns_the_text(caplog, monkeypatch):
    monkeypatch.setattr(preflight, "shm_usage", lambda directory: ShmUsage(64 * MIB, 60 * MIB))
    models = [
        _context("big", [MATRIX], [MATRIX], ModelConfig(max_batch_size=64)),  # 512 MiB a batch
        _context("free", [Tensor(shape=(-1,), dtype=np.float32)], [MATRIX]),
    ]
    with caplog.at_level(logging.WARNING, logger="pytriton.triton"):
        message = preflight.warn_if_shm_small(models)
    assert message is not None
    assert [r.getMessage() for r in caplog.records] == [message]
    assert "/dev/shm is 64.0 MiB (60.0 MiB free)" in message
    assert "model 'big' moves 512.0 MiB" in message


def test_warn_if_shm_small_is_quiet_on_a_large_shm(caplog, monkeypatch):
    monkeypatch.setattr(preflight, "shm_usage", lambda directory: ShmUsage(8 << 30, 8 << 30))
    with caplog.at_level(logging.WARNING, logger="pytriton.triton"):
        assert preflight.warn_if_shm_small([_context("m", [MATRIX], [MATRIX])]) is None
    assert not caplog.records


def test_warn_if_shm_small_is_silent_where_the_directory_cannot_be_read(caplog, tmp_path):
    with caplog.at_level(logging.WARNING, logger="pytriton.triton"):
        assert warn_if_shm_small([], directory=str(tmp_path / "missing")) is None
    assert not caplog.records
