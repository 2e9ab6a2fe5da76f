"""The stopping flag (pytriton/ipc/stopping.py): written lowered, raised once, seen through a
mapping made before the raise, as the backend and the proxy map it at load."""

from __future__ import annotations

import json

from pytriton.ipc.stopping import (
    ABANDONED,
    FLAG_BYTES,
    FlagView,
    abandoned,
    create_flag,
    raise_flag,
    refusal,
    refusing_config,
)


def test_a_mapping_made_before_the_raise_sees_it(tmp_path):
    path = tmp_path / "stopping"
    create_flag(path)
    assert path.read_bytes() == bytes(FLAG_BYTES)
    view = FlagView.open(str(path))
    assert view is not None and not view.raised()
    raise_flag(path)
    assert view.raised() and not view.abandoned()
    raise_flag(path, ABANDONED)  # a second signal
    assert view.raised() and view.abandoned()
    create_flag(path)  # the next start of a workspace the user chose lowers it again
    assert not view.raised() and not view.abandoned()


def test_no_path_or_no_file_means_nothing_is_refused(tmp_path):
    assert FlagView.open(None) is None
    assert FlagView.open("") is None
    assert FlagView.open(str(tmp_path / "missing")) is None


def test_the_refusal_names_the_model_and_says_to_retry():
    text = refusal("Sleepy")
    assert "Model 'Sleepy'" in text and "stopping" in text and "again" in text


def test_the_error_of_a_request_given_up_says_to_retry():
    text = abandoned("Sleepy")
    assert "Model 'Sleepy'" in text and "stopped" in text and "again" in text


def test_the_refusing_configuration_keeps_what_a_request_is_checked_against_and_refuses():
    served = {
        "name": "Sleepy", "backend": "python", "runtime": "", "default_model_filename": "model.py",
        "version_policy": {"specific": {"versions": [1, 2]}}, "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}],
        "dynamic_batching": {"max_queue_delay_microseconds": 5000, "preferred_batch_size": [8]},
        "model_transaction_policy": {"decoupled": True},
        "instance_group": [{"name": "Sleepy_0", "kind": "KIND_GPU", "count": 4, "gpus": [0]}],
        "model_warmup": [{"name": "w", "batch_size": 1}], "response_cache": {"enable": True},
        "parameters": {"pytriton.endpoint": {"string_value": "ipc:///x"}},
    }
    config = json.loads(refusing_config(served, "pytriton", 1234))
    for kept in ("name", "version_policy", "max_batch_size", "input", "output", "model_transaction_policy"):
        assert config[kept] == served[kept], kept  # requests are checked as before; a stream stays a stream
    assert config["backend"] == "pytriton"
    assert config["parameters"]["pytriton.refuse"] == {"string_value": "1"}
    assert config["parameters"]["pytriton.worker_pid"] == {"string_value": "1234"}
    assert config["parameters"]["pytriton.endpoint"] == served["parameters"]["pytriton.endpoint"]
    assert config["instance_group"] == [{"kind": "KIND_CPU", "count": 1}]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 0  # a refusal waits for nothing
    for dropped in ("model_warmup", "response_cache", "runtime", "default_model_filename"):
        assert dropped not in config, dropped  # a refused warm-up would fail the load; a cached answer is no refusal
    assert served["parameters"] == {"pytriton.endpoint": {"string_value": "ipc:///x"}}  # not changed in place
