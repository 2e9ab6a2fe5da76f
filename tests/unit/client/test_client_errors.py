"""Translation of tritonclient, gRPC, gevent and socket errors into the client's tree."""

from __future__ import annotations

import http.client
import socket

import grpc
import pytest
from gevent import Timeout as GeventTimeout
from tritonclient.utils import InferenceServerException

from pytriton.client._errors import (
    BATCH_SIZE_HINT,
    INFER_ACTION,
    STREAM_ACTION,
    hint_missing_token,
    next_response_timeout,
    server_error,
    stream_error,
    translate_error,
    translate_errors,
)
from pytriton.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientDecoupledMismatchError,
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)

URL = "http://localhost:8000"
BATCH_MESSAGE = "[request id: 0] inference request batch-size must be <= 2 for 'Batch2'"


def translate(exc, timeout_s=None):
    return translate_error(exc, action=INFER_ACTION, url=URL, timeout_s=timeout_s)


class FakeRpcError(grpc.RpcError):
    """Shaped like grpc's own call errors: code() and details()."""

    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize("status", ["400", "StatusCode.INVALID_ARGUMENT"])
def test_server_refusal_carries_the_servers_message_as_on_page_000(status):
    error = translate(InferenceServerException(msg=BATCH_MESSAGE, status=status))
    assert type(error) is PyTritonClientInferenceServerError
    # The server's text as the contract shows it, then the way out.
    assert str(error) == f"Error occurred during inference request. Message: {BATCH_MESSAGE}. {BATCH_SIZE_HINT}"
    assert "infer_batch_chunked(...) of ModelClient" in BATCH_SIZE_HINT


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("404", "Request for unknown model: 'Nope' is not found"),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'Batch2' version 7 is not found"),
        ("400", "Request for unknown model: 'Nope' has no available versions"),
    ],
)
def test_unknown_model_or_version(status, message):
    error = translate(InferenceServerException(msg=message, status=status))
    assert type(error) is PyTritonClientModelUnavailableError
    assert message in str(error)


def test_grpc_unreachable_server_names_the_url():
    message = "failed to connect to all addresses; last error: Connection refused"
    error = translate(InferenceServerException(msg=message, status="StatusCode.UNAVAILABLE"))
    assert type(error) is PyTritonClientModelUnavailableError
    assert URL in str(error) and message in str(error)


def test_grpc_deadline_names_the_time_asked():
    error = translate(InferenceServerException(msg="Deadline Exceeded", status="StatusCode.DEADLINE_EXCEEDED"), 2.5)
    assert type(error) is PyTritonClientTimeoutError
    assert "within 2.5 s" in str(error) and URL in str(error)


@pytest.mark.parametrize("status", ["503", "StatusCode.UNAVAILABLE"])
def test_server_queue_full(status):
    message = "Exceeds maximum queue size"
    error = translate(InferenceServerException(msg=message, status=status))
    assert type(error) is PyTritonClientQueueFullError
    assert message in str(error)


def test_tritonclient_argument_checks_become_value_errors():
    # tritonclient raises status-less exceptions for its own checks of what it was given.
    message = 'Parameter "sequence_id" is a reserved parameter and cannot be specified.'
    error = translate(InferenceServerException(msg=message))
    assert type(error) is PyTritonClientValueError
    assert message in str(error)


def test_other_server_errors_are_inference_server_errors():
    error = translate(InferenceServerException(msg="Failed to process the request(s) for model 'M_0'", status="500"))
    assert type(error) is PyTritonClientInferenceServerError


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, PyTritonClientTimeoutError),
        (grpc.StatusCode.UNAVAILABLE, PyTritonClientModelUnavailableError),
        (grpc.StatusCode.NOT_FOUND, PyTritonClientModelUnavailableError),
        (grpc.StatusCode.INTERNAL, PyTritonClientInferenceServerError),
    ],
)
def test_raw_grpc_errors(code, expected):
    error = translate(FakeRpcError(code, "details from grpc"))
    assert type(error) is expected


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError("timed out"), PyTritonClientTimeoutError),
        (socket.timeout("timed out"), PyTritonClientTimeoutError),
        (GeventTimeout(1.0), PyTritonClientTimeoutError),
        (ConnectionRefusedError(111, "Connection refused"), PyTritonClientModelUnavailableError),
        (ConnectionResetError(104, "Connection reset by peer"), PyTritonClientModelUnavailableError),
        (socket.gaierror(-2, "Name or service not known"), PyTritonClientModelUnavailableError),
    ],
)
def test_socket_and_gevent_errors(exc, expected):
    error = translate(exc, timeout_s=1.0)
    assert type(error) is expected
    if expected is PyTritonClientModelUnavailableError:
        assert f"Cannot reach the server at {URL}" in str(error)


