# Generated from pytriton/client/core_aio.py by build_backend/unasync.py: edit that file, not this one.
"""The client step of a request: one small interface over ``tritonclient``, for both protocols.

Every model client talks to the server only through a core, :class:`TritonCore`. The
asyncio core and the blocking one are written once: ``build_backend/unasync.py`` writes the
blocking module from the asyncio one, renaming only. A core makes each call through the
``tritonclient`` client of the URL's protocol, inside
:func:`~pytriton.client._errors.translate_errors` (a plain context manager, so it wraps an
awaited call as well), with the access token's headers, and bounds it by the call's own time
limit. What the two sides do differently lives in the connection of each (here
:class:`~pytriton.client.io_sync.Connection`):

* a gRPC call carries the limit as its deadline (``client_timeout``), so the server drops the
  call too;
* an asyncio call is bounded by ``asyncio.wait_for`` as well;
* the blocking ``tritonclient.http`` client fixes its socket timeouts when it is built, so a
  blocking HTTP call that needs another bound runs on a short-lived client built with it;
* a request to a relayed model (`pytriton.client.lost`) is watched for a lost instance between
  slices of its wait: an asyncio one with `pytriton.client.lost.watched`, a blocking one on
  connections it can wait on in slices (`pytriton.client.watched`).

Streams of decoupled models go through the core's stream opener, which reads them with the I/O
of its side.

The ``tritonclient`` client is created on the first call: an asyncio one inside the running
event loop, since ``aiohttp`` sessions and ``grpc.aio`` channels belong to the loop that creates
them. An asyncio core serves many concurrent tasks of its loop (``aiohttp`` pools connections, a
gRPC channel multiplexes calls); a blocking core is not thread safe (neither are
``tritonclient``'s blocking clients): one per thread.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping, TypeVar

import numpy as np
import tritonclient.grpc
import tritonclient.http

from pytriton.access_token import auth_headers
from pytriton.client import _errors as errors
from pytriton.client._args import ModelLoad, with_auth
from pytriton.client.codec import from_infer_result, infer_call, with_deadline
from pytriton.client.core_request import CoreRequest
from pytriton.client.core_stream import ResponseStream, StreamOpener
from pytriton.client.io_sync import Call, Connection, Look
from pytriton.client.model_config import ClientModelConfig, parse_model_config
from pytriton.client.readiness import presence_from_error, ready_names
from pytriton.client.url import TritonUrl

_T = TypeVar("_T")


class TritonCore:
    """Readiness, model configuration, model control, shared memory and inference for one server,
    awaited, errors translated.

    Every method takes ``timeout_s``, the longest the call may take (None: the core's default);
    on expiry it raises :class:`~pytriton.client.exceptions.PyTritonClientTimeoutError`.
    """

    def __init__(self, url: TritonUrl, default_timeout_s: float, access_token: str | None = None,
                 connection: Connection | None = None) -> None:
        """Prepare a core; nothing is created before the first call.

        Args:
            url: the server's address; its scheme picks the protocol.
            default_timeout_s: the time limit of calls that give none (the inference timeout).
            access_token: sent with every call, for servers that restrict their APIs.
            connection: the ``tritonclient`` client to call through; None for one of the core's own.
        """
        self.url = url
        self.default_timeout_s = default_timeout_s
        self._auth = auth_headers(url.scheme, access_token)
        self._grpc = url.scheme == "grpc"
        self._connection = connection if connection is not None else Connection(url, default_timeout_s)
        self._streams = StreamOpener(url, self._auth, self._connection.client)

    def is_server_live(self, timeout_s: float | None = None) -> bool:
        """Whether the server process answers its liveness endpoint."""
        return bool(self._call(errors.READY_ACTION, timeout_s, lambda client, deadline: client.is_server_live(
            headers=self._headers(), **deadline)))

    def is_server_ready(self, timeout_s: float | None = None) -> bool:
        """Whether the server accepts inference (with Triton's strict readiness: all models ready)."""
        return bool(self._call(errors.READY_ACTION, timeout_s, lambda client, deadline: client.is_server_ready(
            headers=self._headers(), **deadline)))

    def is_model_ready(self, model_name: str, model_version: str = "", timeout_s: float | None = None) -> bool:
        """Whether the model (and version, ``""`` for the server's choice) is loaded and ready."""
        return bool(self._call(errors.READY_ACTION, timeout_s, lambda client, deadline: client.is_model_ready(
            model_name, model_version, headers=self._headers(), **deadline)))

    def model_presence(self, model_name: str, timeout_s: float | None = None) -> bool | None:
        """Whether the server knows the model at all (see :func:`presence_from_error`).

        True: it has the model, loaded or not (in its repository, loading, or ready); False: it
        has no model of that name; None: it did not say (unreachable, or the metadata API is
        restricted and the client has no token).
        """
        try:
            self._connection.call(self._timeout(timeout_s), lambda client, deadline: client.get_model_metadata(
                model_name, headers=self._headers(), **deadline))
        except Exception as exc:  # noqa: BLE001 - any failure is read for what it says, else "unknown"
            return presence_from_error(exc)
        return True

    def served_models(self, timeout_s: float | None = None) -> list[str] | None:
        """The names of the models the server has ready (None when it does not say, e.g. the
        repository API is restricted and the client has no token)."""
        extra = {"as_json": True} if self._grpc else {}
        try:
            index = self._connection.call(self._timeout(timeout_s), lambda client, deadline: (
                client.get_model_repository_index(headers=self._headers(), **extra, **deadline)))
        except Exception:  # noqa: BLE001 - only a hint for an error message
            return None
        return ready_names(index)

    def get_model_config(
        self, model_name: str, model_version: str = "", timeout_s: float | None = None
    ) -> ClientModelConfig:
        """The model's configuration as the server has it."""
        extra = {"as_json": True} if self._grpc else {}
        raw = self._call(errors.CONFIG_ACTION, timeout_s, lambda client, deadline: client.get_model_config(
            model_name, model_version, headers=self._headers(), **extra, **deadline))
        return parse_model_config(raw)

    def load_model(self, model_name: str, load: ModelLoad, timeout_s: float | None = None) -> None:
        """Ask the server to load (or reload) a model; returns once the server has done it.

        Args:
            model_name: the model to load from the server's model repository.
            load: a configuration (JSON) to use instead of the repository's, and the files of a
                model folder to load from instead (`pytriton.client._args.load_args`).
            timeout_s: the longest to wait for the load.
        """
        self._call(errors.LOAD_ACTION, timeout_s, lambda client, deadline: client.load_model(
            model_name, headers=self._headers(), config=load.config, files=load.files, **deadline))

    def unload_model(self, model_name: str, timeout_s: float | None = None) -> None:
        """Ask the server to unload a model (Triton finishes the unloading in the background)."""
        self._call(errors.UNLOAD_ACTION, timeout_s, lambda client, deadline: client.unload_model(
            model_name, headers=self._headers(), **deadline))

    def register_region(self, name: str, key: str, byte_size: int, timeout_s: float | None = None) -> None:
        """Register a system shared-memory region (the shared-memory API: restricted by pytriton's servers).

        Args:
            name: the region's name in the server, which requests name it by.
            key: the segment's key (``/`` and its /dev/shm name), which the server opens.
            byte_size: the segment's size.
            timeout_s: the longest the call may take.
        """
        self._call(errors.SHM_ACTION, timeout_s, lambda client, deadline: client.register_system_shared_memory(
            name, key, byte_size, headers=self._headers(), **deadline))

    def unregister_region(self, name: str, timeout_s: float | None = None) -> None:
        """Unregister a system shared-memory region (an unknown name is no error)."""
        self._call(errors.SHM_ACTION, timeout_s, lambda client, deadline: (
            client.unregister_system_shared_memory(name, headers=self._headers(), **deadline)))

    def infer(self, request: CoreRequest, look: Look | None = None) -> dict[str, np.ndarray]:
        """Run one inference request.

        Args:
            request: the model, inputs and options.
            look: for a relayed model, called between slices of the wait; it raises to end the
                request (`pytriton.client.lost`).

        Returns:
            Output name to array; BYTES outputs are object arrays of ``bytes``.
        """
        protocol = tritonclient.grpc if self._grpc else tritonclient.http
        limit_s = self._timeout(request.timeout_s)
        # tritonclient adds its own headers into the dict it is given: never hand it the user's.
        sent = dataclasses.replace(request, parameters=with_deadline(request.parameters, limit_s, time.time()),
                                   headers=self._headers(request.headers), timeout_s=limit_s)

        def call(client: Any, deadline: dict[str, Any]) -> dict[str, np.ndarray]:
            args, keywords = infer_call(protocol, sent)
            return from_infer_result(client.infer(*args, **keywords, **deadline), request.shared)

        if look is None:
            return self._call(errors.INFER_ACTION, limit_s, call)
        with errors.translate_errors(errors.INFER_ACTION, str(self.url), limit_s):
            return from_infer_result(self._connection.infer_watched(sent, look), request.shared)

    def open_stream(self, request: CoreRequest, config: ClientModelConfig) -> ResponseStream:
        """Send one request to a decoupled model and return the stream of its responses.

        Args:
            request: the model, inputs and options (its ``timeout_s``: the longest to wait for
                the request to be taken); a sequence travels in its parameters.
            config: the model's configuration (HTTP needs its dtypes and dims).

        Raises:
            PyTritonClientValueError: an input or parameter the protocol cannot carry.
            PyTritonClientError: the server refused the request (translated as for :meth:`infer`).
        """
        return self._streams.open(dataclasses.replace(
            request,
            parameters=dict(request.parameters) if request.parameters else None,
            timeout_s=self._timeout(request.timeout_s),
        ), config)

    def close(self) -> None:
        """Close the connections (and a stream still open on them); the core is unusable afterwards."""
        self._connection.close()
        self._streams.close()

    def _timeout(self, timeout_s: float | None) -> float:
        return self.default_timeout_s if timeout_s is None else timeout_s

    def _headers(self, headers: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """The headers of one call: the user's plus the token's, in a fresh dict.

        Over HTTP, answers are asked for uncompressed unless the user's headers say otherwise:
        aiohttp asks for gzip by default, and Triton then compresses every answer on its side
        and the client inflates it (measured: 1 MiB answers 5.5 times slower, 16 MiB twice).
        """
        merged = with_auth(self._auth, headers)
        if self._grpc:
            return merged
        merged = merged if merged is not None else {}
        if not any(name.lower() == "accept-encoding" for name in merged):
            merged["Accept-Encoding"] = "identity"
        return merged

    def _call(self, action: str, timeout_s: float | None, call: Call[_T]) -> _T:
        timeout_s = self._timeout(timeout_s)
        with errors.translate_errors(action, str(self.url), timeout_s):
            return self._connection.call(timeout_s, call)


def create_core(url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> TritonCore:
    """The core for `url` (one class serves both protocols)."""
    return TritonCore(url, default_timeout_s, access_token)
