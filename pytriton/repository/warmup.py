"""Setup step 2: `ModelWarmup` declarations -> Triton ``model_warmup`` entries and their data files.

Data Triton reads travels as files in the model folder's ``warmup/`` subfolder (Triton's
``input_data_file``), raw and row-major; BYTES as Triton serialises them, each item a
little-endian uint32 length then its bytes. A sample array becomes such a file here; a
`WarmupInput` file of the user's is copied there by the writer. The only I/O is a look at such
a user file (is it there, is it long enough), so that a wrong path fails at `bind`, naming it.
Inputs a warm-up leaves out are ``zero_data``, with every variable axis of length 1.
"""

from __future__ import annotations

import math
import pathlib
import struct
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union, cast

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config.common import ModelWarmup, WarmupInput
from pytriton.model_config.model_config import ModelConfig
from pytriton.model_config.tensor import Tensor

WARMUP_FOLDER = "warmup"
"""The model folder's subfolder Triton reads ``input_data_file`` from."""

WarmupFile = Union[bytes, pathlib.Path]
"""The content of a file for ``warmup/``: the bytes to write, or the user's file to copy."""


def _bytes_payload(array: np.ndarray) -> bytes:
    parts = []
    for item in array.reshape(-1):
        data = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def _where(model_name: str, warmup: ModelWarmup, tensor: Tensor) -> str:
    return f"model {model_name!r}: ModelWarmup {warmup.name!r} input {tensor.name!r}"


def _check_shape(where: str, tensor: Tensor, shape: Tuple[int, ...]) -> None:
    if len(shape) != len(tensor.shape) or any(want not in (-1, got) for want, got in zip(tensor.shape, shape)):
        raise PyTritonModelConfigError(
            f"{where} has shape {shape}; expected one sample of shape {tensor.shape} "
            "(-1 is any length, no batch axis)"
        )


def _sample_payload(where: str, tensor: Tensor, sample: np.ndarray) -> bytes:
    _check_shape(where, tensor, sample.shape)
    declared = np.dtype(tensor.dtype)
    if declared.kind in "SO":
        if sample.dtype.kind not in "SUO":
            raise PyTritonModelConfigError(f"{where} has dtype {sample.dtype}; expected bytes or str items")
        return _bytes_payload(sample)
    if not np.can_cast(sample.dtype, declared, casting="same_kind"):
        raise PyTritonModelConfigError(
            f"{where} has dtype {sample.dtype}, which does not convert safely to the input's {declared}"
        )
    return np.ascontiguousarray(sample, dtype=declared).tobytes()


def _user_file(where: str, tensor: Tensor, spec: WarmupInput) -> pathlib.Path:
    """The user's data file as an absolute path, checked to exist and to hold one sample."""
    given = str(spec.input_data_file)
    path = pathlib.Path(given).expanduser().absolute()
    if not path.is_file():
        raise PyTritonModelConfigError(
            f"{where}: input_data_file {given!r} is not a file (looked at {str(path)!r}; a relative path is "
            "taken from the current directory)"
        )
    declared = np.dtype(tensor.dtype)
    if declared.kind not in "SO":
        # Triton refuses a file shorter than one sample when it loads the model; say so at bind.
        needed = math.prod(spec.shape) * declared.itemsize
        size = path.stat().st_size
        if size < needed:
            raise PyTritonModelConfigError(
                f"{where}: input_data_file {given!r} holds {size} bytes; one sample of shape {spec.shape} "
                f"and dtype {declared} needs {needed}"
            )
    return path


def _npy_sample(where: str, given: str, shape: Tuple[int, ...]) -> np.ndarray:
    """The one sample a ``.npy`` data file holds, as the published PyTriton reads such files: the
    sample itself, or rows of it. Triton's warm-up sends one sample to every request of the
    batch, so rows that differ are refused, naming the file."""
    path = pathlib.Path(given).expanduser().absolute()
    try:
        array: np.ndarray = np.asarray(np.load(path, allow_pickle=False))
    except (OSError, ValueError) as exc:
        raise PyTritonModelConfigError(
            f"{where}: input_data_file {given!r} is not a readable .npy file ({exc})"
        ) from exc
    if array.shape == shape:
        return array
    if array.ndim == len(shape) + 1 and array.shape[1:] == shape and len(array):
        if all(np.array_equal(row, array[0]) for row in array[1:]):
            first: np.ndarray = array[0]
            return first
        raise PyTritonModelConfigError(
            f"{where}: input_data_file {given!r} holds {len(array)} different rows; Triton's warm-up sends one sample "
            f"to every request of the batch: give one sample of shape {shape}, or one ModelWarmup per row"
        )
    raise PyTritonModelConfigError(
        f"{where}: input_data_file {given!r} holds an array of shape {array.shape}; expected one sample of shape "
        f"{shape} (or rows of it)"
    )


