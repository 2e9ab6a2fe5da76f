"""pytriton.client.readiness.readiness_steps, driven by hand: what a wait concludes from what the server says."""

from __future__ import annotations

import time

import pytest

from pytriton.client.exceptions import PyTritonClientModelUnavailableError, PyTritonClientTimeoutError
from pytriton.client.readiness import presence_from_error, readiness_steps, ready_names, unknown_model_message
from pytriton.client.url import parse_url


def _url():
    return parse_url("localhost:8000")


def _drive(answers, timeout_s, unknown_fails=True):
    """Run the steps, answering each probe kind from `answers`; the kinds asked, in order."""
    asked = []
    steps = readiness_steps(_url(), "Missing", "", timeout_s, unknown_fails)
    outcome = None
    try:
        while True:
            probe = steps.send(outcome)
            asked.append(probe.kind)
            if probe.kind == "sleep":
                time.sleep(min(probe.timeout_s, 0.01))
                outcome = None
            else:
                outcome = answers[probe.kind]
    except StopIteration:
        return asked


def test_a_model_the_server_does_not_have_fails_soon_naming_what_it_serves():
    started = time.monotonic()
    with pytest.raises(PyTritonClientModelUnavailableError) as info:
        _drive({"server": True, "model": False, "presence": False, "served": ["Add", "Echo"]}, timeout_s=0.4)
    assert time.monotonic() - started < 0.4  # well before the whole wait's end
    assert str(info.value) == "model 'Missing' is not served at http://localhost:8000; this server serves: Add, Echo"


def test_a_model_the_server_has_but_has_not_loaded_keeps_the_wait():
    with pytest.raises(PyTritonClientTimeoutError, match="model 'Missing' .* is not ready"):
        _drive({"server": True, "model": False, "presence": True}, timeout_s=0.3)


def test_a_server_that_does_not_say_keeps_the_wait():
    with pytest.raises(PyTritonClientTimeoutError):
        _drive({"server": True, "model": False, "presence": None}, timeout_s=0.3)


def test_an_explicit_wait_waits_its_whole_time_for_a_model_not_there_yet():
    with pytest.raises(PyTritonClientTimeoutError):
        _drive({"server": True, "model": False, "presence": False}, timeout_s=0.3, unknown_fails=False)


def test_a_ready_model_ends_the_wait_without_asking_more():
    assert _drive({"server": True, "model": True}, timeout_s=1.0) == ["server", "model"]


def test_reading_the_servers_answers():
    assert presence_from_error(Exception("[400] Request for unknown model: 'X' is not found")) is False
    assert presence_from_error(Exception("Request for unknown model: 'X' has no available versions")) is True
    assert presence_from_error(Exception("connection refused")) is None
    assert ready_names({"models": [{"name": "b", "state": "READY"}, {"name": "a", "state": "READY"},
                                   {"name": "c", "state": "UNAVAILABLE"}]}) == ["a", "b"]
    assert ready_names([{"name": "a", "state": "READY"}]) == ["a"]  # HTTP gives a list
    assert "repository API is restricted" in unknown_model_message(_url(), "X", None)
    assert unknown_model_message(_url(), "X", []).endswith("this server serves: no model at all")


def test_the_server_wait_asks_live_then_ready_and_names_what_it_saw_last():
    from pytriton.client.readiness import server_steps
    from pytriton.client.url import parse_url

    url = parse_url("http://127.0.0.1:1")
    steps = server_steps(url, 5.0)
    assert steps.send(None).kind == "live"
    assert steps.send(True).kind == "server"
    with pytest.raises(StopIteration):
        steps.send(True)  # live and ready: the wait is over

    steps = server_steps(url, 0.01)
    assert steps.send(None).kind == "live"
    with pytest.raises(PyTritonClientTimeoutError, match="last seen: no route"):
        steps.send(PyTritonClientModelUnavailableError("no route"))
        steps.send(None)


def test_a_long_wait_says_what_it_waits_for_after_two_seconds_then_every_thirty(caplog):
    from pytriton.client.readiness import WAIT_NOTICE_AFTER_S, WAIT_NOTICE_EVERY_S, WaitNotices

    now = [100.0]
    notices = WaitNotices(_url(), "the server and model 'Scale'", 300.0, clock=lambda: now[0])
    refused = PyTritonClientModelUnavailableError(
        "Error occurred while checking server and model readiness. Cannot reach the server at "
        "http://localhost:8000: [Errno 111] Connection refused")
    said = []
    for step in range(0, 700):  # 70 s of polls, one every 0.1 s
        now[0] = 100.0 + step / 10
        caplog.clear()
        with caplog.at_level("INFO", logger="pytriton.client.wait"):
            notices.seen(refused, str(refused))
        said += [(now[0] - 100.0, record.getMessage()) for record in caplog.records]
    assert [round(at, 1) for at, _ in said] == [WAIT_NOTICE_AFTER_S, WAIT_NOTICE_AFTER_S + WAIT_NOTICE_EVERY_S,
                                                WAIT_NOTICE_AFTER_S + 2 * WAIT_NOTICE_EVERY_S]
    assert said[0][1] == (
        "nothing listens at http://localhost:8000 yet ([Errno 111] Connection refused); waiting up to 300 s "
        "(init_timeout_s) for the server and model 'Scale', 298 s left. Is the server started, and is this its "
        "address and port?")
    assert said[1][1].endswith("268 s left. Is the server started, and is this its address and port?")


