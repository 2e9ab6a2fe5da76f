"""pytriton.worker.request.Request: a mutable mapping of input name -> array, with parameters."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

import numpy as np
import pytest

from pytriton.worker.request import Request, Response


def test_request_is_a_mutable_mapping_over_its_data():
    data = {"A": np.arange(3), "B": np.zeros((1, 2))}
    request = Request(data)
    assert isinstance(request, Mapping)
    assert isinstance(request, MutableMapping)
    assert len(request) == 2
    assert list(request) == ["A", "B"]
    assert "A" in request and "C" not in request
    assert request["A"] is data["A"]
    assert request.get("C") is None
    assert dict(request).keys() == {"A", "B"}

    request["C"] = np.ones(1)
    assert request.data["C"] is request["C"]  # `data` is the request itself
    del request["A"]
    assert "A" not in request.data
    assert sorted(request.keys()) == ["B", "C"]
    with pytest.raises(KeyError):
        request["missing"]
    with pytest.raises(KeyError):
        del request["missing"]


def test_mapping_methods():
    request = Request({"A": np.arange(2)})
    request.update(B=np.arange(3))
    assert [(key, value.tolist()) for key, value in request.items()] == [("A", [0, 1]), ("B", [0, 1, 2])]
    assert request.pop("A").tolist() == [0, 1]
    assert request.setdefault("D", np.zeros(1)).tolist() == [0.0]
    assert list(request) == ["B", "D"]


def test_parameters_default_to_an_empty_dict_per_request():
    first, second = Request({}), Request({})
    assert first.parameters == {}
    first.parameters["x"] = 1
    assert second.parameters == {}


def test_parameters_are_kept():
    parameters = {"temperature": 0.5, "mode": "greedy", "flag": True}
    request = Request({"A": np.arange(1)}, parameters)
    assert request.parameters is parameters
    # parameters are not inputs
    assert list(request) == ["A"]
    assert "temperature" not in request


def test_equality_follows_mapping_semantics():
    assert Request({"A": 1}) == {"A": 1}


def test_repr_shows_data_and_parameters():
    text = repr(Request({"A": np.array([1])}, {"p": "v"}))
    assert text.startswith("Request(data={'A': array([1])}")
    assert "parameters={'p': 'v'}" in text


def test_assigning_data_replaces_the_inputs():
    request = Request({"A": np.arange(2)}, {"p": 1})
    request.data = {"B": np.ones(1)}
    assert list(request) == ["B"] and request["B"].tolist() == [1.0]
    assert request.parameters == {"p": 1}
    request.data = request.data  # assigning the request to itself keeps its entries
    assert list(request) == ["B"]


def test_a_response_is_a_dict_of_outputs_reachable_as_data():
    response = Response(data={"Y": np.arange(2)})
    assert isinstance(response, dict) and isinstance(response, MutableMapping)
    assert response.data is response
    response["Z"] = np.zeros(1)
    assert sorted(response.data) == ["Y", "Z"]
    del response.data["Y"]
    assert list(response) == ["Z"]
    assert repr(Response({})) == "Response(data={})"
    with pytest.raises(AttributeError):
        response.parameters = {}  # type: ignore[attr-defined]  # a response has no parameters
