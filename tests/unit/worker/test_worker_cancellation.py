"""`CancelProbe`: what `request.is_cancelled()` answers from the proxy's Cancel messages."""

import numpy as np

from pytriton.worker.request import CancelProbe, Request, rebuilt


def _batch(count, reads):
    probe = CancelProbe()
    requests = [Request({"x": np.ones(1)}) for _ in range(count)]
    calls = []

    def reader():
        calls.append(1)
        return reads.pop(0) if reads else None

    probe.begin(requests, reader)
    return probe, requests, calls


def test_positions_the_proxy_named_are_cancelled_and_the_others_not():
    probe, requests, _ = _batch(3, [(0, 2)])
    assert [r.is_cancelled() for r in requests] == [True, False, True]
    assert not probe.all_cancelled()


def test_an_empty_cancel_means_every_request():
    probe, requests, _ = _batch(2, [()])
    assert all(r.is_cancelled() for r in requests) and probe.all_cancelled()


def test_a_request_rebuilt_by_a_decorator_answers_as_its_origin():
    _, requests, _ = _batch(2, [(1,)])
    assert rebuilt(requests[1], {"x": np.zeros(1)}).is_cancelled() is True
    assert rebuilt(requests[0], {"x": np.zeros(1)}).is_cancelled() is False


def test_the_channel_is_read_at_most_every_10_ms_however_often_asked():
    _, requests, calls = _batch(1, [])
    for _ in range(1000):
        requests[0].is_cancelled()
    assert len(calls) <= 2


def test_without_a_reader_nothing_is_cancelled():
    probe = CancelProbe()
    request = Request({"x": np.ones(1)})
    probe.begin([request], None)
    assert request.is_cancelled() is False and Request({}).is_cancelled() is False
