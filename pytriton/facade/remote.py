"""The `RemoteTriton` facade: bind callables of this process to a tritonserver something else started.

Two ways to hand the server a model, chosen by the `workspace` argument:

* no workspace (the published library's way): the server shares only the host with this
  process. `bind` writes the model folder into a private folder here and, once connected,
  sends it through Triton's model-repository API (a load with the configuration and the files
  as overrides); the server rebuilds it on its side. Sockets and ``/dev/shm`` segments still
  go through the host, so the server must run on this host, as this user.
* a shared workspace: the server serves ``<workspace>/models`` with explicit model control
  (one server container per pod, NVIDIA's server image, a server shared by several
  processes). `bind` claims a model folder there (``server.workspace``) and checks through
  the server's repository index that the server sees it.

Either way: `connect` (also on entering ``with``) waits for the server and loads the bound
models; a `bind` after it loads its model at once; `serve` blocks until SIGINT/SIGTERM; `stop`
unloads this process's models and removes what it created. The server keeps running.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import pathlib
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple, Union

from pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonServerError,
)
from pytriton.facade.base import TritonBase
from pytriton.facade.binding import ModelBindings, block_until_signal
from pytriton.facade.bound import ModelDeclaration
from pytriton.facade.launch import MODEL_LOAD_TIMEOUT_S
from pytriton.facade.versions import check_can_add, prepare_load, unbind, undo_load
from pytriton.repository.override import load_override
from pytriton.server.announce import announce_remote_serving
from pytriton.server.control import ServerControl, wait_for
from pytriton.server.distribution import find_distribution, lacks_backend, proxy_import_paths, remote_backend
from pytriton.server.workspace import SharedWorkspace, Workspace, remote_server_flags

__all__ = ["RemoteTriton"]

logger = logging.getLogger("pytriton.triton")


UNLOAD_TIMEOUT_S = 60.0
_REPOSITORY_CALL_TIMEOUT_S = 10.0
_LOADED_STATES = ("READY", "LOADING", "UNLOADING")
"""Repository-index states of a model the server holds (or is still dropping)."""
_DUPLICATE_REASON = "two or more repositories"
"""Part of the index's reason for a model name found in several repositories (Triton 2.51)."""


