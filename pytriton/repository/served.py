"""The configuration of a bound model as the server loads it: Triton's fields and pytriton's parameters.

Pure. Besides the declared tensors and `ModelConfig`, the config.pbtxt of a bound model tells
the code that runs inside tritonserver where the model's workers are: pytriton's backend reads
the data socket of each instance (`protocol.PARAM_DATA_SOCKETS`), the proxy in Triton's Python
backend the ZeroMQ endpoint it greets first; both read the rest of the parameters.

When ``ModelConfig.devices`` places the worker processes on GPUs, the instances are grouped by
device, one group named after each (``<model>_gpu0``, ``<model>_gpu1``...), so Triton's instance
names (``<group>_<k>``) say which GPU each serves; those names, in worker order, go into
`protocol.PARAM_INSTANCE_NAMES`, where the backend and the proxy find their handler's number.
The groups stay ``KIND_CPU``: the callables run in pytriton's worker processes, not in Triton's
instances, so Triton's own GPU placement would only initialise CUDA in tritonserver for nothing,
and tritonserver refuses ``KIND_GPU`` where it sees no such GPU.
"""

from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tritonclient.grpc import model_config_pb2 as pb

from pytriton.ipc import protocol
from pytriton.model_config import ModelConfig
from pytriton.model_config.instances import Device, instance_devices
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
    warmups: Sequence[pb.ModelWarmup] = (),
    dispatchers: int = 0,
) -> str:
    """The config.pbtxt text of a bound model served through `backend` (``pytriton`` or ``python``).

    Args:
        model_name, inputs, outputs, config: the declaration (names resolved).
        instance_count: one Triton instance per callable.
        coroutines: some callable is async: its batches overlap, answered from a relay.
        endpoint: the model name's endpoint (`protocol.name_endpoint`): the configuration
            serves every bound version of the name, and names none of them.
        shm_prefix: the server's prefix of shared-memory segments (`protocol.model_shm_prefix`).
        backend: the Triton backend that runs the model.
        parameters: more parameters (the facade's: metrics, tracing, timing stamps, the spin);
            ``pytriton.stamps`` is dropped for relayed models, which record none.
        warmups: the ``model_warmup`` entries of the model's `pytriton.repository.warmup.WarmupPlan`.
        dispatchers: Triton instances beyond the callables' (pytriton's backend, no devices): they
            own no worker handler, and wait with their batches for an instance that does (a
            multiplexed model's routing, ``backend/route.c``).
    """
    relayed = coroutines or config.decoupled
    data_sockets = protocol.data_socket_patterns(endpoint, instance_count)
    extra = {key: value for key, value in parameters.items() if not (relayed and key == protocol.PARAM_STAMPS)}
    groups: List[Tuple[str, int]] = []
    names: List[str] = []
    if config.devices:
        groups, names = device_groups(model_name, instance_devices(config.devices, instance_count))
    served = {
        **({protocol.PARAM_DATA_SOCKETS: json.dumps(data_sockets)} if backend != "python" else {}),
        protocol.PARAM_ENDPOINT: endpoint,
        protocol.PARAM_SHM_PREFIX: shm_prefix,
        protocol.PARAM_PROTOCOL: str(protocol.PROTOCOL_VERSION),
        protocol.PARAM_WORKER_PID: str(os.getpid()),
        protocol.PARAM_HANDLERS: str(instance_count),
        **({protocol.PARAM_RELAYED: "1"} if coroutines else {}),
        **({protocol.PARAM_DEVICES: json.dumps(instance_devices(config.devices, instance_count)),
            protocol.PARAM_INSTANCE_NAMES: json.dumps(names)} if config.devices else {}),
        **extra,
    }
    triton_instances = instance_count + (dispatchers if backend != "python" and not config.devices else 0)
    proto = model_config_proto(model_name, inputs, outputs, config, instance_count=triton_instances, backend=backend,
                               parameters=served, instance_groups=groups, warmups=warmups)
    return to_pbtxt(proto)


def device_groups(model_name: str, devices: Sequence[Optional[Device]]) -> Tuple[List[Tuple[str, int]], List[str]]:
    """Triton's instance groups for instances placed on `devices` (one entry per instance, in
    worker order): one group per device named after it, with its count; and each instance's
    name as Triton gives it (``<group>_<k>``, k counted within the group), in worker order."""
    counts: Dict[str, int] = {}
    names = []
    for device in devices:
        group = f"{model_name}_{device_label(device)}"
        names.append(f"{group}_{counts.get(group, 0)}")
        counts[group] = counts.get(group, 0) + 1
    return list(counts.items()), names


def device_label(device: Optional[Device]) -> str:
    """``gpu<n>`` for a CUDA number, the UUID (``GPU-...``, ``MIG-...``) with anything but letters,
    digits and ``-`` made ``-`` otherwise."""
    if isinstance(device, int):
        return f"gpu{device}"
    return re.sub(r"[^A-Za-z0-9-]", "-", str(device))
