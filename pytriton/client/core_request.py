"""One request as a client core sends it: the model, the encoded inputs and the request's options.

The clients build a `CoreRequest` once per request and hand it to their core (blocking or
asyncio, one answer or a stream), so the cores share one description of a request instead of
each repeating its dozen arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:
    from pytriton.client.shm_regions import SharedTensors


@dataclasses.dataclass(frozen=True)
class CoreRequest:
    """One inference request.

    Attributes:
        model_name: the model to run.
        model_version: its version, ``""`` for the server's choice.
        inputs: input name to array, batch axis included for batching models.
        parameters: custom request parameters (forwarded to the model).
        headers: extra HTTP headers or gRPC metadata.
        timeout_s: the longest to wait for the answer (for a stream: for the request to be
            taken); None for the core's default.
        request_id: the request's id, echoed by the server in its messages.
        sequence: tritonclient's sequence keywords (`pytriton.client._args.sequence_args`).
        shared: the tensors placed in a shared-memory region (`pytriton.client.shm`): these go
            by region and offset, the others in the body; None for all in the body.
        priority: the request's priority level for the model's dynamic batcher (1 the highest;
            0: the model's default level), tritonclient's ``priority``.
    """

    model_name: str
    model_version: str
    inputs: Mapping[str, np.ndarray]
    parameters: Mapping[str, Any] | None = None
    headers: Mapping[str, str] | None = None
    timeout_s: float | None = None
    request_id: str = ""
    sequence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    shared: Optional[SharedTensors] = None
    priority: int = 0
