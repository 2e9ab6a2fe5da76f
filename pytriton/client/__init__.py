"""Clients of models served by Triton: the first step of a request.

``ModelClient`` (synchronous), ``FuturesModelClient`` (``concurrent.futures``) and
``AsyncioModelClient`` (``asyncio``) talk HTTP or gRPC through cores that wrap ``tritonclient``
(``pytriton.client.core_aio``, and ``pytriton.client.core`` generated from it), sharing argument
checks, codec, readiness logic and error translation. ``DecoupledModelClient`` and
``AsyncioDecoupledModelClient`` stream the responses of decoupled models through the same cores
(``core_stream``, ``core_stream_aio``; HTTP via Triton's generate extension, ``generate``).
Nothing here imports the server side of the library, so the clients work where only they are
installed.
"""

from pytriton.client.asyncio_client import AsyncioModelClient
from pytriton.client.client import ModelClient
from pytriton.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientDecoupledMismatchError,
    PyTritonClientError,
    PyTritonClientInferenceServerError,
    PyTritonClientInvalidUrlError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientQueueFullError,
    PyTritonClientRequestLostError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from pytriton.client.futures import FuturesModelClient
from pytriton.client.model_config import ClientModelConfig, TensorSpec
from pytriton.client.streaming import DecoupledModelClient
from pytriton.client.streaming_aio import AsyncioDecoupledModelClient

__all__ = [
    "AsyncioDecoupledModelClient",
    "AsyncioModelClient",
    "ClientModelConfig",
    "DecoupledModelClient",
    "FuturesModelClient",
    "ModelClient",
    "PyTritonClientClosedError",
    "PyTritonClientDecoupledMismatchError",
    "PyTritonClientError",
    "PyTritonClientInferenceServerError",
    "PyTritonClientInvalidUrlError",
    "PyTritonClientModelDoesntSupportBatchingError",
    "PyTritonClientModelUnavailableError",
    "PyTritonClientQueueFullError",
    "PyTritonClientRequestLostError",
    "PyTritonClientTimeoutError",
    "PyTritonClientValueError",
    "TensorSpec",
]
