"""The Vertex AI endpoint of the real tritonserver: `allow_vertex_ai` and the other Vertex AI fields,
set in the config, through ``PYTRITON_TRITON_CONFIG_*`` and through Vertex AI's own ``AIP_*``
variables (``tests/unit/server/test_vertex_ai.py`` covers the validation and the argv).

The routes are the ones Vertex AI gives a deployed model; tritonserver reads them from
``AIP_PREDICT_ROUTE`` / ``AIP_HEALTH_ROUTE`` when it starts, so each server here starts with them
in the environment.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Dict, Iterator, Optional, Tuple

import numpy as np
import pytest
from support import free_ports, server_config

from pytriton.client import ModelClient
from pytriton.decorators import batch
from pytriton.exceptions import PyTritonBadParameterError, PyTritonError
from pytriton.model_config import ModelConfig, Tensor
from pytriton.server.config import ENV_PREFIX
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

pytestmark = pytest.mark.functional

PREDICT_ROUTE = "/v1/endpoints/1234/deployedModels/5678:predict"
HEALTH_ROUTE = "/v1/endpoints/1234/deployedModels/5678"
ROUTES = {"AIP_PREDICT_ROUTE": PREDICT_ROUTE, "AIP_HEALTH_ROUTE": HEALTH_ROUTE}
AIP_VARIABLES = ("AIP_MODE", "AIP_HTTP_PORT", "AIP_PREDICT_ROUTE", "AIP_HEALTH_ROUTE", "AIP_STORAGE_URI")
TENSORS = {"inputs": [Tensor(name="x", dtype=np.float32, shape=(-1,))],
           "outputs": [Tensor(name="y", dtype=np.float32, shape=(-1,))]}
X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)


def _times(factor: float):
    @batch
    def infer(x):
        return {"y": x * factor}

    return infer


def _kserve_request(x: np.ndarray) -> dict:
    """A KServe v2 JSON inference request: what Vertex AI forwards to the predict route."""
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}


def _post(port: int, path: str, body: dict, headers: Optional[Dict[str, str]] = None) -> Tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _prediction(port: int, x: np.ndarray = X) -> Tuple[str, np.ndarray]:
    """The model that answered the predict route, and its output `y`."""
    status, text = _post(port, PREDICT_ROUTE, _kserve_request(x))
    assert status == 200, text
    answer = json.loads(text)
    (output,) = answer["outputs"]
    assert output["name"] == "y" and output["datatype"] == "FP32"
    return answer["model_name"], np.array(output["data"], dtype=np.float32).reshape(output["shape"])


@contextlib.contextmanager
def _environment(**variables: str) -> Iterator[None]:
    """`variables` set, and every AIP_* variable not among them unset, for the server's whole life."""
    with pytest.MonkeyPatch.context() as patch:
        for name in AIP_VARIABLES:
            patch.delenv(name, raising=False)
        for name, value in variables.items():
            patch.setenv(name, value)
        yield


@contextlib.contextmanager
def _serving(config: TritonConfig, models: Dict[str, float]) -> Iterator[Triton]:
    # The Vertex AI endpoint does not check the access token: confirmed here (the port is the test's own).
    triton = Triton(config=config, security_config=TritonSecurityConfig(allow_unguarded_endpoints=True))
    try:
        for name, factor in models.items():
            triton.bind(name, _times(factor), **TENSORS)
        triton.run()
        yield triton
    finally:
        triton.stop()


@pytest.fixture(scope="module")
def vertex():
    """One model, `allow_vertex_ai=True` in the config, the Vertex AI endpoint on a free port."""
    (port,) = free_ports(1)
    config = server_config(allow_vertex_ai=True, vertex_ai_port=port, vertex_ai_thread_count=2)
    with _environment(**ROUTES), _serving(config, {"Doubler": 2.0}) as triton:
        yield triton, config, port


def test_the_predict_route_runs_the_only_model_on_a_kserve_v2_request(vertex):
    _, _, port = vertex
    model, y = _prediction(port)
    assert model == "Doubler"
    np.testing.assert_array_equal(y, X * 2)


def test_the_health_route_answers_200_while_the_server_is_ready(vertex):
    _, _, port = vertex
    assert _get(port, HEALTH_ROUTE) == 200


def test_the_vertex_ai_port_serves_its_two_routes_and_nothing_else(vertex):
    _, _, port = vertex
    assert _post(port, "/v2/models/Doubler/infer", _kserve_request(X))[0] == 400
    assert _post(port, PREDICT_ROUTE.replace("5678", "9999"), _kserve_request(X))[0] == 400
    assert _get(port, "/v2/health/ready") == 400


def test_http_and_grpc_keep_serving_next_to_it(vertex):
    _, config, _ = vertex
    for url in (f"http://127.0.0.1:{config.http_port}", f"grpc://127.0.0.1:{config.grpc_port}"):
        with ModelClient(url, "Doubler") as client:
            np.testing.assert_array_equal(client.infer_batch(x=X)["y"], X * 2)


def test_the_redirect_header_reaches_restricted_apis_without_the_token(vertex):
    # What docs/vertex_ai.md warns about: Triton's Vertex AI endpoint checks no access token, and
    # its redirect header reaches the model-repository API that the HTTP endpoint refuses.
    _, config, port = vertex
    assert _post(config.http_port, "/v2/repository/index", {})[0] == 403
    status, text = _post(port, PREDICT_ROUTE, {}, headers={"X-Vertex-Ai-Triton-Redirect": "v2/repository/index"})
    assert status == 200 and json.loads(text) == [{"name": "Doubler", "version": "1", "state": "READY"}]