class RemoteTriton(TritonBase):
    """Serves this process's callables through a tritonserver that something else started.

    It binds as `Triton` does (`TritonBase` documents the methods both share), bind_chat and
    bind_embeddings (`pytriton.openai.binding.OpenAIBindings`) too: they bind models that
    follow the OpenAI convention (docs/openai.md). The OpenAI-compatible API itself is served
    by the front of the process that started the server (its ``TritonConfig(openai_port=...)``),
    which finds these models by their tensors; a `RemoteTriton` has no server of its own to
    serve it beside.

    Without a workspace, the models travel through the server's model-repository API, so only
    the URL (and the same host) is needed; typically the server is another process's `Triton`,
    and `access_token` is that one's ``get_access_token()``. With a workspace, the server and
    this process share that folder, and the server must serve its ``models`` subfolder with
    explicit model control::

        tritonserver --model-repository=<workspace>/models --model-control-mode=explicit ...

    Several processes may bind to one server; each model name is served by one process at a
    time. `stop` unloads this process's models and never stops the server.

    Args:
        url: the server's HTTP endpoint, ``http://host:port``, or its gRPC endpoint,
            ``grpc://host:port``; without a scheme, HTTP.
        workspace: None to send the models through the API; or the shared folder: it and its
            ``models`` subfolder must exist, at the same path for the server as for this process.
        access_token: sent as header ``triton-access-token`` (gRPC:
            ``triton-grpc-protocol-triton-access-token``) on the library's calls, for a server
            started with its model-repository API restricted to that header; None sends none.
        connect_timeout_s: how long `connect` (or the first `bind`) waits for the server to
            answer (a server started beside this process may still be starting).

    Raises:
        PyTritonBadParameterError: the URL, the workspace or the token is invalid.

    Use it as a context manager (``with RemoteTriton(...) as triton: ...``, which connects on
    entry) or call `stop()`.
    """

    _kind = "RemoteTriton"

    def __init__(
        self,
        url: str,
        workspace: Union[str, os.PathLike[str], None] = None,
        access_token: Optional[str] = None,
        connect_timeout_s: float = 120.0,
    ) -> None:
        if (not isinstance(connect_timeout_s, (int, float)) or isinstance(connect_timeout_s, bool)
                or not connect_timeout_s > 0):
            raise PyTritonBadParameterError(
                f"connect_timeout_s={connect_timeout_s!r} is invalid: expected a number of seconds > 0"
            )
        if access_token is not None and (not isinstance(access_token, str) or not access_token):
            raise PyTritonBadParameterError(
                f"access_token={access_token!r} is invalid: expected None or a non-empty string"
            )
        if workspace is not None and not isinstance(workspace, (str, os.PathLike)):
            raise PyTritonBadParameterError(f"workspace={workspace!r} is invalid: expected None or a folder path")
        self._control = ServerControl.for_url(url, access_token)
        self._url = url
        # The shared workspace when given (claims, sweeps, the server reads its models there);
        # otherwise a private one for this process's sockets and the folders it sends.
        self._shared: Optional[SharedWorkspace] = None
        self._workspace: Union[SharedWorkspace, Workspace]
        if workspace is not None:
            self._workspace = self._shared = SharedWorkspace(pathlib.Path(workspace))
        else:
            private = Workspace(None)
            private.hold_lease()  # a crash of this process leaves segments the next start sweeps
            self._workspace = private
        self._bindings = ModelBindings(self._kind, self._on_unrecoverable)
        self._import_paths: Optional[Tuple[str, ...]] = None
        self._loaded: List[str] = []  # asked to load: stop() unloads these
        self._ready: List[str] = []  # loaded and ready: is_alive() watches these
        self._connect_timeout_s = float(connect_timeout_s)
        self._reached = False
        self._running = False
        self._stopped = False
        self._unrecoverable: Optional[str] = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        atexit.register(self.stop)

    @property
    def _repository(self) -> pathlib.Path:
        return self._workspace.model_repository

    # -- context manager (TritonBase.__enter__, __exit__) ------------------------------------
    def _enter(self) -> None:
        self.connect()

    # -- binding (TritonBase.bind, bind_ensemble, unbind) -----------------------------------
    def _bind(self, declaration: ModelDeclaration) -> None:
        model_name, model_version = declaration.context.model_name, declaration.context.model_version
        if self._import_paths is None:
            distribution = find_distribution()
            self._import_paths = proxy_import_paths(distribution)
            self._bindings.backend = remote_backend(distribution)
        self._reach()
        check_can_add(self._bindings, model_name, self._running)
        first = model_name not in self._bindings  # else a version joins those this process serves
        if self._shared is not None and first:
            self._shared.claim(model_name)
        try:
            if first and self._shared is None:
                self._check_name_free(model_name)
            elif first:
                self._check_served(model_name)
            target = self._workspace
            self._bindings.start(declaration, repository=target.model_repository, sockets=target.sockets,
                                 shm_prefix=target.shm_prefix, import_paths=self._import_paths)
        except BaseException:
            if first:
                self._forget(model_name)
            raise
        if self._running:
            self._load_or_forget(model_name, model_version)

    def _bind_ensemble(self, declaration: ModelDeclaration) -> None:
        model_name, model_version = declaration.context.model_name, declaration.context.model_version
        self._reach()
        if self._shared is None:
            # Measured with Triton 2.51: an ensemble sent through the repository API looks for
            # its steps in the server's repository folders, where models sent that way are not.
            raise PyTritonInvalidOperationError(
                f"ensemble '{model_name}' needs the server's model repository: give RemoteTriton the folder "
                "it shares with the server (workspace=...); tritonserver cannot load an ensemble whose steps "
                "were sent through its repository API"
            )
        self._shared.claim(model_name)
        try:
            self._check_served(model_name)
            self._bindings.start_ensemble(declaration, self._workspace.model_repository)
        except BaseException:
            self._forget(model_name)
            raise
        if self._running:
            self._load_or_forget(model_name, model_version)

    def _unbind(self, model_name: str, model_version: Optional[int]) -> None:
        whole = model_version is None or self._bindings.models.versions(model_name) == [model_version]
        control = self._control if model_name in self._loaded else None
        unbind(self._bindings, control, model_name, model_version, self._repository,
               lambda: self._load_one(model_name))
        if whole:
            self._loaded[:] = [name for name in self._loaded if name != model_name]
            self._ready[:] = [name for name in self._ready if name != model_name]
            self._forget(model_name)

    def _load_or_forget(self, model_name: str, version: int) -> None:
        """Load a model version bound while connected; on failure, undo the bind and say why."""
        others = prepare_load(self._bindings, model_name, version, self._repository)
        try:
            self._load([model_name])
        except BaseException:
            target = self._workspace
            undo_load(self._bindings, self._control, model_name, version, self._repository, others,
                      lambda: self._load_one(model_name),
                      start=lambda declaration: self._bindings.start(
                          declaration, repository=target.model_repository, sockets=target.sockets,
                          shm_prefix=target.shm_prefix, import_paths=self._import_paths or ()))
            if not others:
                self._loaded.remove(model_name)
                self._forget(model_name)
            raise

    def _forget(self, model_name: str) -> None:
        """Undo a bind: its handlers, its folder, its claim."""
        self._bindings.discard(model_name, self._repository)
        if self._shared is not None:
            self._shared.release(model_name)

    def _check_name_free(self, model_name: str) -> None:
        """Refuse a name the server already serves (another process's model, or a local `Triton`'s).

        The index lists the models of the server's repository; models other processes sent (which
        it leaves out) answer the readiness call.
        """
        listed = [entry for entry in self._index()
                  if entry.get("name") == model_name and entry.get("state") in _LOADED_STATES]
        if listed or self._control.is_model_ready(model_name, None, _REPOSITORY_CALL_TIMEOUT_S):
            state = listed[0].get("state") if listed else "READY"
            raise PyTritonInvalidOperationError(
                f"the tritonserver at {self._url} already serves a model named '{model_name}' (state {state}); "
                "a model name is served by one process at a time: choose another model name"
            )

    def _check_served(self, model_name: str) -> None:
        """Refuse a server that does not list the folder just written, or that serves the name already."""
        entries = [entry for entry in self._index() if entry.get("name") == model_name]
        if not entries:
            repository = self._repository
            raise PyTritonServerError(
                f"the tritonserver at {self._url} does not serve the workspace's model repository {repository}: its "
                f"repository index does not list the folder of model '{model_name}' written there. Start it with "
                f"{remote_server_flags(repository)}, with the workspace at the same path in its filesystem"
            )
        # A model of that name that another repository holds is either listed as loaded, or, once our
        # folder exists too, as unavailable because it "appears in two or more repositories".
        clash = [entry for entry in entries
                 if entry.get("state") in _LOADED_STATES or _DUPLICATE_REASON in entry.get("reason", "")]
        if clash:
            state = clash[0].get("state", "")
            reason = clash[0].get("reason", "")
            raise PyTritonInvalidOperationError(
                f"the tritonserver at {self._url} already serves a model named '{model_name}' from another model "
                f"repository (state {state}{': ' + reason if reason else ''}); choose another model name"
            )

    def _index(self) -> List[Dict[str, str]]:
        try:
            return self._control.repository_index(_REPOSITORY_CALL_TIMEOUT_S)
        except PyTritonServerError as exc:
            raise PyTritonServerError(f"tritonserver at {self._url}: {exc}") from exc

    def _reach(self) -> None:
        """Once: wait until the server answers; with a shared workspace, unload and remove what
        dead sessions left there."""
        if self._reached:
            return
        if not wait_for(self._control.is_live, time.monotonic() + self._connect_timeout_s, lambda: True, 0.2):
            hint = (f"start it first, with {remote_server_flags(self._repository)}" if self._shared is not None
                    else "start it first (a Triton in another process, or tritonserver with explicit model control)")
            raise PyTritonServerError(
                f"no tritonserver answers at {self._url} (waited {self._connect_timeout_s:g} s); {hint}"
            )
        if self._shared is not None:
            self._shared.sweep(self._unload)
        self._reached = True

    # -- lifecycle (TritonBase.run, connect, is_connected, serve, is_alive, stop) ------------
    def _run(self) -> None:
        with self._lock:
            if self._stopped:
                raise PyTritonInvalidOperationError("this RemoteTriton was stopped; create a new RemoteTriton")
            if self._running:
                return
            try:
                self._reach()
                self._load(self._bindings.names())
            except BaseException:
                self.stop()
                raise
            self._running = True
            logger.info("Models %s are ready on the tritonserver at %s", self._ready, self._url)

    def _connected(self) -> bool:
        return self._running and not self._stopped

    def _load_one(self, name: str) -> None:
        override = (None, None) if self._shared is not None else load_override(self._repository / name)
        self._control.load_model(name, MODEL_LOAD_TIMEOUT_S, *override)

    def _load(self, names: Sequence[str]) -> None:
        deadline = time.monotonic() + MODEL_LOAD_TIMEOUT_S
        for name in names:
            if name not in self._loaded:  # before the call: a load that half happened is unloaded too
                self._loaded.append(name)
            try:
                self._load_one(name)
            except PyTritonServerError as exc:
                if self._bindings.backend == "python" or not lacks_backend(str(exc)):
                    raise PyTritonServerError(f"tritonserver at {self._url}: {exc}") from exc
                logger.warning("The tritonserver at %s has no pytriton backend (%s); serving through Triton's "
                               "Python backend instead. To serve through pytriton's own, copy the library that "
                               "`python -m pytriton backend-path` prints to <backend directory>/pytriton/ in the "
                               "server's image", self._url, " ".join(str(exc).split()))
                self._bindings.backend = "python"
                for bound in [*self._loaded, *[n for n in names if n not in self._loaded]]:
                    self._bindings.rewrite_for(bound, "python", self._repository)
                try:
                    self._load_one(name)
                except PyTritonServerError as again:
                    raise PyTritonServerError(f"tritonserver at {self._url}: {again}") from again
        for name in names:
            version = self._bindings.version(name)
            ready = functools.partial(self._control.is_model_ready, name, version)
            if not wait_for(ready, deadline, lambda: not self._stopped):
                raise PyTritonServerError(
                    f"model '{name}' version {version} did not become ready on the tritonserver at {self._url} "
                    f"within {MODEL_LOAD_TIMEOUT_S:.0f} s"
                )
            if name not in self._ready:
                self._ready.append(name)
            settings = self._bindings.trace_settings(name)
            if settings is not None:
                self._control.set_model_trace(name, settings, MODEL_LOAD_TIMEOUT_S)

    def _unload(self, names: Sequence[str]) -> None:
        """Unload `names` and wait until the server dropped them; failures are logged, not raised."""
        for name in names:
            try:
                self._control.unload_model(name, _REPOSITORY_CALL_TIMEOUT_S)
            except PyTritonServerError as exc:
                logger.warning("tritonserver at %s: %s", self._url, exc)

        def dropped() -> bool:
            try:
                entries = self._control.repository_index(_REPOSITORY_CALL_TIMEOUT_S)
            except PyTritonServerError as exc:
                logger.warning("tritonserver at %s: %s; not waiting for the unload", self._url, exc)
                return True
            return not any(e.get("name") in names and e.get("state") in _LOADED_STATES for e in entries)

        if not wait_for(dropped, time.monotonic() + UNLOAD_TIMEOUT_S, lambda: True, interval_s=0.1):
            logger.warning("tritonserver at %s still holds models %s after %.0f s; going on without them",
                           self._url, list(names), UNLOAD_TIMEOUT_S)

    def _serve(self, monitoring_period_s: float) -> None:
        self.run()
        try:
            names = self._bindings.names()
            announce_remote_serving(self._url, [(name, self._bindings.version(name)) for name in names],
                                    notes=self._bindings.notes())
            signum = block_until_signal(self.is_alive, self._wake, monitoring_period_s)
            if signum is not None:
                logger.info("Signal %d received: unloading models from the tritonserver at %s", signum, self._url)
        finally:
            self.stop()

    def _alive(self) -> bool:
        if self._stopped or self._unrecoverable is not None:
            return False
        if not self._running:
            return self._control.is_live()
        ready = list(self._ready)
        if not ready:
            return self._control.is_live()
        return all(self._control.is_model_ready(name, self._bindings.version(name)) for name in ready)

    def _stop(self) -> bool:
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            self._wake.set()
            self._bindings.end_streams()  # Triton waits for open streams before it unloads a model
            if self._loaded:
                self._unload(self._loaded)
            self._bindings.stop_handlers()
            self._control.close()
            self._workspace.cleanup()
            atexit.unregister(self.stop)  # only now: an exit during a stop on another thread waits for it
            logger.debug("RemoteTriton stopped; the tritonserver at %s keeps running", self._url)
            return self._running
