"""The readiness wait: a monotonic deadline, and every poll bounded by the time left."""

from __future__ import annotations

import contextlib
import time

import pytest

from pytriton.client.core import TritonCore
from pytriton.client.exceptions import PyTritonClientModelUnavailableError, PyTritonClientTimeoutError
from pytriton.client.url import parse_url
from pytriton.client.waits import wait_until_ready
from pytriton.client_contract import STOPPING_MODEL


class ScriptedCore(TritonCore):
    """Answers readiness from a script; records the time limit each poll was given.

    The core's calls go to the ``tritonclient`` client `_client_for` hands out: here a scripted
    one, told the call's time limit as the core would build a short-lived HTTP client with it.
    """

    def __init__(self, server_ready=lambda: True, model_ready=lambda: True, poll_delay_s=0.0):
        super().__init__(parse_url("localhost:1"), 60.0)
        self.server_ready, self.model_ready, self.poll_delay_s = server_ready, model_ready, poll_delay_s
        self.timeouts: list[float] = []

    @contextlib.contextmanager
    def _client_for(self, timeout_s):
        yield _ScriptedClient(self, timeout_s)

    def close(self):
        pass


class _ScriptedClient:
    def __init__(self, core, timeout_s):
        self.core, self.timeout_s = core, timeout_s

    def _poll(self, answer):
        core = self.core
        core.timeouts.append(self.timeout_s)
        time.sleep(min(core.poll_delay_s, self.timeout_s))
        if core.poll_delay_s > self.timeout_s:
            raise TimeoutError("timed out")  # what a socket does; the core translates it
        return answer()

    def is_server_live(self, **_):
        return True

    def is_server_ready(self, **_):
        return self._poll(self.core.server_ready)

    def is_model_ready(self, model_name, model_version, **_):
        return self._poll(self.core.model_ready)

    def get_model_config(self, model_name, model_version, **_):
        return {"name": model_name}

    def get_model_metadata(self, model_name, **_):
        if model_name == STOPPING_MODEL:  # a server that is not stopping has no such model
            raise Exception(f"[400] Request for unknown model: '{model_name}' is not found")
        return {"name": model_name}  # the server has it

    def get_model_repository_index(self, **_):
        return []


def test_returns_as_soon_as_ready():
    core = ScriptedCore()
    start = time.monotonic()
    wait_until_ready(core, "M", "", 5.0)
    assert time.monotonic() - start < 0.5


def test_model_never_ready_times_out_on_time_and_says_what_was_seen():
    core = ScriptedCore(model_ready=lambda: False)
    start = time.monotonic()
    with pytest.raises(
        PyTritonClientTimeoutError, match=r"within 0.5 s; last seen: model 'M' \(version 3\) is not ready"
    ):
        wait_until_ready(core, "M", "3", 0.5)
    assert 0.45 <= time.monotonic() - start < 0.8


def test_unreachable_server_counts_as_not_ready():
    def refuse():
        raise PyTritonClientModelUnavailableError("Cannot reach the server")

    with pytest.raises(PyTritonClientTimeoutError, match="last seen: Cannot reach the server"):
        wait_until_ready(ScriptedCore(server_ready=refuse), "M", "", 0.3)


def test_each_poll_gets_only_the_time_left_so_a_silent_server_cannot_stretch_the_wait():
    core = ScriptedCore(poll_delay_s=10.0)  # a server that accepts and never answers
    start = time.monotonic()
    with pytest.raises(PyTritonClientTimeoutError):
        wait_until_ready(core, "M", "", 0.6)
    assert time.monotonic() - start < 0.9
    assert core.timeouts and all(limit <= 0.6 for limit in core.timeouts)


def test_becomes_ready_later():
    answers = iter([False, False, True])
    wait_until_ready(ScriptedCore(server_ready=lambda: next(answers)), "M", "", 5.0)
