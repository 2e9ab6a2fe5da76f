"""`ModelWarmup` declarations -> one `WarmupPlan` per model folder: Triton's ``model_warmup``
entries and their data files, or the warm-ups pytriton runs itself.

Data Triton reads travels as files in the model folder's ``warmup/`` subfolder (Triton's
``input_data_file``), raw and row-major; BYTES as Triton serialises them, each item a
little-endian uint32 length then its bytes. A sample array becomes such a file here; a
`WarmupInput` file of the user's is copied there by the writer. The only I/O is a look at such
a user file (is it there, is it long enough), so that a wrong path fails at `bind`, naming it.
Inputs a warm-up leaves out are ``zero_data``, with every variable axis of length 1.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib
import struct
from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union, cast

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config.common import ModelWarmup, WarmupInput
from pytriton.model_config.model_config import ModelConfig
from pytriton.model_config.tensor import Tensor
from pytriton.repository.pbtxt import to_triton_data_type

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


def _npy_array(where: str, given: str, shape: Tuple[int, ...]) -> np.ndarray:
    """The array a ``.npy`` data file holds: one sample, or rows of samples (as the published
    PyTriton reads such files)."""
    path = pathlib.Path(given).expanduser().absolute()
    try:
        stat = path.stat()
        array = _load_npy(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError) as exc:
        raise PyTritonModelConfigError(
            f"{where}: input_data_file {given!r} is not a readable .npy file ({exc})"
        ) from exc
    rows = array.ndim == len(shape) + 1 and array.shape[1:] == shape and len(array) > 0
    if array.shape != shape and not rows:
        raise PyTritonModelConfigError(
            f"{where}: input_data_file {given!r} holds an array of shape {array.shape}; expected one sample of "
            f"shape {shape} (or rows of it)"
        )
    return array


@functools.lru_cache(maxsize=2)
def _load_npy(path: str, mtime_ns: int, size: int) -> np.ndarray:
    """A ``.npy`` file's array, read-only. One `bind` looks at a file several times (its checks,
    Triton's entries, pytriton's own warm-up); the file is read once, while it stays unchanged."""
    array: np.ndarray = np.asarray(np.load(path, allow_pickle=False))
    array.flags.writeable = False
    return array


def _distinct_rows(array: np.ndarray, shape: Tuple[int, ...]) -> bool:
    return array.shape != shape and not all(np.array_equal(row, array[0]) for row in array[1:])


def _npy_sample(where: str, given: str, shape: Tuple[int, ...]) -> np.ndarray:
    """The one sample of a ``.npy`` data file of one sample or of equal rows."""
    array = _npy_array(where, given, shape)
    if array.shape == shape:
        return array
    first: np.ndarray = array[0]
    return first


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


@dataclasses.dataclass(frozen=True)
class LocalWarmup:
    """A warm-up pytriton runs itself, before the model loads: `count` calls of each of the
    model's callables with one request of these `inputs` (batch axis first for a batching model)."""

    name: str
    count: int
    inputs: Dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class WarmupPlan:
    """A model's warm-ups, checked and worked out once per model folder (`plan_warmups`, at `bind`).

    Either Triton runs them, `entries` going into config.pbtxt's ``model_warmup`` and `files` into
    the folder's ``warmup/``; or, where Triton cannot send a warm-up's batch (a ``.npy`` file of
    rows that differ), pytriton runs every one itself before the model loads (`local`) and Triton
    gets none.
    """

    entries: Tuple[pb.ModelWarmup, ...] = ()
    files: Mapping[str, WarmupFile] = dataclasses.field(default_factory=dict)
    """The ``warmup/`` files by name: the bytes to write, or the user's file to copy."""
    local: Tuple[LocalWarmup, ...] = ()


def plan_warmups(model_name: str, inputs: Sequence[Tensor], config: ModelConfig) -> WarmupPlan:
    """The warm-up plan of a model: every warm-up checked, then made Triton's or pytriton's own.

    Args:
        model_name: for error messages.
        inputs: the model's inputs, names resolved.
        config: the model's configuration, whose ``model_warmup`` is planned.

    Raises:
        PyTritonModelConfigError: a warm-up names no input, gives one the wrong shape or dtype,
            names a data file that is missing or too short, or has a batch size that does not
            fit the model. The message names the model, the warm-up and the input.
    """
    messages, files = _triton_entries(model_name, inputs, config)
    if _runs_locally(model_name, inputs, config):
        return WarmupPlan(local=tuple(local_warmups(model_name, inputs, config)))
    return WarmupPlan(tuple(messages), files)


def _triton_entries(
    model_name: str, inputs: Sequence[Tensor], config: ModelConfig
) -> Tuple[List[pb.ModelWarmup], Dict[str, WarmupFile]]:
    """The ``model_warmup`` messages of a model and the files they read, by file name; checks each."""
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
        limit = config.triton_max_batch_size or 1
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
                entry.data_type = to_triton_data_type(np.dtype(tensor.dtype), name)
                entry.dims.extend(1 if dim == -1 else dim for dim in tensor.shape)
                entry.zero_data = True
                continue
            entry = message.inputs[name]
            entry.data_type = to_triton_data_type(np.dtype(tensor.dtype), name)
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


