"""The deadlines of `pytriton.worker.batches`: which requests expired, and the parameter the callable never sees."""

from __future__ import annotations

import numpy as np

from pytriton.client.codec import with_deadline
from pytriton.ipc.protocol import DEADLINE_PARAMETER
from pytriton.worker.batches import expired_message, pop_expired
from pytriton.worker.request import Request


def _request(**parameters):
    return Request({"x": np.zeros(1)}, dict(parameters))


def test_expired_requests_are_found_and_the_deadline_parameter_is_removed_from_all():
    now = 1_000.0
    requests = [
        _request(**{DEADLINE_PARAMETER: 999_000}),  # passed a second ago
        _request(**{DEADLINE_PARAMETER: 1_001_000}, temperature=0.5),  # a second to go
        _request(),  # a client that sends no deadline
        _request(**{DEADLINE_PARAMETER: "soon"}),  # not ours: ignored
    ]
    assert pop_expired(requests, now) == [0]
    assert [r.parameters for r in requests] == [{}, {"temperature": 0.5}, {}, {}]


def test_the_client_sends_its_timeout_as_an_absolute_deadline_in_milliseconds():
    parameters = with_deadline({"temperature": 0.5}, timeout_s=2.5, now_s=100.0)
    assert parameters == {"temperature": 0.5, DEADLINE_PARAMETER: 102_500}
    assert with_deadline(None, 1.0, 0.0) == {DEADLINE_PARAMETER: 1000}


def test_the_message_names_the_model_and_the_cause():
    message = expired_message("Slow")
    assert "Model 'Slow'" in message and "deadline" in message and "not computed" in message
