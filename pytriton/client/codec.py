"""Numpy arrays to and from ``tritonclient`` objects, and the mapping of user inputs (pure).

Shared by every client flavour and both protocols: ``tritonclient.http`` and
``tritonclient.grpc`` (and their ``aio`` variants) expose ``InferInput`` with the same API, so
the protocol module is a parameter rather than a reason for two copies of this code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor, triton_to_np_dtype

from pytriton.client._args import SEQUENCE_KEYS
from pytriton.client._errors import batch_too_large
from pytriton.client.core_request import CoreRequest
from pytriton.client.exceptions import PyTritonClientModelDoesntSupportBatchingError, PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig
from pytriton.client_contract import DEADLINE_PARAMETER

if TYPE_CHECKING:
    from pytriton.client.shm_regions import SharedTensors

_T = TypeVar("_T")

# Request parameters Triton keeps for itself (its own names, and any starting with the prefix).
# Written here rather than imported: older tritonclient releases (those for Python 3.8) lack them.
_RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output"}
)
_RESERVED_PARAMETER_PREFIX = "triton_"


def map_inputs(config: ClientModelConfig, positional: Sequence[Any], named: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Name the inputs of one call: positional ones by the model's input order, named ones as given.

    Args:
        config: the model's configuration (its input order).
        positional: arrays given positionally.
        named: arrays given by input name.

    Returns:
        Input name to array.

    Raises:
        PyTritonClientValueError: both kinds are given, too many positional inputs, or a value is
            not a numpy array.
    """
    if positional and named:
        raise PyTritonClientValueError(
            "Give inputs either positionally or by name, not both "
            f"(got {len(positional)} positional and named {sorted(named)})"
        )
    if positional:
        expected = [spec.name for spec in config.inputs]
        if len(positional) > len(expected):
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} has {len(expected)} input(s) {expected}, "
                f"but {len(positional)} positional input(s) were given"
            )
        inputs = dict(zip(expected, positional))
    else:
        inputs = dict(named)
    for name, value in inputs.items():
        if not isinstance(value, np.ndarray):
            raise PyTritonClientValueError(f"Input {name!r} must be a numpy.ndarray, got {type(value).__name__}")
    _check_dtypes(config, inputs)
    return inputs


def _check_dtypes(config: ClientModelConfig, inputs: Mapping[str, np.ndarray]) -> None:
    """Refuse, before sending, what the server would refuse: an input the model does not have, or
    an array of another dtype than the model's (Triton converts nothing), saying how to fix it."""
    if not config.inputs:
        return  # a configuration without tensors (given by the user): the server decides
    specs = config.input_specs
    for name, value in inputs.items():
        spec = specs.get(name)
        if spec is None:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r} has no input {name!r}; its inputs are {list(specs)}"
            )
        expected = spec.dtype
        if expected is None or value.dtype == expected:
            continue
        wants_bytes = expected.kind in ("O", "S", "U")
        if wants_bytes and value.dtype.kind in ("O", "S", "U"):
            continue  # any bytes-like array travels as BYTES
        if wants_bytes:
            fix = "it takes bytes: pass an object array of bytes (np.array([b'...'], dtype=object)) or a bytes array"
        elif value.dtype.kind in ("O", "S", "U"):
            fix = f"it takes numbers: convert the array with .astype(np.{expected.name})"
        else:
            fix = f"cast it with .astype(np.{expected.name})"
        raise PyTritonClientValueError(
            f"Model {config.model_name!r}: input {name!r} is an array of {value.dtype}, but the model declares "
            f"{spec.triton_dtype} ({expected}); {fix}"
        )


def check_shapes(config: ClientModelConfig, inputs: Mapping[str, np.ndarray], batched: bool) -> None:
    """Refuse, before sending, an input whose shape the model's dims do not allow (-1: any size).

    Triton refuses such a request too, but its message adds, for a batching model, a note on
    prepending a batch axis, which misleads when the axis is there and a fixed size is wrong
    (``factor`` sent with 2 values where the model declares ``(1,)``). Here the message names
    the input, the shape the model declares for one sample and the one sent.

    Args:
        config: the model's configuration (a configuration without tensors checks nothing).
        inputs: input name to array, as the user gave them.
        batched: the first axis of every array is the batch (``infer_batch``); otherwise each
            array is one sample (``infer_sample``, or any call of a model that does not batch).

    Raises:
        PyTritonClientValueError: an input's shape does not fit the model's dims.
    """
    specs = config.input_specs
    for name, value in inputs.items():
        spec = specs.get(name)
        if spec is None or spec.shape_tensor:
            continue
        if batched and value.ndim == 0:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r}: input {name!r} is a 0-d array, with no batch axis; infer_batch takes "
                f"the batch as the first axis, then samples of shape {spec.shape} (-1: any size)"
            )
        sample = value.shape[1:] if batched else value.shape
        if len(sample) == len(spec.shape) and all(want < 0 or want == got for want, got in zip(spec.shape, sample)):
            continue
        sent = f"samples of shape {sample} (the batch of {value.shape[0]} first)" if batched else f"shape {sample}"
        raise PyTritonClientValueError(
            f"Model {config.model_name!r}: input {name!r} has {sent}, but the model declares shape {spec.shape} "
            f"for one sample (-1: any size)"
        )


