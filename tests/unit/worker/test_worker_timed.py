"""The execution timeout: `TimedCaller` gives up on a call that hangs and serves the next on a fresh thread."""

import logging
import threading
import time

import pytest

from pytriton.worker.context import TritonContext, current_context
from pytriton.worker.timed import ExecutionTimeout, TimedCaller

CONTEXT = TritonContext("Slow", 1, (), (), None)


def _caller(func, timeout_s=0.3, stopping=None):
    return TimedCaller(func, timeout_s, context=CONTEXT, instance=2, stopping=stopping or threading.Event())


def test_answer_and_error_of_a_call_in_time_come_back_as_from_a_direct_call():
    caller = _caller(lambda x: x * 2)
    try:
        assert caller(21) == 42
        failing = _caller(lambda x: 1 / x)
        with pytest.raises(ZeroDivisionError):
            failing(0)
        assert failing(4) == 0.25  # the thread survives the callable's error
        failing.close()
    finally:
        caller.close()


def test_the_call_sees_the_models_context():
    caller = _caller(lambda _: current_context())
    try:
        assert caller(None) is CONTEXT
    finally:
        caller.close()


def test_hung_call_is_abandoned_with_an_error_naming_the_model_and_the_next_call_is_served(caplog):
    release = threading.Event()
    threads = []

    def func(x):
        threads.append(threading.current_thread())
        if x == "hang":
            release.wait(10)
            return "late"
        return x

    caller = _caller(func)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="pytriton.worker"):
            with pytest.raises(ExecutionTimeout) as info:
                caller("hang")
        waited = time.monotonic() - started
        assert 0.25 <= waited < 1.0
        assert str(info.value) == (
            "Model 'Slow': the inference callable did not return within 0.3 s (ModelConfig.execution_timeout_s); "
            "the call was abandoned"
        )
        assert "Model 'Slow' instance 2" in caplog.text and "abandoning" in caplog.text
        assert caller("next") == "next"
        assert threads[0] is not threads[1]  # served on a fresh thread while the first one hangs
        assert caller.abandoned_running() == 1
        release.set()
        threads[0].join(2)
        assert not threads[0].is_alive()  # once its call returns, the abandoned thread ends; "late" is dropped
        assert caller.abandoned_running() == 0
        assert caller("after") == "after"
    finally:
        release.set()
        caller.close()


def test_stopping_gives_up_on_a_long_call_at_once():
    release = threading.Event()
    stopping = threading.Event()
    caller = _caller(lambda _: release.wait(10), timeout_s=30, stopping=stopping)
    try:
        threading.Timer(0.2, stopping.set).start()
        started = time.monotonic()
        with pytest.raises(ExecutionTimeout, match="the server is stopping"):
            caller(None)
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
        caller.close()


def test_close_ends_the_idle_thread():
    threads = []
    caller = _caller(lambda _: threads.append(threading.current_thread()))
    caller(None)
    caller.close()
    threads[0].join(2)
    assert not threads[0].is_alive()