def _runs_locally(model_name: str, inputs: Sequence[Tensor], config: ModelConfig) -> bool:
    """Whether a warm-up gives a ``.npy`` file of different rows: Triton's own warm-up sends one
    sample to every request of its batch, so such a batch can only be sent by pytriton itself
    (as the published PyTriton sends every warm-up)."""
    by_name = {str(tensor.name): tensor for tensor in inputs}
    for warmup in cast(Tuple[ModelWarmup, ...], config.model_warmup or ()):
        for name, value in (warmup.inputs or {}).items():
            if isinstance(value, WarmupInput) and str(value.input_data_file or "").lower().endswith(".npy"):
                shape = tuple(value.shape)
                array = _npy_array(_where(model_name, warmup, by_name[name]), str(value.input_data_file), shape)
                if _distinct_rows(array, shape):
                    return True
    return False


def local_warmups(model_name: str, inputs: Sequence[Tensor], config: ModelConfig) -> List[LocalWarmup]:
    """Every warm-up of the model as pytriton runs it itself, in their order (checked before, by
    `_triton_entries`): the plan's `WarmupPlan.local` where Triton cannot send them, and all of them
    for a version that joins a serving one, warmed up here first so that one that fails is refused
    before Triton loads it (`pytriton.facade.versions`).

    The data follows the published PyTriton: a ``.npy`` file of rows gives the batch its rows
    (repeated or cut to `batch_size`), a sample (array, raw file or ``.npy``) is repeated for
    every row, ``zero_data`` is zeros, ``random_data`` random numbers (integers 0..99, floats in
    [0, 1)); inputs left out are zeros, with every variable axis of length 1, optional ones are
    left out.
    """
    plans = []
    for warmup in cast(Tuple[ModelWarmup, ...], config.model_warmup or ()):
        rows = warmup.batch_size if config.batching else 0
        given = dict(warmup.inputs or {})
        arrays: Dict[str, np.ndarray] = {}
        for tensor in inputs:
            name = str(tensor.name)
            value = given.get(name)
            if value is None and tensor.optional:
                continue
            arrays[name] = _local_input(_where(model_name, warmup, tensor), tensor, value, rows)
        plans.append(LocalWarmup(warmup.name, warmup.count, arrays))
    return plans


def _local_input(where: str, tensor: Tensor, value: Any, rows: int) -> np.ndarray:
    """One input of a local warm-up: `rows` rows (0: no batch axis)."""
    dtype = np.dtype(tensor.dtype)
    if not isinstance(value, WarmupInput):
        sample = np.zeros(tuple(1 if dim == -1 else dim for dim in tensor.shape), dtype) if value is None else value
        return _repeated(np.asarray(sample, dtype=object if dtype.kind in "SO" else dtype), rows)
    shape = tuple(value.shape)
    target = object if dtype.kind in "SO" else dtype
    path = str(value.input_data_file or "")
    if path.lower().endswith(".npy"):
        array = _npy_array(where, path, shape).astype(target)
        if array.shape == shape:
            return _repeated(array, rows)
        if not rows:
            return np.asarray(array[0])
        return np.resize(array, (rows, *shape))  # repeated in turn, or cut, to `rows`
    if path:
        sample = _raw_sample(where, pathlib.Path(path).expanduser().absolute(), dtype, shape)
    elif value.random_data and dtype.kind in "iu":
        sample = np.random.randint(0, 100, size=shape).astype(dtype)
    elif value.random_data and dtype.kind == "f":
        sample = np.random.random(shape).astype(dtype)
    elif value.random_data and dtype.kind == "b":
        sample = np.random.randint(0, 2, size=shape).astype(bool)
    elif dtype.kind in "SO":
        sample = np.full(shape, b"", dtype=object)  # Triton sends bytes as empty items, random or not
    else:
        sample = np.zeros(shape, dtype)
    return _repeated(sample, rows)


def _raw_sample(where: str, path: pathlib.Path, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
    """One sample read from a raw data file, as Triton would read it."""
    data = path.read_bytes()
    count = math.prod(shape)
    if dtype.kind not in "SO":
        return np.frombuffer(data[: count * dtype.itemsize], dtype=dtype).reshape(shape).copy()
    items, offset = [], 0
    for _ in range(count):
        if offset + 4 > len(data):
            raise PyTritonModelConfigError(f"{where}: input_data_file {str(path)!r} holds fewer than {count} items")
        (size,) = struct.unpack_from("<I", data, offset)
        items.append(data[offset + 4: offset + 4 + size])
        offset += 4 + size
    return np.array(items, dtype=object).reshape(shape)


def _repeated(sample: np.ndarray, rows: int) -> np.ndarray:
    return np.repeat(sample[np.newaxis, ...], rows, axis=0) if rows else sample.copy()