def test_unexpected_errors_stay_in_the_tree():
    error = translate(RuntimeError("connection pool closed"))
    assert type(error) is PyTritonClientError
    assert "RuntimeError" in str(error) and "connection pool closed" in str(error)


def test_client_errors_pass_unchanged():
    original = PyTritonClientClosedError("closed")
    assert translate(original) is original


def test_context_manager_chains_the_cause():
    cause = InferenceServerException(msg=BATCH_MESSAGE, status="400")
    with pytest.raises(PyTritonClientInferenceServerError) as info, translate_errors(INFER_ACTION, URL):
        raise cause
    assert info.value.__cause__ is cause


def test_context_manager_catches_gevent_timeout_which_is_a_base_exception():
    with pytest.raises(PyTritonClientTimeoutError), translate_errors(INFER_ACTION, URL, 0.5):
        raise GeventTimeout(0.5)


# The refusals of tritonserver 2.51 when a one-response call reaches a decoupled model.
@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("501", "HTTP end point doesn't support models with decoupled transaction policy"),
        ("StatusCode.UNIMPLEMENTED", "ModelInfer RPC doesn't support models with decoupled transaction policy"),
    ],
)
def test_decoupled_refusal_names_the_streaming_clients(status, message):
    error = translate(InferenceServerException(msg=message, status=status))
    assert type(error) is PyTritonClientDecoupledMismatchError
    assert "use DecoupledModelClient or AsyncioDecoupledModelClient" in str(error) and message in str(error)


def test_errors_sent_inside_a_stream_are_the_servers_answers():
    # tritonclient wraps a stream response's error_message without a status: not an argument check here.
    error = stream_error(InferenceServerException(msg="the model broke"), action=STREAM_ACTION, url=URL)
    assert type(error) is PyTritonClientInferenceServerError and "the model broke" in str(error)
    unknown = stream_error("Request for unknown model: 'Nope' is not found", action=STREAM_ACTION, url=URL)
    assert type(unknown) is PyTritonClientModelUnavailableError
    cancelled = InferenceServerException(msg="Locally cancelled by application!", status="StatusCode.CANCELLED")
    assert type(stream_error(cancelled, action=STREAM_ACTION, url=URL)) is PyTritonClientInferenceServerError
    assert type(stream_error(ConnectionResetError(104, "reset"), action=STREAM_ACTION, url=URL)) is (
        PyTritonClientModelUnavailableError
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("404", PyTritonClientModelUnavailableError),
        ("400", PyTritonClientInferenceServerError),
        ("500", PyTritonClientInferenceServerError),
    ],
)
def test_http_answers_outside_tritonclient(status, expected):
    error = server_error(status, "the server's words", action=INFER_ACTION, url=URL)
    assert type(error) is expected and "the server's words" in str(error)


def test_a_body_cut_short_is_a_server_that_went_away():
    error = translate(http.client.IncompleteRead(b"data: {"))
    assert type(error) is PyTritonClientModelUnavailableError


def test_next_response_timeout_names_model_url_and_time():
    error = next_response_timeout("Tokens", URL, 0.5)
    assert type(error) is PyTritonClientTimeoutError
    assert "'Tokens'" in str(error) and URL in str(error) and "within 0.5 s" in str(error)
    assert "instance died" in str(error) and "new request may well be served" in str(error)  # Triton's stream stall


@pytest.mark.parametrize("status", ["400", "StatusCode.INTERNAL"])
def test_dead_stub_is_named_as_a_dead_instance_that_may_be_retried(status):
    error = translate(InferenceServerException("Stub process 'Echo_0_1' is not healthy.", status=status))
    assert type(error) is PyTritonClientInferenceServerError
    assert "Model instance Echo_0_1 died" in str(error)
    assert "retried" in str(error)


def test_a_bare_core_error_on_a_stream_without_token_names_the_likely_cause():
    bare = stream_error("Internal error from Core", action="Error occurred while streaming", url="grpc://h:1")
    hinted = hint_missing_token(bare, token_sent=False)
    assert isinstance(hinted, PyTritonClientInferenceServerError)
    assert "No access token was sent" in str(hinted) and "Internal error from Core" in str(hinted)
    assert hint_missing_token(bare, token_sent=True) is bare  # with a token, the cause is something else
    other = stream_error("unknown model 'X'", action="Error occurred while streaming", url="grpc://h:1")
    assert hint_missing_token(other, token_sent=False) is other
