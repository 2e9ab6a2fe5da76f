"""Setup step 2: `ModelWarmup` declarations -> Triton ``model_warmup`` entries and their data files.

Pure functions, no I/O. Given samples travel as files in the model folder's ``warmup/``
subfolder (Triton's ``input_data_file``), raw and row-major; BYTES as Triton serialises them,
each item a little-endian uint32 length then its bytes. Inputs without a sample are
``zero_data``, with every variable axis of length 1.
"""

from __future__ import annotations

import struct
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config.model_config import ModelConfig
from pytriton.model_config.tensor import Tensor
from pytriton.model_config.warmup import ModelWarmup

WARMUP_FOLDER = "warmup"
"""The model folder's subfolder Triton reads ``input_data_file`` from."""


def _bytes_payload(array: np.ndarray) -> bytes:
    parts = []
    for item in array.reshape(-1):
        data = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def _sample_payload(model_name: str, warmup: ModelWarmup, tensor: Tensor, sample: np.ndarray) -> bytes:
    where = f"model {model_name!r}: ModelWarmup {warmup.name!r} input {tensor.name!r}"
    if len(sample.shape) != len(tensor.shape) or any(
        want not in (-1, got) for want, got in zip(tensor.shape, sample.shape)
    ):
        raise PyTritonModelConfigError(
            f"{where} has shape {sample.shape}; expected one sample of shape {tensor.shape} "
            "(-1 is any length, no batch axis)"
        )
    if tensor.dtype.kind in "SO":
        if sample.dtype.kind not in "SUO":
            raise PyTritonModelConfigError(f"{where} has dtype {sample.dtype}; expected bytes or str items")
        return _bytes_payload(sample)
    if not np.can_cast(sample.dtype, tensor.dtype, casting="same_kind"):
        raise PyTritonModelConfigError(
            f"{where} has dtype {sample.dtype}, which does not convert safely to the input's {tensor.dtype}"
        )
    return np.ascontiguousarray(sample, dtype=tensor.dtype).tobytes()


def warmup_entries(
    model_name: str, inputs: Sequence[Tensor], config: ModelConfig, data_type_of: Callable[[np.dtype, str], int]
) -> Tuple[List[pb.ModelWarmup], Dict[str, bytes]]:
    """The ``model_warmup`` messages of a model and the files they read, by file name.

    Args:
        model_name: for error messages.
        inputs: the model's inputs, names resolved.
        config: the model's configuration, whose ``warmup`` is turned into messages.
        data_type_of: maps (dtype, tensor name) to Triton's data type enum value.

    Raises:
        PyTritonModelConfigError: a sample names no input, has the wrong shape or dtype, or a
            batch size does not fit the model.
    """
    messages: List[pb.ModelWarmup] = []
    files: Dict[str, bytes] = {}
    names = [str(tensor.name) for tensor in inputs]
    for warmup in config.warmups:
        samples = dict(warmup.inputs or {})
        unknown = sorted(set(samples) - set(names))
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
            entry = message.inputs[name]
            entry.data_type = data_type_of(tensor.dtype, name)
            if name in samples:
                file_name = f"{warmup.name}-input{index}"
                files[file_name] = _sample_payload(model_name, warmup, tensor, samples[name])
                entry.dims.extend(samples[name].shape)
                entry.input_data_file = file_name
            elif tensor.optional:
                del message.inputs[name]
            else:
                entry.dims.extend(1 if dim == -1 else dim for dim in tensor.shape)
                entry.zero_data = True
        messages.append(message)
    return messages, files
