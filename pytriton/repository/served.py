"""The configuration of a bound model as the server loads it: Triton's fields and pytriton's parameters.

Pure. Besides the declared tensors and `ModelConfig`, the config.pbtxt of a bound model tells
the code that runs inside tritonserver where the model's workers are: pytriton's backend reads
the data socket of each instance (`protocol.PARAM_DATA_SOCKETS`), the proxy in Triton's Python
backend the ZeroMQ endpoint it greets first; both read the rest of the parameters.
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig
from pytriton.model_config.tensor import Tensor
from pytriton.repository.pbtxt import model_config_proto, to_pbtxt


def served_config_text(
    model_name: str,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    config: ModelConfig,
    instance_count: int,
    *,
    coroutines: bool,
    endpoint: str,
    shm_prefix: str,
    backend: str,
    parameters: Mapping[str, str],
) -> str:
    """The config.pbtxt text of a bound model served through `backend` (``pytriton`` or ``python``).

    Args:
        model_name, inputs, outputs, config: the declaration (names resolved).
        instance_count: one Triton instance per callable.
        coroutines: some callable is async: its batches overlap, answered from a relay.
        endpoint: the model name's slot endpoint (`protocol.slot_endpoint`): the configuration
            serves every bound version of the name, and names none of them.
        shm_prefix: the server's prefix of shared-memory segments (`protocol.model_shm_prefix`).
        backend: the Triton backend that runs the model.
        parameters: more parameters (the facade's: metrics, tracing, timing stamps, the spin);
            ``pytriton.stamps`` is dropped for relayed models, which record none.
    """
    relayed = coroutines or config.decoupled
    data_sockets = [
        protocol.data_socket_path(protocol.ipc_socket_path(protocol.instance_endpoint(endpoint, index)) or "")
        for index in range(instance_count)
    ]
    extra = {key: value for key, value in parameters.items() if not (relayed and key == protocol.PARAM_STAMPS)}
    served = {
        **({protocol.PARAM_DATA_SOCKETS: json.dumps(data_sockets)} if backend != "python" else {}),
        protocol.PARAM_ENDPOINT: endpoint,
        protocol.PARAM_SHM_PREFIX: shm_prefix,
        protocol.PARAM_PROTOCOL: str(protocol.PROTOCOL_VERSION),
        protocol.PARAM_WORKER_PID: str(os.getpid()),
        protocol.PARAM_HANDLERS: str(instance_count),
        **({protocol.PARAM_RELAYED: "1"} if coroutines else {}),
        **extra,
    }
    proto = model_config_proto(model_name, inputs, outputs, config, instance_count=instance_count, backend=backend,
                               parameters=served)
    return to_pbtxt(proto)
