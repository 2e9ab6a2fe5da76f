"""Clients of models served by Triton: the first step of a request.

``ModelClient`` (synchronous) and ``FuturesModelClient`` (``concurrent.futures``) talk HTTP or
gRPC through one core (``pytriton.client.core``) that wraps ``tritonclient``. Nothing here
imports the server side of the library, so the clients work where only they are installed.
"""

from pytriton.client.client import FuturesModelClient, ModelClient
from pytriton.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientInvalidUrlError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from pytriton.client.model_config import ClientModelConfig, TensorSpec

__all__ = [
    "ClientModelConfig",
    "FuturesModelClient",
    "ModelClient",
    "PyTritonClientClosedError",
    "PyTritonClientError",
    "PyTritonClientInferenceServerError",
    "PyTritonClientInvalidUrlError",
    "PyTritonClientModelDoesntSupportBatchingError",
    "PyTritonClientModelUnavailableError",
    "PyTritonClientQueueFullError",
    "PyTritonClientTimeoutError",
    "PyTritonClientValueError",
    "TensorSpec",
]
