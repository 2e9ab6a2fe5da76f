"""One small synchronous interface over ``tritonclient.http`` and ``tritonclient.grpc``.

The client step of a request: every client flavour (``ModelClient``, the per-thread clients of
``FuturesModelClient``) talks to the server only through a :class:`TritonCore`. The base class
owns the error translation (each public method runs its protocol call inside
:func:`~pytriton.client._errors.translate_errors`), so the two protocol classes only say how to
make the calls, and a time limit can be put on every single call:

* gRPC takes a deadline per call (``client_timeout``);
* ``tritonclient.http`` fixes its socket timeouts when the client is built, so a call that needs
  a different bound runs on a short-lived client built with it.

Decoupled models' streams are opened here too (:meth:`TritonCore.open_stream`) and read through
``pytriton.client.core_stream``: over gRPC on this core's ``tritonclient`` client, over HTTP on
a connection of their own (``tritonclient.http`` cannot stream).

A ``TritonCore`` is not thread safe (neither are ``tritonclient`` clients): one per thread.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any, Callable

import numpy as np
import tritonclient.grpc
import tritonclient.http

from pytriton.access_token import auth_headers
from pytriton.client._args import ModelLoad, with_auth
from pytriton.client._errors import (
    CONFIG_ACTION,
    INFER_ACTION,
    LOAD_ACTION,
    READY_ACTION,
    SHM_ACTION,
    UNLOAD_ACTION,
    translate_errors,
)
from pytriton.client.codec import from_infer_result, infer_call, with_deadline
from pytriton.client.core_request import CoreRequest
from pytriton.client.core_stream import GrpcResponseStream, HttpResponseStream, ResponseStream
from pytriton.client.generate import stream_post
from pytriton.client.model_config import ClientModelConfig, parse_model_config
from pytriton.client.readiness import presence_from_error, ready_names
from pytriton.client.url import TritonUrl
from pytriton.client.watched import WatchedHttp, grpc_infer_watched

_LOGGER = logging.getLogger(__name__)

class TritonCore(abc.ABC):
    """Readiness, model configuration and inference for one server, errors already translated.

    Every method takes ``timeout_s``, the longest the call may take; on expiry it raises
    :class:`~pytriton.client.exceptions.PyTritonClientTimeoutError`.
    """

    def __init__(self, url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> None:
        """Prepare a core; no connection is made until the first call.

        Args:
            url: the server's address.
            default_timeout_s: the time limit of calls that give none (the inference timeout).
            access_token: sent with every call, for servers that restrict their APIs.
        """
        self.url = url
        self.default_timeout_s = default_timeout_s
        self._auth = auth_headers(url.scheme, access_token)

    def _headers(self, headers: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """The headers of one call: the user's plus the token's, in a fresh dict."""
        return with_auth(self._auth, headers)

    def is_server_live(self, timeout_s: float | None = None) -> bool:
        """Whether the server process answers its liveness endpoint."""
        timeout_s = self._timeout(timeout_s)
        with translate_errors(READY_ACTION, str(self.url), timeout_s):
            return bool(self._is_server_live(timeout_s))

    def is_server_ready(self, timeout_s: float | None = None) -> bool:
        """Whether the server accepts inference (with Triton's strict readiness: all models ready)."""
        timeout_s = self._timeout(timeout_s)
        with translate_errors(READY_ACTION, str(self.url), timeout_s):
            return bool(self._is_server_ready(timeout_s))

    def is_model_ready(self, model_name: str, model_version: str = "", timeout_s: float | None = None) -> bool:
        """Whether the model (and version, ``""`` for the server's choice) is loaded and ready."""
        timeout_s = self._timeout(timeout_s)
        with translate_errors(READY_ACTION, str(self.url), timeout_s):
            return bool(self._is_model_ready(model_name, model_version, timeout_s))

    def model_presence(self, model_name: str, timeout_s: float | None = None) -> bool | None:
        """Whether the server knows the model at all (see :func:`presence_from_error`).

        True: it has the model, loaded or not (in its repository, loading, or ready); False: it
        has no model of that name; None: it did not say (unreachable, or the metadata API is
        restricted and the client has no token).
        """
        try:
            self._get_model_metadata(model_name, self._timeout(timeout_s))
        except Exception as exc:  # noqa: BLE001 - any failure is read for what it says, else "unknown"
            return presence_from_error(exc)
        return True

    def served_models(self, timeout_s: float | None = None) -> list[str] | None:
        """The names of the models the server has ready (None when it does not say, e.g. the
        repository API is restricted and the client has no token)."""
        try:
            index = self._repository_index(self._timeout(timeout_s))
        except Exception:  # noqa: BLE001 - only a hint for an error message
            return None
        return ready_names(index)

    def get_model_config(
        self, model_name: str, model_version: str = "", timeout_s: float | None = None
    ) -> ClientModelConfig:
        """The model's configuration as the server has it."""
        timeout_s = self._timeout(timeout_s)
        with translate_errors(CONFIG_ACTION, str(self.url), timeout_s):
            raw = self._get_model_config(model_name, model_version, timeout_s)
        return parse_model_config(raw)

    def load_model(self, model_name: str, load: ModelLoad, timeout_s: float | None = None) -> None:
        """Ask the server to load (or reload) a model; returns once the server has done it.

        Args:
            model_name: the model to load from the server's model repository.
            load: a configuration (JSON) to use instead of the repository's, and the files of a
                model folder to load from instead (`pytriton.client._args.load_args`).
            timeout_s: the longest to wait for the load.
        """
        timeout_s = self._timeout(timeout_s)
        with translate_errors(LOAD_ACTION, str(self.url), timeout_s):
            self._load_model(model_name, load, timeout_s)

    def unload_model(self, model_name: str, timeout_s: float | None = None) -> None:
        """Ask the server to unload a model (Triton finishes the unloading in the background)."""
        timeout_s = self._timeout(timeout_s)
        with translate_errors(UNLOAD_ACTION, str(self.url), timeout_s):
            self._unload_model(model_name, timeout_s)

    def infer(self, request: CoreRequest, look: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """Run one inference request.

        Args:
            request: the model, inputs and options.
            look: for a relayed model, called between slices of the wait; it raises to end the
                request (`pytriton.client.lost`).

        Returns:
            Output name to array; BYTES outputs are object arrays of ``bytes``.
        """
        timeout_s = self._timeout(request.timeout_s)
        with translate_errors(INFER_ACTION, str(self.url), timeout_s):
            # tritonclient adds its own headers into the dict it is given: never hand it the user's.
            sent = dataclasses.replace(
                request,
                parameters=with_deadline(request.parameters, timeout_s, time.time()),
                headers=self._headers(request.headers),
                timeout_s=timeout_s,
            )
            result = self._infer(sent) if look is None else self._infer_watched(sent, look)
            return from_infer_result(result, request.shared)

    def register_region(self, name: str, key: str, byte_size: int, timeout_s: float | None = None) -> None:
        """Register a system shared-memory region (the shared-memory API: restricted by pytriton's servers).

        Args:
            name: the region's name in the server, which requests name it by.
            key: the segment's key (``/`` and its /dev/shm name), which the server opens.
            byte_size: the segment's size.
            timeout_s: the longest the call may take.
        """
        timeout_s = self._timeout(timeout_s)
        with translate_errors(SHM_ACTION, str(self.url), timeout_s):
            self._register_region(name, key, byte_size, timeout_s)

    def unregister_region(self, name: str, timeout_s: float | None = None) -> None:
        """Unregister a system shared-memory region (an unknown name is no error)."""
        timeout_s = self._timeout(timeout_s)
        with translate_errors(SHM_ACTION, str(self.url), timeout_s):
            self._unregister_region(name, timeout_s)

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
        return self._open_stream(dataclasses.replace(
            request,
            parameters=dict(request.parameters) if request.parameters else None,
            headers=self._headers(request.headers),
            timeout_s=self._timeout(request.timeout_s),
        ), config)

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connections; the core is unusable afterwards."""

    def _timeout(self, timeout_s: float | None) -> float:
        return self.default_timeout_s if timeout_s is None else timeout_s

    @abc.abstractmethod
    def _is_server_live(self, timeout_s: float) -> Any: ...

    @abc.abstractmethod
    def _is_server_ready(self, timeout_s: float) -> Any: ...

    @abc.abstractmethod
    def _is_model_ready(self, model_name: str, model_version: str, timeout_s: float) -> Any: ...

    @abc.abstractmethod
    def _get_model_config(self, model_name: str, model_version: str, timeout_s: float) -> Any: ...

    @abc.abstractmethod
    def _get_model_metadata(self, model_name: str, timeout_s: float) -> Any: ...

    @abc.abstractmethod
    def _repository_index(self, timeout_s: float) -> Any: ...

    # Not abstract: a core that only serves requests (a test double) need not manage models.
    def _load_model(self, model_name: str, load: ModelLoad, timeout_s: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load models")

    def _unload_model(self, model_name: str, timeout_s: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot unload models")

    def _register_region(self, name: str, key: str, byte_size: int, timeout_s: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot register shared memory")

    def _unregister_region(self, name: str, timeout_s: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot unregister shared memory")

    # The three below take a request whose headers, parameters and timeout are the ones to send.
    @abc.abstractmethod
    def _infer(self, request: CoreRequest) -> Any: ...

    @abc.abstractmethod
    def _infer_watched(self, request: CoreRequest, look: Callable[[], None]) -> Any: ...

    @abc.abstractmethod
    def _open_stream(self, request: CoreRequest, config: ClientModelConfig) -> ResponseStream: ...


class HttpCore(TritonCore):
    """:class:`TritonCore` over ``tritonclient.http``."""

    def __init__(self, url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> None:
        """See :class:`TritonCore`; the long-lived client uses ``default_timeout_s`` for its sockets."""
        super().__init__(url, default_timeout_s, access_token)
        self._client = self._new_client(default_timeout_s)
        self._watched: WatchedHttp | None = None

    def _new_client(self, timeout_s: float) -> tritonclient.http.InferenceServerClient:
        return tritonclient.http.InferenceServerClient(
            self.url.address, connection_timeout=timeout_s, network_timeout=timeout_s
        )

    @contextlib.contextmanager
    def _client_for(self, timeout_s: float) -> Iterator[tritonclient.http.InferenceServerClient]:
        if timeout_s == self.default_timeout_s:
            yield self._client
            return
        client = self._new_client(timeout_s)
        try:
            yield client
        finally:
            client.close()

    def _is_server_live(self, timeout_s: float) -> Any:
        with self._client_for(timeout_s) as client:
            return client.is_server_live(headers=self._headers())

    def _is_server_ready(self, timeout_s: float) -> Any:
        with self._client_for(timeout_s) as client:
            return client.is_server_ready(headers=self._headers())

    def _is_model_ready(self, model_name: str, model_version: str, timeout_s: float) -> Any:
        with self._client_for(timeout_s) as client:
            return client.is_model_ready(model_name, model_version, headers=self._headers())

    def _get_model_config(self, model_name: str, model_version: str, timeout_s: float) -> Any:
        with self._client_for(timeout_s) as client:
            return client.get_model_config(model_name, model_version, headers=self._headers())

    def _get_model_metadata(self, model_name: str, timeout_s: float) -> Any:
        with self._client_for(timeout_s) as client:
            return client.get_model_metadata(model_name, headers=self._headers())

    def _repository_index(self, timeout_s: float) -> Any:
        with self._client_for(timeout_s) as client:
            return client.get_model_repository_index(headers=self._headers())

    def _load_model(self, model_name: str, load: ModelLoad, timeout_s: float) -> None:
        with self._client_for(timeout_s) as client:
            client.load_model(model_name, headers=self._headers(), config=load.config, files=load.files)

    def _unload_model(self, model_name: str, timeout_s: float) -> None:
        with self._client_for(timeout_s) as client:
            client.unload_model(model_name, headers=self._headers())

    def _register_region(self, name: str, key: str, byte_size: int, timeout_s: float) -> None:
        with self._client_for(timeout_s) as client:
            client.register_system_shared_memory(name, key, byte_size, headers=self._headers())

    def _unregister_region(self, name: str, timeout_s: float) -> None:
        with self._client_for(timeout_s) as client:
            client.unregister_system_shared_memory(name, headers=self._headers())

    def _infer(self, request: CoreRequest) -> Any:
        assert request.timeout_s is not None
        args, keywords = infer_call(tritonclient.http, request)
        with self._client_for(request.timeout_s) as client:
            return client.infer(*args, **keywords)

    def _infer_watched(self, request: CoreRequest, look: Callable[[], None]) -> Any:
        if self._watched is None:
            self._watched = WatchedHttp(self.url)
        return self._watched.infer(request, look)

    def _open_stream(self, request: CoreRequest, config: ClientModelConfig) -> ResponseStream:
        assert request.timeout_s is not None
        post = stream_post(request, config, str(self.url))
        return HttpResponseStream(self.url, request.model_name, post, headers=request.headers,
                                  timeout_s=request.timeout_s)

    def close(self) -> None:
        """Close the long-lived HTTP connection pool."""
        self._client.close()
        if self._watched is not None:
            self._watched.close()


class GrpcCore(TritonCore):
    """:class:`TritonCore` over ``tritonclient.grpc``; every call carries its own deadline."""

    def __init__(self, url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> None:
        """See :class:`TritonCore`; the channel connects on the first call."""
        super().__init__(url, default_timeout_s, access_token)
        self._client = tritonclient.grpc.InferenceServerClient(self.url.address)

    def _is_server_live(self, timeout_s: float) -> Any:
        return self._client.is_server_live(headers=self._headers(), client_timeout=timeout_s)

    def _is_server_ready(self, timeout_s: float) -> Any:
        return self._client.is_server_ready(headers=self._headers(), client_timeout=timeout_s)

    def _is_model_ready(self, model_name: str, model_version: str, timeout_s: float) -> Any:
        return self._client.is_model_ready(model_name, model_version, headers=self._headers(), client_timeout=timeout_s)

    def _get_model_config(self, model_name: str, model_version: str, timeout_s: float) -> Any:
        return self._client.get_model_config(
            model_name, model_version, headers=self._headers(), as_json=True, client_timeout=timeout_s
        )

    def _get_model_metadata(self, model_name: str, timeout_s: float) -> Any:
        return self._client.get_model_metadata(model_name, headers=self._headers(), client_timeout=timeout_s)

    def _repository_index(self, timeout_s: float) -> Any:
        return self._client.get_model_repository_index(headers=self._headers(), as_json=True,
                                                       client_timeout=timeout_s)

    def _load_model(self, model_name: str, load: ModelLoad, timeout_s: float) -> None:
        self._client.load_model(model_name, headers=self._headers(), config=load.config, files=load.files,
                                client_timeout=timeout_s)

    def _unload_model(self, model_name: str, timeout_s: float) -> None:
        self._client.unload_model(model_name, headers=self._headers(), client_timeout=timeout_s)

    def _register_region(self, name: str, key: str, byte_size: int, timeout_s: float) -> None:
        self._client.register_system_shared_memory(name, key, byte_size, headers=self._headers(),
                                                   client_timeout=timeout_s)

    def _unregister_region(self, name: str, timeout_s: float) -> None:
        self._client.unregister_system_shared_memory(name, headers=self._headers(), client_timeout=timeout_s)

    def _infer(self, request: CoreRequest) -> Any:
        args, keywords = infer_call(tritonclient.grpc, request)
        return self._client.infer(*args, client_timeout=request.timeout_s, **keywords)

    def _infer_watched(self, request: CoreRequest, look: Callable[[], None]) -> Any:
        return grpc_infer_watched(self._client, request, look)

    def _open_stream(self, request: CoreRequest, config: ClientModelConfig) -> ResponseStream:
        return GrpcResponseStream(self._client, self.url, request)

    def close(self) -> None:
        """Close the gRPC channel (and a stream still open on it)."""
        self._client.close()


def create_core(url: TritonUrl, default_timeout_s: float, access_token: str | None = None) -> TritonCore:
    """The core for the URL's protocol."""
    core_class = GrpcCore if url.scheme == "grpc" else HttpCore
    return core_class(url, default_timeout_s, access_token)
