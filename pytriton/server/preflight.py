"""Before tritonserver starts: is /dev/shm large enough for the bound models?

Triton's Python backend copies every request's inputs and outputs into a shared-memory pool in
/dev/shm (and keeps the pool at its peak), and pytriton's arenas take the same bytes once more
on the fast path. Docker gives a container 64 MB there by default, which fails requests of a
few tens of MiB. A server started in such a container logs one WARNING saying so and how to
fix it, rather than leaving the first large request to find out.

`shm_warning` is the pure check; `warn_if_shm_small` reads /dev/shm and logs.
"""

from __future__ import annotations

import logging
import math
from typing import Iterable, Mapping, Optional, Protocol, Sequence

import numpy as np

from pytriton.ipc.shm import MIB, SHM_DIR, shm_fix, shm_usage, suggested_shm_bytes
from pytriton.model_config import ModelConfig, Tensor

logger = logging.getLogger("pytriton.triton")

SHM_FLOOR_BYTES = 256 * MIB
"""Below this, /dev/shm is called small whatever the models: it serves requests of about
120 MiB (inputs plus outputs) on the fast path, while Docker's default 64 MB fails at about 30 MiB."""


class ModelShape(Protocol):
    """What the check reads of a bound model (`pytriton.worker.context.TritonContext` has it)."""

    @property
    def model_name(self) -> str: ...

    @property
    def inputs(self) -> Sequence[Tensor]: ...

    @property
    def outputs(self) -> Sequence[Tensor]: ...

    @property
    def config(self) -> ModelConfig: ...


def full_batch_bytes(inputs: Sequence[Tensor], outputs: Sequence[Tensor], config: ModelConfig) -> Optional[int]:
    """The input plus output bytes of one full batch, or None when a size is not declared.

    Known only when every tensor has a fixed shape (no -1) and a numeric dtype: a variable axis
    or a BYTES tensor can be any size.
    """
    total = 0
    for tensor in (*inputs, *outputs):
        dtype = np.dtype(tensor.dtype)
        if dtype.kind in ("O", "S", "U") or any(dim < 0 for dim in tensor.shape):
            return None
        total += math.prod(tensor.shape) * dtype.itemsize
    return total * (config.triton_max_batch_size or 1)  # a model without a batch axis takes one request a call


def shm_warning(total_bytes: int, free_bytes: int, needs: Mapping[str, int]) -> Optional[str]:
    """The start-up warning for a /dev/shm of `total_bytes`, or None when it is large enough.

    Args:
        total_bytes: the size of /dev/shm.
        free_bytes: its free space now, for the message.
        needs: per model whose sizes are declared, the input plus output bytes of a full batch
            (see `full_batch_bytes`).
    """
    largest = max(needs.items(), key=lambda item: item[1], default=None)
    wanted = suggested_shm_bytes(largest[1]) if largest else SHM_FLOOR_BYTES
    if total_bytes >= max(SHM_FLOOR_BYTES, wanted):
        return None
    size = f"{SHM_DIR} is {total_bytes / MIB:.1f} MiB ({free_bytes / MIB:.1f} MiB free)"
    if largest is not None and wanted > SHM_FLOOR_BYTES:
        why = (
            f"model '{largest[0]}' moves {largest[1] / MIB:.1f} MiB of inputs and outputs in a full batch, which "
            f"Triton's Python backend copies into shared memory and pytriton's fast path once more, so it wants "
            f"{wanted // MIB} MiB"
        )
    else:
        why = (
            f"less than {SHM_FLOOR_BYTES // MIB} MiB; Triton's Python backend copies every request's inputs and "
            "outputs into shared memory, so requests of a few tens of MiB will fail"
        )
    return f"{size}: {why}. To avoid failed requests, {shm_fix(largest[1] if largest else 0)}."


def warn_if_shm_small(models: Iterable[ModelShape], directory: str = SHM_DIR) -> Optional[str]:
    """Log one WARNING when /dev/shm is smaller than the bound models want; returns it (or None).

    Call it once before tritonserver starts. Nothing happens where `directory` cannot be read.
    """
    try:
        usage = shm_usage(directory)
    except OSError:
        return None
    needs = {}
    for model in models:
        need = full_batch_bytes(model.inputs, model.outputs, model.config)
        if need is not None:
            needs[model.model_name] = need
    message = shm_warning(usage.total, usage.free, needs)
    if message is not None:
        logger.warning("%s", message)
    return message
