"""Triton's HTTP generate extension for the streaming clients: request JSON, SSE events, arrays (pure).

The client step of a streamed request over HTTP. ``tritonclient.http`` cannot stream, so the
streaming clients ``POST /v2/models/<name>[/versions/<v>]/generate_stream`` themselves and read
the answer as server-sent events: one ``data: {...}`` event per response, with the outputs by
name (plus ``model_name``, ``model_version``, ``id``), or ``{"error": "..."}``; the response
body ends after the final response. This module holds everything about that format that
needs no connection, so it is unit tested on its own; the connections live in
``pytriton.client.core_stream`` and ``core_stream_aio``.

What the generate endpoint can carry (as measured against tritonserver 2.51):

* Tensors travel as JSON, not in binary. Each input is sent as a flat list (the server also
  takes a scalar for one element) and the server rebuilds its shape from the model
  configuration alone: the batch axis counts as a variable dimension; every variable
  dimension but the last becomes 1 and the last takes the rest of the elements. An input whose
  shape the server would rebuild differently (e.g. a batch of 2 for dims ``[-1]``) is refused
  here, before sending, rather than reshaped behind the user's back.
* Outputs come back flattened (one element as a scalar). Their shape is rebuilt here from the
  model configuration: fixed dims, plus one variable dimension filled from the element count
  (for a batching model, the batch axis; or, when the dims have a variable one, that one with
  the batch axis taken from the request). An output with two or more variable dimensions
  cannot be rebuilt and its model is refused over HTTP.
* FP16 and BF16 tensors cannot be sent or received as JSON (the server refuses them):
  refused here, before sending.
* BYTES travel as JSON strings: inputs must be valid UTF-8 (the server rejects other bytes);
  outputs come back as ``bytes``, also when the server writes bytes that are not valid UTF-8.
* Input dtypes must match the model's exactly: the server converts JSON numbers to the input's
  type without range checks (300 would arrive as 44 in an INT8).
* A request's priority is not carried: the endpoint queues every request at the model's
  default level (a ``priority`` parameter is taken and ignored), so one is refused here.
* Parameters go in the ``parameters`` object (strings, numbers, booleans). The server hands
  every other key that is not an input to the model as a parameter too, so inputs the model
  does not have are refused here, and no request id is sent (``id`` would reach the model as a
  parameter as well).

gRPC streaming carries all of this in binary, with shapes; use a ``grpc://`` URL where HTTP
cannot.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytriton.client._args import SEQUENCE_KEYS
from pytriton.client._errors import STREAM_ACTION, stream_error
from pytriton.client.codec import wire_array
from pytriton.client.core_request import CoreRequest
from pytriton.client.exceptions import PyTritonClientError, PyTritonClientInferenceServerError, PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig, TensorSpec

#: Data types the generate endpoint refuses in JSON, in both directions.
BINARY_ONLY_DTYPES = ("FP16", "BF16")

_LINE_END = re.compile(rb"\r\n|\r|\n")
_USE_GRPC = "use a grpc:// URL, which carries tensors in binary with their shapes"


def model_path(model_name: str, model_version: str) -> str:
    """The URL path of a model's (version's) endpoints, ``/v2/models/<name>[/versions/<version>]``
    (version ``""``: the server's choice)."""
    path = f"/v2/models/{urllib.parse.quote(model_name, safe='')}"
    if model_version:
        path += f"/versions/{urllib.parse.quote(model_version, safe='')}"
    return path


def generate_stream_path(model_name: str, model_version: str) -> str:
    """The URL path of the streaming generate endpoint of a model."""
    return model_path(model_name, model_version) + "/generate_stream"


class SseDecoder:
    """Server-sent events from a byte stream, fed in chunks of any size.

    Only ``data`` fields matter to Triton's events; comments and other fields are skipped. A
    line may end with CR LF, LF or CR; a chunk may end in the middle of a line or of a CR LF.
    """

    def __init__(self) -> None:
        """Start with no data."""
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Take the next bytes of the stream; return the data of every event they complete.

        The data are decoded as UTF-8 with ``surrogateescape``: Triton writes BYTES outputs
        into its JSON without validating them, and this keeps such bytes recoverable.
        """
        self._buffer += chunk
        events: list[str] = []
        start = 0
        for match in _LINE_END.finditer(self._buffer):
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # maybe the first half of a CR LF split between chunks
            event = self._line(self._buffer[start : match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._buffer = self._buffer[start:]
        return events

    def finish(self) -> None:
        """Mark the end of the stream.

        Raises:
            PyTritonClientInferenceServerError: the stream ended inside an event.
        """
        if self._buffer.rstrip(b"\r") or self._data:
            raise PyTritonClientInferenceServerError(
                f"The server's event stream ended inside an event: {(b''.join(self._data) + self._buffer)[:200]!r}"
            )

    def _line(self, line: bytes) -> str | None:
        if not line:
            if not self._data:
                return None
            data, self._data = b"\n".join(self._data), []
            return data.decode("utf-8", "surrogateescape")
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)
        return None


def request_shape(dims: Sequence[int], batching: bool, size: int) -> tuple[int, ...] | None:
    """The shape Triton's generate endpoint gives an input of ``size`` elements.

    Args:
        dims: the input's dims in the model configuration (without the batch axis).
        batching: whether the model batches (then a variable batch axis comes first).
        size: the number of elements sent.

    Returns:
        The shape, or None where the server refuses the element count.
    """
    full = ([-1] if batching else []) + list(dims)
    variable = [axis for axis, dim in enumerate(full) if dim < 0]
    fixed = math.prod(dim for dim in full if dim >= 0)
    if not variable:
        return tuple(full) if fixed == size else None
    if fixed == 0 or size % fixed:
        return None
    shape = [1 if dim < 0 else dim for dim in full]
    shape[variable[-1]] = size // fixed
    return tuple(shape)


def response_shape(spec: TensorSpec, batching: bool, batch_size: int, size: int) -> tuple[int, ...]:
    """The shape of an output that came back flattened, rebuilt from the model configuration.

    Args:
        spec: the output's configuration.
        batching: whether the model batches.
        batch_size: the batch size of the request (used when the dims have a variable dimension).
        size: the number of elements received.

    Raises:
        PyTritonClientInferenceServerError: ``size`` fits no shape the configuration allows.
    """
    full = list(spec.shape)
    if batching:
        full.insert(0, batch_size if any(dim < 0 for dim in spec.shape) else -1)
    variable = [axis for axis, dim in enumerate(full) if dim < 0]
    fixed = math.prod(dim for dim in full if dim >= 0)
    if len(variable) > 1:
        fits = False
    elif variable:
        fits = size % fixed == 0 if fixed else size == 0
    else:
        fits = fixed == size
    if not fits:
        raise PyTritonClientInferenceServerError(
            f"Output {spec.name!r} came with {size} element(s), which fit no shape {tuple(full)} allowed by "
            "the model configuration (-1: any size)"
        )
    if variable:
        full[variable[0]] = size // fixed if fixed else 0
    return tuple(full)


def check_streamable(config: ClientModelConfig) -> None:
    """Refuse a model whose outputs the generate endpoint cannot bring back.

    Raises:
        PyTritonClientValueError: an output is FP16 or BF16, or has two or more variable dims.
    """
    for spec in config.outputs:
        if spec.triton_dtype in BINARY_ONLY_DTYPES:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} has {spec.triton_dtype} output {spec.name!r}, which HTTP streaming "
                f"cannot carry (it sends tensors as JSON); {_USE_GRPC}"
            )
        if sum(dim < 0 for dim in spec.shape) > 1:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} has output {spec.name!r} with dims {list(spec.shape)}: HTTP "
                "streaming sends it flattened, and with more than one variable dimension its shape cannot be "
                f"rebuilt; {_USE_GRPC}"
            )


def _json_values(config: ClientModelConfig, spec: TensorSpec, value: np.ndarray) -> list[Any]:
    value, triton_dtype = wire_array(spec.name, value)
    if triton_dtype in BINARY_ONLY_DTYPES:
        raise PyTritonClientValueError(
            f"Input {spec.name!r} is {triton_dtype}, which HTTP streaming cannot carry (it sends tensors as JSON); "
            f"{_USE_GRPC}"
        )
    if triton_dtype != spec.triton_dtype:
        raise PyTritonClientValueError(
            f"Input {spec.name!r} has dtype {value.dtype} ({triton_dtype}), but model {config.model_name!r} takes "
            f"{spec.triton_dtype}; over HTTP streaming the dtypes must match exactly (the server would convert the "
            "JSON numbers without range checks)"
        )
    shape = request_shape(spec.shape, config.batching, value.size)
    if shape != tuple(value.shape):
        rebuilt = "refuse it" if shape is None else f"rebuild it as {shape}"
        raise PyTritonClientValueError(
            f"Input {spec.name!r} has shape {tuple(value.shape)}, but HTTP streaming sends it as a flat list and "
            f"the server would {rebuilt} from the model's dims {list(spec.shape)}"
            f"{' and its batch axis' if config.batching else ''}; {_USE_GRPC}"
        )
    items = value.reshape(-1).tolist()
    if triton_dtype != "BYTES":
        return items
    texts = []
    for item in items:
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PyTritonClientValueError(
                    f"Input {spec.name!r} holds bytes that are not valid UTF-8 ({item[:20]!r}...), which HTTP "
                    f"streaming cannot carry (JSON strings are text); {_USE_GRPC}"
                ) from exc
        elif not isinstance(item, str):
            raise PyTritonClientValueError(
                f"Input {spec.name!r} holds a {type(item).__name__}; BYTES items are bytes or str"
            )
        texts.append(item)
    return texts


def encode_request(
    config: ClientModelConfig,
    inputs: Mapping[str, np.ndarray],
    parameters: Mapping[str, Any] | None = None,
    request_id: str = "",
) -> bytes:
    """The JSON body of a ``generate_stream`` request.

    Args:
        config: the model's configuration (input dtypes, dims and batching).
        inputs: input name to array, batch axis included for a batching model.
        parameters: request parameters (str, int, float or bool values).
        request_id: the request's id (the endpoint reads the key ``id`` as such).

    Raises:
        PyTritonClientValueError: an input the model lacks, or one the endpoint cannot carry
            (see the module's docstring), or a parameter of another type.
    """
    specs = config.input_specs
    body: dict[str, Any] = {"id": request_id} if request_id else {}
    for name, value in inputs.items():
        if name not in specs:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} has no input {name!r} (its inputs: {sorted(specs)}); over HTTP "
                "streaming the server would take it for a parameter"
            )
        if name in ("parameters", "id"):  # the generate endpoint reads these keys as the request's own
            raise PyTritonClientValueError(f"An input named {name!r} cannot go over HTTP streaming; {_USE_GRPC}")
        body[name] = _json_values(config, specs[name], value)
    if parameters:
        if any(key in SEQUENCE_KEYS for key in parameters):
            # Triton 2.51's generate endpoint drops them: the sequence batcher then refuses the request.
            raise PyTritonClientValueError(
                f"Model {config.model_name!r}: a sequence (sequence_id, sequence_start, sequence_end) cannot go over "
                "HTTP streaming, whose endpoint (Triton's generate_stream) does not carry it; use a grpc:// URL"
            )
        for key, item in parameters.items():
            if not isinstance(key, str) or not isinstance(item, (str, int, float, bool)):
                raise PyTritonClientValueError(
                    f"Parameter {key!r} must have a str key and a str, int, float or bool value, got {item!r}"
                )
        body["parameters"] = dict(parameters)
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def batch_size_of(config: ClientModelConfig, inputs: Mapping[str, np.ndarray]) -> int:
    """The batch size of a request: the first axis of its inputs for a batching model, else 1."""
    if config.batching:
        for value in inputs.values():
            if value.ndim:
                return int(value.shape[0])
    return 1


def parse_event(data: str) -> dict[str, Any]:
    """The JSON object of one event's data (``NaN`` and ``Infinity`` allowed: Triton writes them).

    Raises:
        PyTritonClientInferenceServerError: the data is not a JSON object.
    """
    try:
        event = json.loads(data)
    except ValueError as exc:
        raise PyTritonClientInferenceServerError(f"The server sent an event that is not JSON: {data[:200]!r}") from exc
    if not isinstance(event, dict):
        raise PyTritonClientInferenceServerError(f"The server sent an event that is not a JSON object: {data[:200]!r}")
    return event


def event_error(config: ClientModelConfig, event: Mapping[str, Any]) -> str | None:
    """The server's error message if the event is an error, else None."""
    if "error" in event and all(spec.name != "error" for spec in config.outputs):
        return str(event["error"])
    return None


def _array(spec: TensorSpec, value: Any) -> np.ndarray:
    items = value if isinstance(value, list) else [value]
    if spec.triton_dtype == "BYTES":
        if not all(isinstance(item, str) for item in items):
            raise PyTritonClientInferenceServerError(f"BYTES output {spec.name!r} came with items that are not strings")
        array = np.empty(len(items), dtype=np.object_)
        array[:] = [item.encode("utf-8", "surrogateescape") for item in items]
        return array
    try:
        return np.array(items, dtype=spec.dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PyTritonClientInferenceServerError(
            f"Output {spec.name!r} came with values that are not {spec.triton_dtype}: {str(items)[:200]}"
        ) from exc


def event_outputs(config: ClientModelConfig, event: Mapping[str, Any], batch_size: int) -> dict[str, np.ndarray]:
    """The outputs of one response event as arrays with the model's dtypes and rebuilt shapes.

    Args:
        config: the model's configuration.
        event: the event's JSON object (not an error).
        batch_size: the request's batch size (see :func:`response_shape`).

    Raises:
        PyTritonClientInferenceServerError: an output's values do not fit its configuration.
    """
    outputs = {}
    for spec in config.outputs:
        if spec.name in event:
            array = _array(spec, event[spec.name])
            outputs[spec.name] = array.reshape(response_shape(spec, config.batching, batch_size, array.size))
    return outputs


class ResponseDecoder:
    """One request's ``generate_stream`` body, fed in chunks, as outputs and errors in arrival order.

    An error event becomes the client's exception as a value, so that the responses that came
    before it in the same chunk are delivered first. A stream reads with `take`: it feeds the
    body's bytes while `waiting`, then takes the next response.
    """

    def __init__(self, config: ClientModelConfig, batch_size: int, url: str) -> None:
        """Decode the events of a request of ``batch_size`` to ``config``'s model at ``url``."""
        self._config = config
        self._batch_size = batch_size
        self._url = url
        self._sse = SseDecoder()
        self._pending: collections.deque[dict[str, np.ndarray] | PyTritonClientError] = collections.deque()

    def feed(self, chunk: bytes) -> list[dict[str, np.ndarray] | PyTritonClientError]:
        """The responses (or the error) completed by the next bytes of the body."""
        items: list[dict[str, np.ndarray] | PyTritonClientError] = []
        for data in self._sse.feed(chunk):
            event = parse_event(data)
            message = event_error(self._config, event)
            if message is not None:
                items.append(stream_error(message, action=STREAM_ACTION, url=self._url))
            else:
                items.append(event_outputs(self._config, event, self._batch_size))
        return items

    def finish(self) -> None:
        """Mark the end of the body (see :meth:`SseDecoder.finish`)."""
        self._sse.finish()

    @property
    def waiting(self) -> bool:
        """Whether the next response needs more of the body."""
        return not self._pending

    def take(self, chunk: bytes) -> bool:
        """Keep the responses the next bytes of the body complete; b"" is the body's end.

        Returns:
            False at the body's end (no response left), else True.
        """
        if not chunk:
            self.finish()
            return False
        self._pending.extend(self.feed(chunk))
        return True

    def next_response(self) -> dict[str, np.ndarray]:
        """The oldest response kept; raises the stream's error in its turn."""
        item = self._pending.popleft()
        if isinstance(item, PyTritonClientError):
            raise item
        return item


@dataclasses.dataclass(frozen=True)
class StreamPost:
    """What an HTTP stream sends and how it reads the answer (`stream_post`)."""

    path: str
    body: bytes
    decoder: ResponseDecoder


def stream_post(request: CoreRequest, config: ClientModelConfig, url: str) -> StreamPost:
    """The ``generate_stream`` request for `request` to a decoupled model of configuration `config`.

    Raises:
        PyTritonClientValueError: an input or parameter the ``generate`` extension cannot carry.
    """
    check_streamable(config)
    if request.priority:
        # Measured against Triton 2.51: the generate endpoint takes a "priority" parameter and
        # queues the request at the default level all the same.
        raise PyTritonClientValueError(
            f"Model {config.model_name!r}: a priority (priority={request.priority}) cannot go over HTTP streaming, "
            "whose endpoint (Triton's generate_stream) queues every request at the model's default level; "
            "use a grpc:// URL"
        )
    return StreamPost(
        generate_stream_path(request.model_name, request.model_version),
        encode_request(config, request.inputs, request.parameters, request.request_id),
        ResponseDecoder(config, batch_size_of(config, request.inputs), url),
    )
