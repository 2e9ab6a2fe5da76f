"""The start-up warning for verbose tritonserver logging (pure decision, and how it is emitted)."""

from __future__ import annotations

import logging

import pytest

from pytriton.server.config import TritonConfig, verbose_logging_warning
from pytriton.server.config.merge import merge


@pytest.mark.parametrize("level", [None, 0])
def test_no_warning_when_verbose_logging_is_off(level):
    assert verbose_logging_warning(level) is None


@pytest.mark.parametrize("level", [1, 3])
def test_a_positive_level_warns_naming_it_the_cost_and_the_risk(level):
    message = verbose_logging_warning(level)
    assert message is not None
    assert f"log_verbose={level}" in message
    assert "slows the server" in message and "request data" in message


def test_the_effective_level_counts_whether_it_came_from_the_config_or_the_alias_variable(caplog):
    log = logging.getLogger("pytriton.test-verbose")
    with caplog.at_level(logging.WARNING, logger=log.name):
        merge(TritonConfig(log_verbose=2), {}).warn_if_verbose(log)
        merge(None, {"PYTRITON_TRITON_CONFIG_LOG_VERBOSITY": "1"}).warn_if_verbose(log)
        merge(None, {"PYTRITON_TRITON_CONFIG_LOG_VERBOSE": "0"}).warn_if_verbose(log)
        merge(None, {}).warn_if_verbose(log)
    assert [(record.levelno, record.getMessage().split(":")[0]) for record in caplog.records] == [
        (logging.WARNING, "tritonserver runs with log_verbose=2"),
        (logging.WARNING, "tritonserver runs with log_verbose=1"),
    ]