def _declared_input(
    where: str, tensor: Tensor, spec: WarmupInput, entry: Any, file_name: str, files: Dict[str, WarmupFile]
) -> None:
    """Fill `entry` from a `WarmupInput`, after checking it against the model's input."""
    dtype, shape = np.dtype(spec.dtype), tuple(spec.shape)  # already normalised; typed for the checker
    declared = np.dtype(tensor.dtype)
    if not (dtype == declared or (dtype.kind in "SO" and declared.kind in "SO")):
        raise PyTritonModelConfigError(f"{where} has dtype {dtype}; the model's input has dtype {declared}")
    _check_shape(where, tensor, shape)
    entry.dims.extend(shape)
    if spec.input_data_file is not None and spec.input_data_file.lower().endswith(".npy"):
        files[file_name] = _sample_payload(where, tensor, _npy_sample(where, spec.input_data_file, shape))
        entry.input_data_file = file_name
    elif spec.input_data_file is not None:
        files[file_name] = _user_file(where, tensor, spec)
        entry.input_data_file = file_name
    elif spec.random_data:
        entry.random_data = True
    else:
        entry.zero_data = True


def warmup_entries(
    model_name: str, inputs: Sequence[Tensor], config: ModelConfig, data_type_of: Callable[[np.dtype, str], int]
) -> Tuple[List[pb.ModelWarmup], Dict[str, WarmupFile]]:
    """The ``model_warmup`` messages of a model and the files they read, by file name.

    Args:
        model_name: for error messages.
        inputs: the model's inputs, names resolved.
        config: the model's configuration, whose ``model_warmup`` is turned into messages.
        data_type_of: maps (dtype, tensor name) to Triton's data type enum value.

    Raises:
        PyTritonModelConfigError: a warm-up names no input, gives one the wrong shape or dtype,
            names a data file that is missing or too short, or has a batch size that does not
            fit the model. The message names the model, the warm-up and the input.
    """
    messages: List[pb.ModelWarmup] = []
    files: Dict[str, WarmupFile] = {}
    names = [str(tensor.name) for tensor in inputs]
    # ModelConfig stores model_warmup as a tuple whatever form it was given in, or None.
    for warmup in cast(Tuple[ModelWarmup, ...], config.model_warmup or ()):
        given = dict(warmup.inputs or {})
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise PyTritonModelConfigError(
                f"model {model_name!r}: ModelWarmup {warmup.name!r} gives inputs {unknown} that the model does not "
                f"have; its inputs are {names}"
            )
        limit = config.max_batch_size if config.batching else 1
        if warmup.batch_size > limit:
            reason = f"max_batch_size is {limit}" if config.batching else "the model does not batch"
            raise PyTritonModelConfigError(
                f"model {model_name!r}: ModelWarmup {warmup.name!r} has batch_size={warmup.batch_size} but {reason}"
            )
        message = pb.ModelWarmup(name=warmup.name, batch_size=warmup.batch_size, count=warmup.count)
        for index, tensor in enumerate(inputs):
            name = str(tensor.name)
            file_name = f"{warmup.name}-input{index}"
            if name not in given:
                if tensor.optional:
                    continue
                entry = message.inputs[name]
                entry.data_type = data_type_of(np.dtype(tensor.dtype), name)
                entry.dims.extend(1 if dim == -1 else dim for dim in tensor.shape)
                entry.zero_data = True
                continue
            entry = message.inputs[name]
            entry.data_type = data_type_of(np.dtype(tensor.dtype), name)
            where = _where(model_name, warmup, tensor)
            value = given[name]
            if isinstance(value, WarmupInput):
                _declared_input(where, tensor, value, entry, file_name, files)
            else:
                files[file_name] = _sample_payload(where, tensor, value)
                entry.dims.extend(value.shape)
                entry.input_data_file = file_name
        messages.append(message)
    return messages, files
