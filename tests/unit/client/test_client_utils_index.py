"""pytriton.client.utils: model repository index entries -> model states (pure)."""

from __future__ import annotations

from types import SimpleNamespace

from pytriton.client.utils import LATEST_MODEL_VERSION, ModelState, parse_grpc_response, parse_http_response


def test_http_entries_become_states_by_name_and_version():
    entries = [
        {"name": "A", "version": "1", "state": "READY"},
        {"name": "A", "version": "2", "state": "LOADING"},
        {"name": "B", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "C", "version": "3", "state": "UNLOADING"},
    ]
    assert parse_http_response(entries) == {
        ("A", "1"): ModelState.READY,
        ("A", "2"): ModelState.LOADING,
        ("B", "1"): ModelState.UNAVAILABLE,
        ("C", "3"): ModelState.UNLOADING,
    }


def test_entries_without_version_are_left_out_and_without_state_are_loading():
    entries = [
        {"name": "A", "state": "UNAVAILABLE"},
        {"name": "B", "version": "", "state": "READY"},
        {"name": "C", "version": "1"},
    ]
    assert parse_http_response(entries) == {("C", "1"): ModelState.LOADING}


def test_a_state_the_enum_does_not_know_counts_as_unavailable():
    entries = [{"name": "A", "version": "1", "state": "UNKNOWN"}]
    assert parse_http_response(entries) == {("A", "1"): ModelState.UNAVAILABLE}


def test_grpc_messages_give_the_same_states():
    models = [SimpleNamespace(name="A", version="1", state="READY"), SimpleNamespace(name="B", version="", state="")]
    assert parse_grpc_response(models) == {("A", "1"): ModelState.READY}


def test_published_values():
    assert [state.value for state in ModelState] == ["LOADING", "UNLOADING", "UNAVAILABLE", "READY"]
    assert LATEST_MODEL_VERSION == "<latest>"