def test_the_fields_from_pytriton_variables_choose_port_threads_and_default_model():
    (port,) = free_ports(1)
    variables = {
        ENV_PREFIX + "ALLOW_VERTEX_AI": "true",
        ENV_PREFIX + "VERTEX_AI_PORT": str(port),
        ENV_PREFIX + "VERTEX_AI_THREAD_COUNT": "1",
        ENV_PREFIX + "VERTEX_AI_DEFAULT_MODEL": "Tripler",
    }
    with _environment(**variables, **ROUTES), _serving(server_config(), {"Doubler": 2.0, "Tripler": 3.0}):
        model, y = _prediction(port)
        assert model == "Tripler"
        np.testing.assert_array_equal(y, X * 3)
        assert _get(port, HEALTH_ROUTE) == 200


def test_aip_mode_prediction_opens_the_endpoint_on_aip_http_port_and_keeps_http():
    # What a Vertex AI serving container's environment does to a plain Triton(): Triton alone would
    # close its HTTP and gRPC endpoints; the library keeps them, so run() and the clients still work.
    (port,) = free_ports(1)
    config = server_config()
    with _environment(AIP_MODE="PREDICTION", AIP_HTTP_PORT=str(port), **ROUTES), _serving(config, {"Doubler": 2.0}):
        model, y = _prediction(port)
        assert model == "Doubler"
        np.testing.assert_array_equal(y, X * 2)
        with ModelClient(f"http://127.0.0.1:{config.http_port}", "Doubler") as client:
            np.testing.assert_array_equal(client.infer_batch(x=X)["y"], X * 2)


def test_several_models_without_a_default_model_do_not_start():
    (port,) = free_ports(1)
    config = server_config(allow_vertex_ai=True, vertex_ai_port=port)
    # Refused before the server starts (tritonserver itself would exit after opening HTTP).
    expected = "needs TritonConfig.vertex_ai_default_model"
    with _environment(**ROUTES), pytest.raises(PyTritonError, match=expected) as caught:
        with _serving(config, {"Doubler": 2.0, "Tripler": 3.0}):
            pass
    assert "(Doubler, Tripler)" in caught.value.message


def test_missing_routes_are_refused_before_anything_starts():
    with _environment(), pytest.raises(PyTritonBadParameterError, match="AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE"):
        Triton(config=server_config(allow_vertex_ai=True))


@batch
def _add_sub(**inputs):
    first, second = inputs.values()
    return {"add": first + second, "sub": first - second}


def test_the_published_vertex_ai_example_starts_with_the_default_security_and_warns_once(monkeypatch):
    # The published PyTriton's Vertex AI example, in its shape: the default TritonSecurityConfig
    # (which restricts APIs), the endpoint on, AIP_* set as a Vertex AI container has them. It must
    # start and serve (code written for the published library runs unchanged), with one loud
    # warning that says Vertex AI's own authentication fronts the port.
    from pytriton.server import security as security_module

    monkeypatch.setattr(security_module, "_WARNED_UNGUARDED", set())
    (port,) = free_ports(1)
    config = server_config(allow_http=True, allow_vertex_ai=True, vertex_ai_port=port)
    routes = {"AIP_PREDICT_ROUTE": "/v2/models/AddSub/infer", "AIP_HEALTH_ROUTE": "/v2/health/ready"}
    with _environment(AIP_MODE="PREDICTION", **routes):
        with pytest.warns(UserWarning, match="without the access-token check") as caught:
            triton = Triton(config=config)
        try:
            (warning,) = [w for w in caught if "access-token" in str(w.message)]
            assert f"(port {port})" in str(warning.message)
            assert "Vertex AI's own authentication fronts its port" in str(warning.message)
            triton.bind(
                model_name="AddSub",
                infer_func=_add_sub,
                inputs=[Tensor(dtype=np.float32, shape=(-1,)), Tensor(dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="add", dtype=np.float32, shape=(-1,)),
                         Tensor(name="sub", dtype=np.float32, shape=(-1,))],
                config=ModelConfig(max_batch_size=128),
                strict=True,
            )
            triton.run()
            assert _get(port, routes["AIP_HEALTH_ROUTE"]) == 200
            body = {"inputs": [
                {"name": "INPUT_1", "datatype": "FP32", "shape": [1, 2], "data": [5.0, 7.0]},
                {"name": "INPUT_2", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]},
            ]}
            status, text = _post(port, routes["AIP_PREDICT_ROUTE"], body)
            assert status == 200, text
            outputs = {output["name"]: output["data"] for output in json.loads(text)["outputs"]}
            assert outputs == {"add": [6.0, 9.0], "sub": [4.0, 5.0]}
        finally:
            triton.stop()


def test_strict_security_still_refuses_the_unguarded_vertex_ai_port():
    (port,) = free_ports(1)
    config = server_config(allow_vertex_ai=True, vertex_ai_port=port)
    strict = TritonSecurityConfig(allow_unguarded_endpoints=False)
    with _environment(**ROUTES), pytest.raises(PyTritonBadParameterError, match="allow_unguarded_endpoints=False"):
        Triton(config=config, security_config=strict)
