"""A server started with verbose logging says once, at start, what that costs (real tritonserver)."""

from __future__ import annotations

import logging

import pytest
from support import server_config

from pytriton.triton import Triton

pytestmark = pytest.mark.functional


def _verbose_warnings(caplog) -> list:
    return [
        record for record in caplog.records
        if record.name == "pytriton.triton" and "verbose logging slows the server" in record.getMessage()
    ]


def test_log_verbose_from_the_alias_variable_logs_one_warning_at_start(caplog, monkeypatch):
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_LOG_VERBOSITY", "1")
    caplog.set_level(logging.WARNING, logger="pytriton.triton")
    triton = Triton(config=server_config())
    try:
        assert _verbose_warnings(caplog) == []  # said when the server starts, not when configured
        triton.run()
        triton.run()  # already running: no second warning
        assert triton.is_alive()
    finally:
        triton.stop()
    (record,) = _verbose_warnings(caplog)
    assert record.levelno == logging.WARNING
    assert "log_verbose=1" in record.getMessage() and "request data" in record.getMessage()


def test_no_warning_without_verbose_logging(caplog, monkeypatch):
    monkeypatch.delenv("PYTRITON_TRITON_CONFIG_LOG_VERBOSE", raising=False)
    monkeypatch.delenv("PYTRITON_TRITON_CONFIG_LOG_VERBOSITY", raising=False)
    caplog.set_level(logging.WARNING, logger="pytriton.triton")
    triton = Triton(config=server_config(log_verbose=0))
    try:
        triton.run()
        assert triton.is_alive()
    finally:
        triton.stop()
    assert _verbose_warnings(caplog) == []
