"""The ports a tritonserver will listen on, and whether each is free before it starts.

Both a start (`pytriton.launch`) and ``pytriton check`` ask before tritonserver runs, so that a
busy port is one clear error naming the field, rather than Triton's exit after its models load.
"""

from __future__ import annotations

import errno
import socket
from typing import List, Optional, Tuple

from pytriton.server.config import TritonConfig


def enabled_endpoints(config: TritonConfig) -> List[Tuple[str, Optional[str], int]]:
    """``(field, address, port)`` of each endpoint a server with `config` opens, metrics last
    (it opens last). Vertex AI and SageMaker bind every interface, whatever the addresses say."""
    wanted: List[Tuple[str, Optional[str], int]] = []
    if config.allow_http is not False:
        wanted.append(("http_port", config.http_address, config.effective_http_port))
    if config.allow_grpc is not False:
        wanted.append(("grpc_port", config.grpc_address, config.effective_grpc_port))
    if config.allow_vertex_ai:
        wanted.append(("vertex_ai_port", None, config.effective_vertex_ai_port))
    if config.allow_sagemaker:
        wanted.append(("sagemaker_port", None, config.effective_sagemaker_port))
    if config.allow_metrics is not False:
        wanted.append(("metrics_port", config.metrics_address, config.effective_metrics_port))
    return wanted


def openai_endpoint(config: TritonConfig) -> Optional[Tuple[str, Optional[str], int]]:
    """``("openai_port", address, port)`` of pytriton's OpenAI-compatible API, None when it is off.

    It listens on Triton's `http_address`; with ``triton_on_localhost`` (Triton's own ports kept on
    127.0.0.1, the front the public door) on every interface."""
    if config.openai_port is None:
        return None
    return "openai_port", None if config.triton_on_localhost else config.http_address, config.openai_port


def listening_ports(config: TritonConfig) -> List[Tuple[str, Optional[str], int]]:
    """`enabled_endpoints` and the OpenAI-compatible API's: every port a start opens (what a
    start and ``pytriton check`` probe)."""
    front = openai_endpoint(config)
    return enabled_endpoints(config) + ([front] if front is not None else [])


def probe_port(address: Optional[str], port: int) -> Optional[int]:
    """The errno of binding `port` the way tritonserver will, or None when it is free."""
    family = socket.AF_INET6 if address and ":" in address else socket.AF_INET
    with socket.socket(family) as probe:
        # Like the server itself, ignore connections of a previous server in TIME_WAIT.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address or "0.0.0.0", port))
        except OSError as exc:
            return exc.errno or errno.EINVAL
    return None
