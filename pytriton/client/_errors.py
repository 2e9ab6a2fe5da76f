"""The one boundary where foreign errors become the client's exception tree.

``tritonclient`` (blocking and ``aio``) reports server answers as ``InferenceServerException`` (status ``"400"`` over
HTTP, ``"StatusCode.NOT_FOUND"`` over gRPC, ``None`` for its own argument checks), while
sockets, gevent and gRPC raise their own types. Every call into ``tritonclient`` in this
package runs inside :func:`translate_errors`, so the mapping below is the only one.

Streams (``pytriton.client.core_stream`` and its asyncio twin) meet errors the server sends
inside a stream, a gRPC stream response's ``error_message`` or an SSE ``{"error": ...}``
event: :func:`stream_error` maps them with the same rules (``tritonclient`` gives those
no status, which elsewhere marks its own argument checks).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import re
import socket
from collections.abc import Iterator

import grpc  # type: ignore[import-untyped,unused-ignore]
from tritonclient.utils import InferenceServerException

from pytriton.client.exceptions import (
    PyTritonClientDecoupledMismatchError,
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)

try:  # gevent comes with tritonclient[http]; a gRPC-only install may lack it.
    from gevent import Timeout as _GeventTimeout  # type: ignore[import-untyped,unused-ignore]
except ImportError:  # pragma: no cover - depends on the installed extras
    _GeventTimeout = TimeoutError

try:  # aiohttp comes with tritonclient[http] for its asyncio client.
    from aiohttp import ClientConnectionError as _AiohttpConnectionError
    from aiohttp import ClientPayloadError as _AiohttpPayloadError
except ImportError:  # pragma: no cover - depends on the installed extras
    _AiohttpConnectionError = ConnectionError  # type: ignore[misc,assignment]
    _AiohttpPayloadError = ConnectionError  # type: ignore[misc,assignment]

# A server that hangs up mid-answer: a body cut short (http.client, aiohttp) or a socket error.
_HUNG_UP = (OSError, _AiohttpConnectionError, _AiohttpPayloadError, http.client.HTTPException)

# asyncio's TimeoutError is the builtin one from Python 3.11 on, a class of its own before;
# socket.timeout is the builtin one from 3.10 on, an OSError of its own on 3.8 and 3.9.
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError, socket.timeout, _GeventTimeout)

INFER_ACTION = "Error occurred during inference request"
CONFIG_ACTION = "Error occurred while fetching the model configuration"
READY_ACTION = "Error occurred while checking server and model readiness"
STREAM_ACTION = "Error occurred while streaming the responses of a request"
LOAD_ACTION = "Error occurred while loading the model"
UNLOAD_ACTION = "Error occurred while unloading the model"
SHM_ACTION = "Error occurred while registering or unregistering a shared-memory region"

_TIMEOUT_STATUSES = {"StatusCode.DEADLINE_EXCEEDED", "504"}
_UNREACHABLE_STATUSES = {"StatusCode.UNAVAILABLE"}
_NOT_FOUND_STATUSES = {"404", "StatusCode.NOT_FOUND"}
_QUEUE_FULL_TEXT = "exceeds maximum queue size"
_RESTRICTED_TEXT = "is restricted, expecting header"
_DECOUPLED_TEXT = "decoupled transaction policy"
# Triton's answer for requests of an instance whose Python-backend stub process died.
_DEAD_STUB = re.compile(r"Stub process '([^']+)' is not healthy")
_BATCH_SIZE_TEXT = "batch-size must be <="
#: Added to Triton's refusal of a batch over the model's ``max_batch_size`` (and to the client's own check).
BATCH_SIZE_HINT = ("infer_batch_chunked(...) of ModelClient, FuturesModelClient and AsyncioModelClient sends a larger "
                   "batch as chunks of at most max_batch_size samples and joins the outputs")
#: The status given to errors sent inside a stream: the server answered, with no status of its own.
_STREAM_STATUS = "stream"


def _from_server(
    status: str | None, message: str, action: str, url: str, timeout_s: float | None
) -> PyTritonClientError:
    lowered = message.lower()
    if _QUEUE_FULL_TEXT in lowered:
        return PyTritonClientQueueFullError(f"{action}. The server's queue is full. Message: {message}")
    if _RESTRICTED_TEXT in lowered:
        # Checked before the status: gRPC reports a missing token as UNAVAILABLE, not as refused.
        return PyTritonClientInferenceServerError(
            f"{action}. The server restricts this API to requests with an access token; give the client "
            f"the right one (access_token=...). Message: {message}"
        )
    dead_stub = _DEAD_STUB.search(message)
    if dead_stub:
        # Kept an inference-server error (what code written for the published client catches).
        return PyTritonClientInferenceServerError(
            f"{action}. Model instance {dead_stub.group(1)} died while serving this request (its Python-backend stub "
            "process is gone); a pytriton server restarts the model within seconds, so the request may be retried. "
            f"Message: {message}"
        )
    if _DECOUPLED_TEXT in lowered:
        # A one-response call that reached a decoupled model (e.g. with a model_config given by the user).
        return PyTritonClientDecoupledMismatchError(
            f"{action}. The model is decoupled (it sends any number of responses per request); use "
            f"DecoupledModelClient or AsyncioDecoupledModelClient. Message: {message}"
        )
    if _BATCH_SIZE_TEXT in lowered:
        return PyTritonClientInferenceServerError(f"{action}. Message: {message}. {BATCH_SIZE_HINT}")
    if status is None:
        # tritonclient raises status-less exceptions only for its own checks of our arguments.
        return PyTritonClientValueError(f"{action}. Message: {message}")
    if status in _TIMEOUT_STATUSES:
        return _timeout(action, url, timeout_s, message)
    if status in _UNREACHABLE_STATUSES:
        return PyTritonClientModelUnavailableError(f"{action}. Cannot reach the server at {url}: {message}")
    if status in _NOT_FOUND_STATUSES or "unknown model" in lowered:
        return PyTritonClientModelUnavailableError(f"{action}. Message: {message}")
    return PyTritonClientInferenceServerError(f"{action}. Message: {message}")


def batch_too_large(model_name: str, max_batch_size: int) -> PyTritonClientInferenceServerError:
    """The error for a batch over `max_batch_size`, found before sending: Triton's words, and the hint."""
    return PyTritonClientInferenceServerError(
        f"{INFER_ACTION}. Message: inference request batch-size must be <= {max_batch_size} for '{model_name}'. "
        f"{BATCH_SIZE_HINT}"
    )


