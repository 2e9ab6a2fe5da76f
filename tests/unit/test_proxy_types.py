"""pytriton.proxy.types: the published import path of the callables' request and response types."""

from __future__ import annotations

from typing import List

import numpy as np

from pytriton.proxy.types import Request, Requests, Response, Responses
from pytriton.worker import request as worker_request


def test_the_types_are_the_ones_the_worker_builds():
    assert Request is worker_request.Request
    assert Response is worker_request.Response
    assert Requests == List[Request] and Responses == List[Response]


def test_a_callable_annotated_with_the_published_types_runs_on_worker_requests():
    def infer(requests: Requests) -> Responses:
        return [Response(data={"y": request.data["x"] * request.parameters.get("k", 1)}) for request in requests]

    requests = [Request({"x": np.arange(3)}, {"k": 2}), Request(data={"x": np.ones(2)})]
    responses = infer(requests)
    assert [r["y"].tolist() for r in responses] == [[0, 2, 4], [1.0, 1.0]]


def test_a_request_built_the_published_way_by_keywords():
    request = Request(data={"x": np.zeros(1)}, parameters={"mode": "greedy"})
    assert request.parameters == {"mode": "greedy"}
    assert list(request.keys()) == ["x"] and list(request.data) == ["x"]
    assert [name for name, _ in request.items()] == ["x"] and len(list(request.values())) == 1
