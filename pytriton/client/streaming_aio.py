"""The asyncio streaming client of decoupled models.

The first step of a streamed request, for code that runs in an event loop.
:class:`AsyncioDecoupledModelClient` is :class:`~pytriton.client.streaming.DecoupledModelClient`
with ``async for``: the same arguments and readiness wait
(:class:`~pytriton.client.asyncio_client.AsyncioModelClientBase`), the same input mapping and
batch axis (``pytriton.client.codec``), the same errors, over
:meth:`AsyncTritonCore.open_stream <pytriton.client.core_aio.AsyncTritonCore.open_stream>`.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any, AsyncGenerator, Dict

import numpy as np

from pytriton.client._args import mapping_arg, with_sequence
from pytriton.client.asyncio_client import AsyncioModelClientBase
from pytriton.client.codec import batch_request, sample_request, sample_response
from pytriton.client.core_stream_aio import AsyncResponseStream
from pytriton.client.infer_calls import InferCall, InferCalls
from pytriton.client.lost import watched
from pytriton.client.model_config import ClientModelConfig

#: What the streaming calls return: the outputs of each response, in arrival order.
AsyncResponses = AsyncGenerator[Dict[str, np.ndarray], None]


def _keep_batch(config: ClientModelConfig, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return outputs


class AsyncioDecoupledModelClient(AsyncioModelClientBase, InferCalls["AsyncResponses"]):
    """Asyncio client of one decoupled model, over gRPC or HTTP: responses as an async iterator.

    Takes the same arguments as :class:`~pytriton.client.streaming.DecoupledModelClient`.
    ``infer_sample`` and ``infer_batch`` are plain methods returning async generators: the
    request is sent on the first ``__anext__`` (the configuration is read then, if needed).
    Many streams may run at once, from tasks of one event loop.

    Leaving an ``async for`` early cancels the request once the generator is closed: at once
    with ``await responses.aclose()`` (or ``contextlib.aclosing``), else when the event loop
    finalizes the dropped generator, on its next turn. ``close()`` cancels every open stream.

    Example:
        >>> async with AsyncioDecoupledModelClient("grpc://localhost", "Tokens") as client:  # doctest: +SKIP
        ...     async for partial in client.infer_sample(np.array([b"hello"], dtype=object)):
        ...         print(partial["token"])
    """

    streaming = True

    _open: weakref.WeakSet[AsyncResponseStream] | None = None

    def _request(self, call: InferCall) -> AsyncResponses:
        parameters = with_sequence(mapping_arg("parameters", call.parameters), call.sequence)
        build = sample_request if call.sample else batch_request
        convert = sample_response if call.sample else _keep_batch
        return self._responses(lambda config: build(config, call.inputs, call.named_inputs), convert, parameters,
                               call.headers, call.priority)

    async def close(self) -> None:
        """Cancel the open streams and close the connections. Idempotent."""
        for stream in list(self._open or ()):
            stream.cancel()
        await super().close()

    def _responses(
        self,
        build: Callable[[ClientModelConfig], dict[str, np.ndarray]],
        convert: Callable[[ClientModelConfig, dict[str, np.ndarray]], dict[str, np.ndarray]],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        priority: int | None = None,
    ) -> AsyncResponses:
        # Checked in the caller; the rest needs the configuration, so it waits for the first step.
        self._check_open()
        mapping_arg("parameters", parameters)
        mapping_arg("headers", headers)
        return self._stream(build, convert, parameters, headers, priority)

    async def _stream(
        self,
        build: Callable[[ClientModelConfig], dict[str, np.ndarray]],
        convert: Callable[[ClientModelConfig, dict[str, np.ndarray]], dict[str, np.ndarray]],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        priority: int | None = None,
    ) -> AsyncResponses:
        config = await self._initialized_config()
        request_id = self._request_ids()
        request = self._args.request(build(config), parameters, headers, request_id, priority=priority, config=config)
        stream = await self._core.open_stream(request, config)
        if self._open is None:
            self._open = weakref.WeakSet()
        self._open.add(stream)
        look = functools.partial(self._lookout.check_async, request_id, self._read_config)
        try:
            while True:
                next_response = stream.next_response(self._args.inference_timeout_s)
                outputs = await watched(next_response, look, self._args.inference_timeout_s)
                if outputs is None:
                    return
                yield convert(config, outputs)
        finally:
            stream.cancel()  # a no-op after the final response; cancels the request otherwise