def test_the_wait_message_names_a_server_that_answers_but_is_not_ready():
    from pytriton.client.readiness import wait_message

    stalled = PyTritonClientTimeoutError("no answer within 1 s")
    assert wait_message(_url(), "the server", stalled, str(stalled), 5.0, 60.0) == (
        "the server at http://localhost:8000 accepts connections but does not answer yet; waiting up to 60 s "
        "(init_timeout_s) for the server, 55 s left")
    assert wait_message(_url(), "the server and model 'M'", False, "model 'M' (version default) is not ready",
                        3.0, 10.0) == ("model 'M' (version default) is not ready at http://localhost:8000; waiting up "
                                       "to 10 s (init_timeout_s) for the server and model 'M', 7 s left")


def test_the_wait_message_names_the_timeout_the_caller_gave():
    from pytriton.client.readiness import wait_message

    said = wait_message(_url(), "the server and model 'M'", False, "the server is not ready", 3.0, 10.0, "timeout_s")
    assert "waiting up to 10 s (timeout_s) for the server and model 'M'" in said
    assert "init_timeout_s" not in said


def test_a_server_that_stops_ends_the_wait_at_once():
    """A pytriton server that drains reports not ready and has its stopping model (a failed load):
    waiting longer cannot make it ready, so the wait fails, saying so."""
    from pytriton.client.readiness import server_steps

    started = time.monotonic()
    with pytest.raises(PyTritonClientModelUnavailableError) as info:
        _drive({"server": False, "stopping": True}, timeout_s=5.0)
    assert time.monotonic() - started < 1.0
    assert str(info.value).startswith("the server at http://localhost:8000 is stopping")
    steps = server_steps(_url(), 5.0)
    assert [steps.send(None).kind, steps.send(True).kind, steps.send(False).kind] == ["live", "server", "stopping"]
    with pytest.raises(PyTritonClientModelUnavailableError, match="is stopping"):
        steps.send(True)


def test_a_server_still_starting_keeps_the_wait():
    with pytest.raises(PyTritonClientTimeoutError, match="the server is not ready"):
        _drive({"server": False, "stopping": False}, timeout_s=0.3)
    with pytest.raises(PyTritonClientTimeoutError):  # a server that does not say (restricted metadata)
        _drive({"server": False, "stopping": None}, timeout_s=0.3)


def test_the_unknown_model_hint_points_at_the_start_line_a_serving_script_really_prints():
    from pytriton.server.announce import serving_line
    from pytriton.server.config import TritonConfig

    hint = unknown_model_message(_url(), "Scal", None)
    assert hint.startswith("model 'Scal' is not served at http://localhost:8000; the serving script names the models "
                           "it serves in its start line ('pytriton: serving ...' on its stderr)")
    line = "pytriton: " + serving_line(TritonConfig(), [("Scale", 1)])  # as the notice handler writes it
    assert line.startswith("pytriton: serving ") and "Scale" in line


def test_waits_for_the_same_thing_at_the_same_time_speak_once(caplog):
    import gc

    from pytriton.client.readiness import WaitNotices

    now = [0.0]
    refused = PyTritonClientModelUnavailableError("Cannot reach the server at http://localhost:8000: refused")
    threads = [WaitNotices(_url(), "the server and model 'Echo'", 300.0, clock=lambda: now[0]) for _ in range(8)]
    other = WaitNotices(_url(), "the server and model 'Other'", 300.0, clock=lambda: now[0])
    with caplog.at_level("INFO", logger="pytriton.client.wait"):
        now[0] = 2.5
        for waiting in (*threads, other):
            waiting.seen(refused, str(refused))
        assert [record.getMessage().split("for the server and model ")[1][:7] for record in caplog.records] == [
            "'Echo',", "'Other'"]
        caplog.clear()
        del threads[0]  # the wait that spoke ended: the next one due speaks
        gc.collect()
        now[0] = 40.0
        for waiting in threads:
            waiting.seen(refused, str(refused))
        assert len(caplog.records) == 1
