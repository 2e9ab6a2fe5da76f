"""Names added for code written against published PyTriton 0.7.0, with the real server.

`pytriton.proxy.types` annotations on a served callable, `TritonConfig.metrics_config` (explicit
and through indexed environment variables), the SageMaker endpoint, `pytriton.client.auth`
headers against restricted APIs, what `Triton.stop()` / `RemoteTriton.stop()` return, and a
`ModelConfig` whose fields were assigned after it was built.
"""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Iterator, List

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import free_ports, http_status, server_config

from pytriton.client import ModelClient
from pytriton.client.auth import create_auth_headers, extract_access_token_from_headers
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import ModelConfig, ModelWarmup, Tensor, WarmupInput
from pytriton.proxy.types import Request, Response
from pytriton.triton import RemoteTriton, Triton, TritonSecurityConfig

pytestmark = pytest.mark.functional

SCALE = {
    "inputs": [Tensor(name="x", dtype=np.float32, shape=(-1,))],
    "outputs": [Tensor(name="y", dtype=np.float32, shape=(-1,)), Tensor(name="kind", dtype=bytes, shape=(1,))],
    "config": ModelConfig(max_batch_size=8),
}


def scale(requests: List[Request]) -> List[Response]:
    """A callable written the published way: typed requests, `.data`, `.parameters`, `Response`."""
    responses = []
    for request in requests:
        factor = np.float32(request.parameters.get("factor", 1))
        kind = type(request).__name__.encode()
        batch = request.data["x"].shape[0]
        responses.append(Response(data={"y": request["x"] * factor, "kind": np.array([[kind]] * batch)}))
    return responses


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def _quantiles(metrics: str, model: str) -> List[str]:
    series = rf'nv_inference_request_summary_us\{{model="{model}",version="1",quantile="([0-9.]+)"\}}'
    pattern = re.compile("^" + series, re.M)
    return pattern.findall(metrics)


@pytest.fixture(scope="module")
def served() -> Iterator[dict]:
    sagemaker_port = free_ports(1)[0]
    config = server_config(
        metrics_config=["summary_latencies=true", "summary_quantiles=0.25:0.01"],
        allow_sagemaker=True,
        sagemaker_port=sagemaker_port,
    )
    # The SageMaker endpoint does not check the access token: confirmed (see test_unguarded_endpoints).
    with Triton(config=config, security_config=TritonSecurityConfig(allow_unguarded_endpoints=True)) as triton:
        triton.bind("Scale", scale, **SCALE)
        yield {"triton": triton, "config": config, "sagemaker_port": sagemaker_port}


def test_a_callable_typed_with_proxy_types_gets_those_requests_and_may_answer_responses(served):
    url = f"http://127.0.0.1:{served['config'].http_port}"
    with ModelClient(url, "Scale") as client:
        result = client.infer_batch(x=np.array([[1.0, 2.0]], np.float32), parameters={"factor": 3})
    assert result["y"].tolist() == [[3.0, 6.0]]
    assert result["kind"].tolist() == [[b"Request"]]


def test_metrics_config_reaches_the_server(served):
    config = served["config"]
    with ModelClient(f"http://127.0.0.1:{config.http_port}", "Scale") as client:
        client.infer_batch(x=np.ones((1, 2), np.float32))
    # Summaries are off by default, and 0.25 is no default quantile: both come from the two items.
    assert _quantiles(_metrics(config.metrics_port), "Scale") == ["0.25"]


def test_the_sagemaker_endpoint_answers_ping(served):
    assert http_status(f"http://127.0.0.1:{served['sagemaker_port']}/ping") == 200


def test_auth_headers_open_the_restricted_apis_over_http_and_grpc(served):
    triton, config = served["triton"], served["config"]
    token = triton.get_access_token()
    stats_url = f"http://127.0.0.1:{config.http_port}/v2/models/stats"
    assert http_status(stats_url) == 403  # statistics are restricted by default
    headers = create_auth_headers(token, "http")
    assert extract_access_token_from_headers(headers) == token
    with urllib.request.urlopen(urllib.request.Request(stats_url, headers=headers), timeout=5) as response:
        assert response.status == 200 and "model_stats" in json.loads(response.read())

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{config.grpc_port}")
    try:
        with pytest.raises(Exception, match="(?i)permission|unauthori|denied|token"):
            client.get_inference_statistics()
        stats = client.get_inference_statistics(headers=create_auth_headers(token, "grpc"), as_json=True)
        assert any(entry["name"] == "Scale" for entry in stats["model_stats"])
    finally:
        client.close()


def test_indexed_environment_variables_reach_the_server(monkeypatch):
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_METRICS_CONFIG_0", "summary_latencies=true")
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_METRICS_CONFIG_1", "summary_quantiles=0.75:0.01")
    config = server_config()
    with Triton(config=config) as triton:
        triton.bind("Scale", scale, **SCALE)
        with ModelClient(f"http://127.0.0.1:{config.http_port}", "Scale") as client:
            client.infer_batch(x=np.ones((1, 1), np.float32))
        assert _quantiles(_metrics(config.metrics_port), "Scale") == ["0.75"]


