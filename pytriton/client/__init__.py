"""Clients of models served by Triton: the first step of a request.

``ModelClient`` (synchronous), ``FuturesModelClient`` (``concurrent.futures``) and
``AsyncioModelClient`` (``asyncio``) talk HTTP or gRPC through cores that wrap ``tritonclient``
(``pytriton.client.core`` and its asyncio twin ``core_aio``), sharing argument checks, codec,
readiness logic and error translation. Nothing here
imports the server side of the library, so the clients work where only they are installed.
"""

from pytriton.client.asyncio_client import AsyncioModelClient
from pytriton.client.client import ModelClient
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
from pytriton.client.futures import FuturesModelClient
from pytriton.client.model_config import ClientModelConfig, TensorSpec

__all__ = [
    "AsyncioModelClient",
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