def add_batch_axis(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Turn one sample into a batch of one (for ``infer_sample`` on a batching model)."""
    return {name: value[np.newaxis, ...] for name, value in inputs.items()}


def strip_batch_axis(outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Take the single sample out of a batch of one."""
    return {name: value[0] for name, value in outputs.items()}


def sample_request(
    config: ClientModelConfig, positional: Sequence[Any], named: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """The arrays ``infer_sample`` sends: the sample, as a batch of one for a batching model.

    Raises:
        PyTritonClientValueError: besides `map_inputs`' reasons, an input of a batching model
            that already has a batch axis (one axis more than the model declares): that is
            ``infer_batch``'s job.
    """
    inputs = map_inputs(config, positional, named)
    if not config.batching:
        check_shapes(config, inputs, batched=False)
        return inputs
    specs = config.input_specs
    for name, value in inputs.items():
        spec = specs.get(name)
        if spec is not None and value.ndim == len(spec.shape) + 1:
            raise PyTritonClientValueError(
                f"Model {config.model_name!r}: input {name!r} has shape {value.shape}, one axis more than the model "
                f"declares for one sample {spec.shape}; infer_sample sends one sample and adds the batch axis "
                f"itself. For several rows at once use infer_batch (its first axis is the batch), or pass "
                f"{name}[0] for the first row"
            )
    check_shapes(config, inputs, batched=False)
    return add_batch_axis(inputs)


def sample_response(config: ClientModelConfig, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs ``infer_sample`` returns: the batch of one taken apart again."""
    return strip_batch_axis(outputs) if config.batching else dict(outputs)


def batch_request(
    config: ClientModelConfig, positional: Sequence[Any], named: Mapping[str, Any], whole: bool = True
) -> dict[str, np.ndarray]:
    """The arrays ``infer_batch`` sends; refused for a model without batching.

    Args:
        config: the model's configuration.
        positional: arrays given positionally.
        named: arrays given by input name.
        whole: the batch goes out as one request, so it must fit the model's ``max_batch_size``
            (False for one that will be cut into chunks).

    Raises:
        PyTritonClientModelDoesntSupportBatchingError: the model does not batch.
        PyTritonClientInferenceServerError: `whole`, and the batch is larger than ``max_batch_size``:
            the error Triton would answer (found here, before a large batch crosses the network),
            with the way out (``infer_batch_chunked``).
        PyTritonClientValueError: see `map_inputs`.
    """
    if not config.batching:
        raise PyTritonClientModelDoesntSupportBatchingError(
            f"Model {config.model_name!r} has max_batch_size 0 and does not take batches; use infer_sample"
        )
    inputs = map_inputs(config, positional, named)
    check_shapes(config, inputs, batched=True)
    if whole and config.max_batch_size > 0:
        sizes = [value.shape[0] for value in inputs.values() if value.ndim > 0]
        if sizes and sizes[0] > config.max_batch_size:  # Triton reads the batch size off the first input
            raise batch_too_large(config.model_name, config.max_batch_size)
    return inputs


def split_batch(inputs: Mapping[str, np.ndarray], chunk_size: int) -> list[dict[str, np.ndarray]]:
    """Cut a batch into consecutive chunks of at most ``chunk_size`` samples (views, no copies).

    Raises:
        PyTritonClientValueError: an input has no batch axis, or the inputs disagree on the batch size.
    """
    sizes = {}
    for name, value in inputs.items():
        if value.ndim == 0:
            raise PyTritonClientValueError(f"Input {name!r} has no batch axis (it is a 0-d array)")
        sizes[name] = value.shape[0]
    if len(set(sizes.values())) > 1:
        raise PyTritonClientValueError(f"The inputs disagree on the batch size (first axis): {sizes}")
    total = next(iter(sizes.values()), 0)
    if total <= chunk_size:
        return [dict(inputs)]
    return [
        {name: value[start : start + chunk_size] for name, value in inputs.items()}
        for start in range(0, total, chunk_size)
    ]


def chunked_request(
    config: ClientModelConfig, positional: Sequence[Any], named: Mapping[str, Any], chunk_size: int | None
) -> list[dict[str, np.ndarray]]:
    """The requests ``infer_batch_chunked`` sends: the batch cut into chunks of `chunk_size`
    samples (``None``: the model's ``max_batch_size``); see `batch_request` and `split_batch`."""
    return split_batch(batch_request(config, positional, named, whole=False), chunk_size or config.max_batch_size)


def concat_batches(chunks: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Join the outputs of consecutive chunks back into one batch, in order."""
    if len(chunks) == 1:
        return dict(chunks[0])
    return {name: np.concatenate([chunk[name] for chunk in chunks], axis=0) for name in chunks[0]}


def first_error_raised(results: Sequence[Union[_T, BaseException]]) -> list[_T]:
    """`results` of requests sent together, once none is an error; else the first error is raised."""
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)  # type: ignore[arg-type]  # no error left in it


def wire_array(name: str, value: np.ndarray) -> tuple[np.ndarray, str]:
    """The array as it goes on the wire (unicode as object) and its Triton data type.

    Raises:
        PyTritonClientValueError: Triton has no data type for the array's dtype.
    """
    if value.dtype.kind == "U":
        # tritonclient encodes str items of object arrays as UTF-8; unicode arrays it refuses.
        value = value.astype(np.object_)
    triton_dtype = np_to_triton_dtype(value.dtype)
    if triton_dtype is None:
        raise PyTritonClientValueError(
            f"Input {name!r} has dtype {value.dtype} that Triton cannot carry; use a numeric, bool, "
            "bytes or object (bytes/str items) array"
        )
    return value, triton_dtype


def to_infer_inputs(
    protocol: ModuleType, inputs: Mapping[str, np.ndarray], shared: Optional[SharedTensors] = None
) -> list[Any]:
    """Build ``protocol.InferInput`` objects carrying the arrays in binary form.

    Object arrays go as BYTES, item by item with a length prefix, so bytes with trailing
    ``b"\\x00"`` arrive unchanged (``np.bytes_`` arrays lose them inside numpy already).

    Args:
        protocol: ``tritonclient.http`` or ``tritonclient.grpc`` (or an ``aio`` variant).
        inputs: input name to array.
        shared: inputs already written into a shared-memory region: named by region and
            offset there, not carried.

    Returns:
        The ``InferInput`` list for ``infer``.
    """
    infer_inputs = []
    for name, value in inputs.items():
        value, triton_dtype = wire_array(name, value)
        infer_input = protocol.InferInput(name, list(value.shape), triton_dtype)
        slot = shared.input_slot(name) if shared is not None else None
        if slot is None:
            infer_input.set_data_from_numpy(value)
        else:
            infer_input.set_shared_memory(shared.region.name, slot.nbytes, slot.offset)  # type: ignore[union-attr]
        infer_inputs.append(infer_input)
    return infer_inputs


def requested_outputs(protocol: ModuleType, shared: Optional[SharedTensors]) -> Optional[list[Any]]:
    """The outputs to ask for: None (all, in the body) unless some go into a shared-memory region;
    then every output of the model, each in its slot or in binary in the body."""
    if shared is None or not shared.layout.outputs:
        return None
    outputs = []
    for name, slot in shared.layout.outputs:
        output = protocol.InferRequestedOutput(name)
        if slot is not None:
            output.set_shared_memory(shared.region.name, slot.nbytes, slot.offset)
        outputs.append(output)
    return outputs


def to_stream_request(
    model_name: str,
    model_version: str,
    inputs: Mapping[str, np.ndarray],
    *,
    parameters: Mapping[str, Any] | None = None,
    request_id: str = "",
    priority: int = 0,
) -> Any:
    """A gRPC ``ModelInferRequest`` for a decoupled model's stream, asking for an empty final response.

    The asyncio streaming client builds its requests here: ``tritonclient.grpc.aio``'s
    ``stream_infer`` cannot ask for the empty final response (only the blocking client's
    ``async_stream_infer`` can), and without it a stream whose model sends the final flag on its
    own never shows its end. Tensors go in binary as ``to_infer_inputs`` sends them; a
    `priority` other than 0 goes as Triton's own ``priority`` parameter.

    Raises:
        PyTritonClientValueError: an array Triton cannot carry, or a parameter that is reserved
            by Triton or of another type than str, int, float or bool.
    """
    request = service_pb2.ModelInferRequest(model_name=model_name, model_version=model_version, id=request_id)
    for name, value in inputs.items():
        value, triton_dtype = wire_array(name, value)
        request.inputs.add(name=name, datatype=triton_dtype, shape=list(value.shape))
        if triton_dtype == "BYTES":
            serialized = serialize_byte_tensor(value)
            request.raw_input_contents.append(serialized.item() if serialized.size else b"")
        else:
            request.raw_input_contents.append(np.ascontiguousarray(value).tobytes())
    for key, item in (parameters or {}).items():
        if key in SEQUENCE_KEYS:  # the request's sequence, checked by `sequence_args`: Triton's own parameters
            parameter = request.parameters[key]
            if isinstance(item, bool):
                parameter.bool_param = item
            elif isinstance(item, int):
                parameter.int64_param = item
            else:
                parameter.string_param = str(item)
            continue
        if key in _RESERVED_PARAMETERS or key.startswith(_RESERVED_PARAMETER_PREFIX):
            raise PyTritonClientValueError(f"Parameter {key!r} is reserved by Triton and cannot be given")
        parameter = request.parameters[key]
        if isinstance(item, bool):  # before int: bool is an int
            parameter.bool_param = item
        elif isinstance(item, int):
            parameter.int64_param = item
        elif isinstance(item, float):
            parameter.double_param = item
        elif isinstance(item, str):
            parameter.string_param = item
        else:
            raise PyTritonClientValueError(f"Parameter {key!r} must be a str, int, float or bool, got {item!r}")
    if priority:
        request.parameters["priority"].uint64_param = priority  # where tritonclient puts it
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def is_final_response(response: Any) -> bool:
    """Whether a gRPC ``ModelInferResponse`` is a stream's last one (Triton's ``triton_final_response``)."""
    flag = response.parameters.get("triton_final_response")
    return bool(flag is not None and flag.bool_param)


def output_names(response: Any) -> list[str]:
    """Names of the outputs in a response: a JSON dict (HTTP) or a ``ModelInferResponse`` (gRPC)."""
    if isinstance(response, Mapping):
        return [output["name"] for output in response.get("outputs", ())]
    return [output.name for output in response.outputs]


def from_infer_result(result: Any, shared: Optional[SharedTensors] = None) -> dict[str, np.ndarray]:
    """Every output of an ``InferResult`` as a numpy array (BYTES as object arrays of bytes);
    those placed in a shared-memory region are copied out of it."""
    response = result.get_response()
    if shared is None:
        return {name: result.as_numpy(name) for name in output_names(response)}
    outputs = {}
    for output in response["outputs"] if isinstance(response, Mapping) else response.outputs:
        name, datatype, shape = (
            (output["name"], output["datatype"], output["shape"]) if isinstance(output, Mapping)
            else (output.name, output.datatype, output.shape)
        )
        slot = shared.output_slot(name)
        if slot is None:
            outputs[name] = result.as_numpy(name)
        else:
            outputs[name] = shared.region.read(slot, np.dtype(triton_to_np_dtype(datatype)), tuple(shape))
    return outputs


def request_timeout_us(timeout_s: float) -> int:
    """The request's deadline for the server (Triton's ``timeout`` parameter, in microseconds).

    The client's inference timeout travels with the request: a model with a dynamic batcher
    (whose queue policy allows the override, as pytriton's models do by default) rejects it once
    that time has passed in its queue, so a request nobody waits for any more is never computed.
    """
    return max(1, int(timeout_s * 1_000_000))


def with_deadline(parameters: Mapping[str, Any] | None, timeout_s: float, now_s: float) -> dict[str, Any]:
    """The request's parameters plus its deadline for a pytriton worker (`DEADLINE_PARAMETER`)."""
    extended = dict(parameters) if parameters else {}
    extended[DEADLINE_PARAMETER] = int((now_s + timeout_s) * 1000)
    return extended


def infer_call(protocol: ModuleType, request: CoreRequest) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of ``tritonclient``'s ``infer`` (of `protocol`) for `request`, whose headers,
    parameters and ``timeout_s`` are the ones to send: the model name and inputs, and the keywords."""
    assert request.timeout_s is not None
    keywords = {
        "outputs": requested_outputs(protocol, request.shared),
        "model_version": request.model_version,
        "request_id": request.request_id,
        "parameters": request.parameters,
        "headers": request.headers,
        "timeout": request_timeout_us(request.timeout_s),
        "priority": request.priority,
        **request.sequence,
    }
    return (request.model_name, to_infer_inputs(protocol, request.inputs, request.shared)), keywords