def _timeout(action: str, url: str, timeout_s: float | None, detail: str) -> PyTritonClientTimeoutError:
    within = f" within {timeout_s:g} s" if timeout_s is not None else ""
    return PyTritonClientTimeoutError(f"{action}. No answer from {url}{within} ({detail})")


def translate_error(
    exc: BaseException, *, action: str, url: str, timeout_s: float | None = None
) -> PyTritonClientError:
    """Map one foreign exception to the client's tree.

    Args:
        exc: what ``tritonclient``, gRPC, gevent or the socket layer raised.
        action: what the client was doing, the start of the message
            (e.g. ``"Error occurred during inference request"``).
        url: the server's URL, named when it cannot be reached or does not answer.
        timeout_s: the time the call was given, named in timeout messages.

    Returns:
        The exception to raise (``raise translate_error(...) from exc``); a
        :class:`PyTritonClientError` is returned unchanged.
    """
    if isinstance(exc, PyTritonClientError):
        return exc
    if isinstance(exc, InferenceServerException):
        message = exc.message() if exc.message() is not None else str(exc)
        return _from_server(exc.status(), message, action, url, timeout_s)
    if isinstance(exc, grpc.RpcError):  # raised directly only by paths tritonclient does not wrap
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return _from_server(
            str(code) if code is not None else "StatusCode.UNKNOWN", str(details), action, url, timeout_s
        )
    if isinstance(exc, _TIMEOUTS):
        return _timeout(action, url, timeout_s, str(exc) or type(exc).__name__)
    # Refused, reset, DNS failure, a server that hung up: the server cannot be reached.
    if isinstance(exc, _HUNG_UP):
        return PyTritonClientModelUnavailableError(f"{action}. Cannot reach the server at {url}: {exc}")
    return PyTritonClientError(f"{action}. Unexpected {type(exc).__name__} from tritonclient: {exc}")