def test_stop_says_whether_this_call_stopped_the_server():
    assert Triton(config=server_config()).stop() is False  # never started: nothing to stop

    config = server_config()
    url = f"http://127.0.0.1:{config.http_port}"
    with Triton(config=config) as triton:
        triton.run()  # the owner serves what another process binds: ready without models of its own
        remote = RemoteTriton(url, access_token=triton.get_access_token())
        remote.bind("Remote", scale, **SCALE)
        remote.connect()
        with ModelClient(url, "Remote") as client:  # its model served: there is something to stop
            assert client.infer_batch(x=np.ones((1, 1), np.float32))["y"].tolist() == [[1.0]]
        assert remote.stop() is True
        assert http_status(f"{url}/v2/models/Remote/ready") != 200  # unloaded by that call
        assert remote.stop() is False
        assert RemoteTriton(url, access_token=triton.get_access_token()).stop() is False  # never connected
        assert triton.stop() is True
        assert http_status(f"{url}/v2/health/live") != 200
        assert triton.stop() is False


def test_a_config_built_then_assigned_is_served_as_assigned(served):
    # The published L0 warm-up tests build ModelConfig() and then assign its fields.
    seen: List[int] = []

    def record(requests: List[Request]) -> List[Response]:
        seen.append(sum(r["x"].shape[0] for r in requests))  # samples in this call
        return [Response(data={"y": r["x"], "kind": np.array([[b"w"]] * r["x"].shape[0])}) for r in requests]

    config = ModelConfig()
    config.max_batch_size = 16
    config.batcher.max_queue_delay_microseconds = 100
    config.model_warmup = [ModelWarmup(name="w", batch_size=3, inputs={"x": WarmupInput(np.float32, (2,))}, count=2)]
    triton = served["triton"]
    triton.bind("Assigned", record, inputs=SCALE["inputs"], outputs=SCALE["outputs"], config=config)
    assert seen == [3, 3]  # the assigned warm-up ran before the model was ready
    url = f"http://127.0.0.1:{served['config'].http_port}"
    with ModelClient(url, "Assigned") as client:
        assert client.model_config.max_batch_size == 16
        assert client.model_config.batcher.max_queue_delay_microseconds == 100

    config.max_batch_size = "16"  # a bad assigned value is refused at bind, naming model and field
    with pytest.raises(PyTritonBadParameterError, match=r"config of model 'Assigned2': ModelConfig.max_batch_size"):
        triton.bind("Assigned2", record, inputs=SCALE["inputs"], outputs=SCALE["outputs"], config=config)


def test_a_warmup_of_different_rows_from_a_npy_file_reaches_the_callable_before_it_serves(served, tmp_path):
    # As the published library reads such a file: the batch's rows, as they are (upstream's
    # L0_warmup_functionality relies on it); Triton's own warm-up would repeat one sample.
    rows = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    np.save(tmp_path / "rows.npy", rows)
    seen: List[np.ndarray] = []

    def record(requests: List[Request]) -> List[Response]:
        seen.extend(request["x"].copy() for request in requests)
        return [Response(data={"y": r["x"], "kind": np.array([[b"w"]] * r["x"].shape[0])}) for r in requests]

    warmup = ModelWarmup(name="rows", batch_size=2, count=2,
                         inputs={"x": WarmupInput(np.float32, (2,), input_data_file=str(tmp_path / "rows.npy"))})
    inputs = [Tensor(name="x", dtype=np.float32, shape=(2,))]
    served["triton"].bind("Rows", record, inputs=inputs, outputs=SCALE["outputs"],
                          config=ModelConfig(max_batch_size=4, model_warmup=[warmup]))
    assert [array.tolist() for array in seen] == [rows.tolist(), rows.tolist()]  # count=2, before bind returned
    with ModelClient(f"http://127.0.0.1:{served['config'].http_port}", "Rows") as client:
        assert client.infer_sample(x=np.array([5.0, 6.0], np.float32))["y"].tolist() == [5.0, 6.0]


def test_the_published_config_names_read_what_the_server_serves(served):
    # pytriton.model_config.parser.ModelConfigParser / triton_model_config.TritonModelConfig, as
    # published code uses them: on the server's JSON, and on the config.pbtxt the server loaded.
    from pytriton.model_config.parser import ModelConfigParser
    from pytriton.model_config.triton_model_config import TritonModelConfig

    url = f"http://127.0.0.1:{served['config'].http_port}/v2/models/Scale/config"
    request = urllib.request.Request(url, headers={"triton-access-token": served["triton"].get_access_token()})
    with urllib.request.urlopen(request, timeout=10) as response:
        from_server = ModelConfigParser.from_dict(json.loads(response.read()))
    assert isinstance(from_server, TritonModelConfig)
    assert (from_server.model_name, from_server.max_batch_size) == ("Scale", 8)
    assert [spec.name for spec in from_server.inputs] == ["x"]
    assert [spec.name for spec in from_server.outputs] == ["y", "kind"]
    with ModelClient(f"http://127.0.0.1:{served['config'].http_port}", "Scale") as client:
        assert client.model_config == from_server  # the clients' config is the same class and value
