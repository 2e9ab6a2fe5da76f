"""The configuration of a bound model as the server loads it: Triton's fields and pytriton's parameters.

Pure. Besides the declared tensors and `ModelConfig`, the config.pbtxt of a bound model tells
the code that runs inside tritonserver where the model's workers are: pytriton's backend reads
the data socket of each instance (`protocol.PARAM_DATA_SOCKETS`), the proxy in Triton's Python
backend the ZeroMQ endpoint it greets first; both read the rest of the parameters. The instances
stay one ``KIND_CPU`` group even when ``ModelConfig.devices`` places their worker processes on GPUs:
tritonserver refuses ``KIND_GPU`` where it sees no GPU, and names every instance of a group
``<group>_<k>`` whatever its device, which is how both the backend and the proxy find instance k's
worker; the placement is written as `protocol.PARAM_DEVICES` instead.
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig
from pytriton.model_config.instances import instance_devices
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
        endpoint: the ZeroMQ endpoint the handlers are named after (`protocol.instance_endpoint`).
        shm_prefix: the model's prefix of shared-memory segments.
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
        **({protocol.PARAM_DEVICES: json.dumps(instance_devices(config.devices, instance_count))}
           if config.devices else {}),
        **extra,
    }
    proto = model_config_proto(model_name, inputs, outputs, config, instance_count=instance_count, backend=backend,
                               parameters=served)
    return to_pbtxt(proto)