def server_error(
    status: str | None, message: str, *, action: str, url: str, timeout_s: float | None = None
) -> PyTritonClientError:
    """The client's error for an answer the server gave outside ``tritonclient`` (an HTTP status and its text).

    Args:
        status: the HTTP status code as a string (e.g. ``"404"``).
        message: the server's error text.
        action: start of the message, see :func:`translate_error`.
        url: the server's URL.
        timeout_s: the time the call was given.
    """
    return _from_server(status or _STREAM_STATUS, message, action, url, timeout_s)


def stream_error(
    error: BaseException | str, *, action: str, url: str, timeout_s: float | None = None
) -> PyTritonClientError:
    """The client's error for a failure met while reading a stream.

    Args:
        error: the server's error text sent inside the stream, or what ``tritonclient``, gRPC
            or the connection raised. A status-less ``InferenceServerException`` here is the
            server's own answer (``tritonclient`` wraps a stream response's ``error_message`` so).
        action: start of the message, see :func:`translate_error`.
        url: the server's URL.
        timeout_s: the time the read was given.
    """
    if isinstance(error, str):
        return _from_server(_STREAM_STATUS, error, action, url, timeout_s)
    if isinstance(error, InferenceServerException) and error.status() is None:
        message = error.message() if error.message() is not None else str(error)
        return _from_server(_STREAM_STATUS, message, action, url, timeout_s)
    return translate_error(error, action=action, url=url, timeout_s=timeout_s)


_CORE_INTERNAL = "Internal error from Core"


def hint_missing_token(error: PyTritonClientError, token_sent: bool) -> PyTritonClientError:
    """`error` of a gRPC stream, with the likely cause when no access token was sent.

    Triton 2.51 refuses a stream without the token it restricts inference to with "This
    protocol is restricted, expecting header ...", but about one refusal in four reaches the
    client as a bare ``Internal error from Core`` (measured with plain ``grpc.aio``, whether the
    client half-closes or not). Without a token sent, that is most likely the cause.
    """
    if token_sent or _CORE_INTERNAL not in str(error):
        return error
    return PyTritonClientInferenceServerError(
        f"{error}. No access token was sent: if the server restricts inference, give the client the right one "
        "(access_token=...); Triton sometimes reports that refusal on a gRPC stream only this way"
    )


def next_response_timeout(model_name: str, url: str, timeout_s: float) -> PyTritonClientTimeoutError:
    """The error raised when a stream's next response does not come in time (the request is then cancelled)."""
    return PyTritonClientTimeoutError(
        f"{STREAM_ACTION}. Model {model_name!r} at {url} sent no next response within {timeout_s:g} s "
        "(inference_timeout_s bounds the wait for each response); the request was cancelled. If the model's "
        "instance died meanwhile: tritonserver 2.51 ends no stream that instance was serving, while pytriton "
        "restarts the model, so a new request may well be served"
    )


@contextlib.contextmanager
def translate_errors(action: str, url: str, timeout_s: float | None = None) -> Iterator[None]:
    """Run a block of ``tritonclient`` calls, re-raising foreign errors as the client's own.

    Args:
        action: start of the message, see :func:`translate_error`.
        url: the server's URL.
        timeout_s: the time the block was given.
    """
    try:
        yield
    except PyTritonClientError:
        raise
    except (Exception, _GeventTimeout) as exc:  # gevent's Timeout derives from BaseException
        raise translate_error(exc, action=action, url=url, timeout_s=timeout_s) from exc
