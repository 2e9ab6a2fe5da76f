"""Requests whose tensors travel through shared memory, for a client on the server's host.

The client step between a one-response client and its core: :class:`AsyncShmTransport` takes
a request, lays its large tensors out in one of the client's regions
(`pytriton.client.shm_regions`), sends the request with those tensors named by region and
offset instead of carried in the body, and reads the outputs back from the region. A region
is registered with the server the first time it is made and serves every later request that
fits it; one that fails a request is retired (the server may still write into it) and
unregistered before the next request picks a region. Closing unregisters and unlinks them all.

When the server will not register a region (a missing access token: pytriton's servers
restrict the shared-memory API by default; or it cannot open the segment: a container with a
private /dev/shm), ``shared_memory="auto"`` sends this and every later request through the
socket, and says so in one log line; ``shared_memory=True`` raises.

The asyncio transport and the blocking one are written once: ``build_backend/unasync.py`` writes
the blocking module from the asyncio one.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from pytriton.client.core_aio import AsyncTritonCore
from pytriton.client.core_request import CoreRequest
from pytriton.client.exceptions import PyTritonClientError
from pytriton.client.io_aio import AsyncLook
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.shm_regions import Region, RegionPool, SharedTensors, ShmChoice

_TRUE_HINT = (
    "Triton's shared-memory API needs the server's access token (access_token=..., e.g. Triton.get_access_token()), "
    "and the server must see this host's /dev/shm (not a container with a private one); shared_memory='auto' "
    "sends tensors through the socket instead"
)


# Triton's refusal of an output larger than the room the request gave it.
_OUTPUT_TOO_LARGE = "to hold the results"
_TOO_LARGE_HINT = (
    "The model returned an output larger than its configuration declares, and shared memory holds only the declared "
    "size: declare the output's real shape (-1 for a dimension that varies), or use shared_memory=False"
)


class AsyncShmTransport:
    """The requests of one client, through its shared-memory regions where they fit.

    Args:
        core: the client's core, which also registers and unregisters the regions.
        choice: what ``shared_memory`` decided (`pytriton.client.shm_regions.shm_arg`).
        model_name: the model, for messages.
    """

    def __init__(self, core: AsyncTritonCore, choice: ShmChoice, model_name: str) -> None:
        self._core = core
        self.choice = choice
        self._model_name = model_name
        self._pool = RegionPool()
        self.registrations = 0
        """How many regions this client registered so far (a measure of their reuse)."""

    async def infer(
        self, request: CoreRequest, config: Optional[ClientModelConfig], look: Optional[AsyncLook]
    ) -> dict[str, np.ndarray]:
        """Run `request`, its large tensors through a region when the choice allows; see `TritonCore.infer`."""
        layout = self.choice.layout(config, request.inputs) if config is not None else None
        region = await self._region(layout.size) if layout is not None else None
        if layout is None or region is None:
            return await self._core.infer(request, look)
        shared = SharedTensors(region, layout)
        try:
            for slot in layout.inputs:
                region.write(slot, request.inputs[slot.name])
            outputs = await self._core.infer(dataclasses.replace(request, shared=shared), look)
        except PyTritonClientError as exc:
            self._pool.retire(region)
            if _OUTPUT_TOO_LARGE in str(exc):
                raise type(exc)(f"{exc}. {_TOO_LARGE_HINT}") from exc
            raise
        except BaseException:
            self._pool.retire(region)
            raise
        self._pool.give_back(region)
        return outputs

    async def close(self) -> None:
        """Unregister every region (the server may be gone: then only unlink), unlink them, drop the lease."""
        for region in self._pool.regions():
            try:
                await self._core.unregister_region(region.name)
            except PyTritonClientError:
                pass  # a server that is gone holds nothing; a live one's supervisor clears it
        self._pool.close()

    async def _region(self, nbytes: int) -> Optional[Region]:
        """A registered region of at least `nbytes` for one request; None to use the socket ("auto")."""
        region = self._pool.take(nbytes)
        for stale in self._pool.stale():  # failed requests' regions, and a free one too small for this
            try:
                await self._core.unregister_region(stale.name)
            except PyTritonClientError:
                pass
            self._pool.discard(stale)
        if region is not None:
            return region
        try:
            region = self._pool.create(nbytes)
        except OSError as exc:
            self._refused(f"no room for {nbytes} bytes in /dev/shm ({exc})", exc)
            return None
        try:
            await self._core.register_region(region.name, region.key, region.size)
        except PyTritonClientError as exc:
            self._pool.discard(region)
            self._refused(f"the server did not register the region: {exc}", exc)
            return None
        self.registrations += 1
        return region

    def _refused(self, reason: str, exc: Exception) -> None:
        """Go back to the socket ("auto", said once), or raise (True)."""
        url = str(self._core.url)
        self.choice.refuse(self._model_name, url, reason)
        if self.choice.mode is True:
            error = type(exc) if isinstance(exc, PyTritonClientError) else PyTritonClientError
            raise error(f"Model {self._model_name!r} at {url}: shared_memory=True, but {reason}. {_TRUE_HINT}") from exc
