"""The library's own calls to a tritonserver: readiness, and the model repository.

Over HTTP with the standard library (no client stack on the server side), or over gRPC when the
user turned HTTP off (or a remote server is given by a ``grpc://`` URL). Every call has a
timeout; readiness is polled against a monotonic deadline.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import socket
import time
import urllib.parse
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from pytriton.access_token import ACCESS_TOKEN_HEADER, auth_headers
from pytriton.constants import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, TRITON_LOCAL_IP
from pytriton.exceptions import PyTritonBadParameterError, PyTritonServerError
from pytriton.ipc import protocol

logger = logging.getLogger("pytriton.triton")

_FORGET_WAIT_S = 10.0
DEFAULT_PORTS = {"http": DEFAULT_HTTP_PORT, "grpc": DEFAULT_GRPC_PORT}
"""Triton's default ports, used when a server URL names none."""


def _connect_host(address: Optional[str]) -> str:
    """Where to reach a server bound to `address` from this host."""
    if not address or address in ("0.0.0.0", "::", "[::]"):
        return TRITON_LOCAL_IP
    return address


def parse_server_url(url: str) -> Tuple[str, str, int]:
    """``(protocol, host, port)`` of a server URL: ``http://host:port``, ``grpc://host:port`` or ``host:port``.

    A URL without a scheme is HTTP; one without a port gets Triton's default port for its protocol.

    Raises:
        PyTritonBadParameterError: not a URL of that form (another scheme, a path, a bad port).
    """
    if not isinstance(url, str) or not url.strip():
        raise PyTritonBadParameterError(f"url={url!r} is invalid: expected 'http://host:port' or 'grpc://host:port'")
    text = url.strip()
    parsed = urllib.parse.urlsplit(text if "://" in text else f"http://{text}")
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if parsed.scheme not in DEFAULT_PORTS or not parsed.hostname or parsed.path not in ("", "/") or port == -1:
        raise PyTritonBadParameterError(
            f"url={url!r} is invalid: expected 'http://host:port' (the server's HTTP endpoint) or 'grpc://host:port'"
        )
    return parsed.scheme, parsed.hostname, port if port is not None else DEFAULT_PORTS[parsed.scheme]


class GrpcTls(NamedTuple):
    """Files (paths) for a TLS connection to the server's gRPC endpoint; None leaves one out."""

    root_certificates: Optional[str]
    private_key: Optional[str] = None
    certificate_chain: Optional[str] = None

    @classmethod
    def for_server(
        cls, *, mutual: bool, server_cert: Optional[str], server_key: Optional[str], root_cert: Optional[str]
    ) -> GrpcTls:
        """How the library reaches a server it started with ``--grpc-use-ssl``: it trusts the
        server's root certificate (or, without one, the server's own certificate) and, under
        mutual TLS, shows the server's own key and certificate as its client identity."""
        trusted = root_cert or server_cert
        if mutual:
            return cls(trusted, server_key, server_cert)
        return cls(trusted)


class ServerControl:
    """Health and model-repository calls to one tritonserver.

    Args:
        http_port: the server's HTTP port, or None when HTTP is off.
        grpc_port: the server's gRPC port (used when HTTP is off).
        access_token: sent with every call, so the library reaches the APIs it restricted
            (model loading is in the model-repository group).
        grpc_tls: how to reach a gRPC endpoint that uses TLS (only used when HTTP is off).
    """

    def __init__(
        self,
        *,
        http_address: Optional[str],
        http_port: Optional[int],
        grpc_address: Optional[str],
        grpc_port: int,
        access_token: Optional[str] = None,
        grpc_tls: Optional[GrpcTls] = None,
    ) -> None:
        self._grpc_tls = grpc_tls
        self._http = (_connect_host(http_address), http_port) if http_port else None
        self._grpc_url = f"{_connect_host(grpc_address)}:{grpc_port}"
        self._headers: Dict[str, str] = auth_headers("http", access_token)
        self._grpc_headers: Dict[str, str] = auth_headers("grpc", access_token)
        self._grpc_client: Any = None

    @classmethod
    def for_url(cls, url: str, access_token: Optional[str] = None) -> ServerControl:
        """Calls to the server at `url` (see `parse_server_url`), over the URL's protocol."""
        scheme, host, port = parse_server_url(url)
        if scheme == "http":
            return cls(http_address=host, http_port=port, grpc_address=None, grpc_port=DEFAULT_PORTS["grpc"],
                       access_token=access_token)
        return cls(http_address=None, http_port=None, grpc_address=host, grpc_port=port, access_token=access_token)

    def _request(self, method: str, path: str, timeout_s: float, body: bytes = b"") -> tuple[int, bytes]:
        assert self._http is not None
        connection = http.client.HTTPConnection(*self._http, timeout=timeout_s)
        try:
            connection.request(method, path, body=body or None, headers=self._headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            _close_for_every_process(connection)

    def _grpc(self) -> Any:
        if self._grpc_client is None:
            import tritonclient.grpc as grpcclient

            tls = self._grpc_tls
            credentials: Dict[str, Any] = {} if tls is None else {
                "ssl": True,
                "root_certificates": tls.root_certificates,
                "private_key": tls.private_key,
                "certificate_chain": tls.certificate_chain,
            }
            self._grpc_client = grpcclient.InferenceServerClient(self._grpc_url, **credentials)
        return self._grpc_client

    def is_ready(self, timeout_s: float = 1.0) -> bool:
        """True when the server and (strict readiness) all its loaded models are ready."""
        try:
            if self._http:
                return self._request("GET", "/v2/health/ready", timeout_s)[0] == 200
            return bool(self._grpc().is_server_ready(headers=self._grpc_headers, client_timeout=timeout_s))
        except Exception:  # noqa: BLE001 - not reachable yet counts as not ready
            return False

    def is_live(self, timeout_s: float = 1.0) -> bool:
        """True while the server answers its liveness endpoint."""
        try:
            if self._http:
                return self._request("GET", "/v2/health/live", timeout_s)[0] == 200
            return bool(self._grpc().is_server_live(headers=self._grpc_headers, client_timeout=timeout_s))
        except Exception:  # noqa: BLE001 - not reachable counts as not live
            return False

    def is_model_ready(self, name: str, version: Optional[int], timeout_s: float = 1.0) -> bool:
        """Whether `version` of model `name` (None: any version) serves; False when unreachable.

        Also finds models loaded with a config override, which the repository index leaves out.
        """
        try:
            if self._http:
                versioned = "" if version is None else f"/versions/{version}"
                path = f"/v2/models/{urllib.parse.quote(name)}{versioned}/ready"
                return self._request("GET", path, timeout_s)[0] == 200
            return bool(self._grpc().is_model_ready(name, "" if version is None else str(version),
                                                    headers=self._grpc_headers,
                                                    client_timeout=timeout_s))
        except Exception:  # noqa: BLE001
            return False

    def model_config(self, name: str, timeout_s: float) -> Dict[str, Any]:
        """Model `name`'s configuration as the server holds it (Triton's JSON form).

        Raises:
            PyTritonServerError: unreachable, or the server has no such model loaded.
        """
        try:
            if self._http:
                status, body = self._request("GET", f"/v2/models/{urllib.parse.quote(name)}/config", timeout_s)
                if status == 200:
                    return dict(json.loads(body))
                reason = body.decode("utf-8", "replace")
            else:
                answer = self._grpc().get_model_config(name, headers=self._grpc_headers, as_json=True,
                                                       client_timeout=timeout_s)
                return dict(answer["config"])
        except Exception as exc:  # noqa: BLE001 - unreachable or refused: one error kind for the caller
            reason = str(exc)
        raise PyTritonServerError(f"tritonserver could not give model '{name}''s configuration: {reason}")

    def load_model(
        self, name: str, timeout_s: float, config_json: Optional[str] = None, files: Optional[Dict[str, bytes]] = None
    ) -> None:
        """Ask the server to (re)load model `name`: from its repository, or from what is sent.

        With `config_json` (and `files`, paths relative to the model folder such as
        ``1/model.py``), the server builds the model from them (Triton's load with a config
        override) and needs no folder of its own: how a process binds to a server it shares
        no filesystem folder with.

        Raises:
            PyTritonServerError: with the server's reason when the load fails.
        """
        override = None if config_json is None else (config_json, dict(files or {}))
        self._repository_call(f"could not load model '{name}'", "load", name, timeout_s, override)

    def set_model_trace(self, name: str, settings: Dict[str, Any], timeout_s: float) -> None:
        """Set model `name`'s own trace settings (Triton's per-model trace API; HTTP or gRPC).

        Raises:
            PyTritonServerError: with the server's reason when it refuses them (a server started
                without a trace file refuses every setting).
        """
        reason = ""
        try:
            if self._http:
                path = f"/v2/models/{urllib.parse.quote(name)}/trace/setting"
                status, body = self._request("POST", path, timeout_s, json.dumps(settings).encode())
                reason = "" if status == 200 else self._refusal(status, body)
            else:
                self._grpc().update_trace_settings(model_name=name, settings=settings, headers=self._grpc_headers,
                                                   client_timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - the reason travels in the error below
            reason = str(exc)
        if reason:
            raise PyTritonServerError(f"the server refused the trace settings of model '{name}': {reason}")

    def forget_failed_model(self, name: str, timeout_s: float, backend: str) -> None:
        """Clear the record a failed load of `name` leaves, which keeps a strict server unready.

        Triton 2.51 keeps reporting not ready after a model failed to load, even once it is
        unloaded and its folder removed, until some model of that name loads. So a placeholder
        (`placeholder_model`, of the server's `backend`) is sent under the name and unloaded
        again; an unloaded model that was sent, not read from the repository, is forgotten.

        Best effort, called while another error is on its way to the user: a refusal is logged.
        """
        try:
            self.load_model(name, timeout_s, *placeholder_model(name, backend))
            self.unload_model(name, timeout_s)
        except PyTritonServerError as exc:
            logger.warning("model '%s' failed to load, and the server may report not ready until a model of that "
                           "name loads: %s", name, exc)
            return
        # The unload completes about a second later; readiness is what it changes. A server that
        # stays unready for other reasons is not waited for longer.
        wait_for(self.is_ready, time.monotonic() + min(timeout_s, _FORGET_WAIT_S), lambda: True)

    def unload_model(self, name: str, timeout_s: float) -> None:
        """Ask the server to unload model `name`; returns before the unload is complete.

        Triton lets the requests in flight finish first; `repository_index` tells when it is done.

        Raises:
            PyTritonServerError: with the server's reason when it refuses.
        """
        self._repository_call(f"could not unload model '{name}'", "unload", name, timeout_s)

    def repository_index(self, timeout_s: float = 5.0) -> List[Dict[str, str]]:
        """Every model folder of the server's repositories: ``name``, and for those ever loaded
        ``version``, ``state`` (``READY``, ``LOADING``, ``UNLOADING``, ``UNAVAILABLE``) and ``reason``.

        Raises:
            PyTritonServerError: the server is unreachable or refuses (the message says which).
        """
        entries = self._repository_call("could not read its model repository index", "index", None, timeout_s)
        return [{key: str(value) for key, value in entry.items()} for entry in entries]

    def shared_memory_regions(self, timeout_s: float = 2.0) -> Dict[str, str]:
        """The system shared-memory regions clients registered with the server: name -> key.

        Raises:
            PyTritonServerError: the server is unreachable or refuses.
        """
        try:
            if self._http:
                status, body = self._request("GET", "/v2/systemsharedmemory/status", timeout_s)
                if status != 200:
                    raise PyTritonServerError(f"Triton could not list its shared memory: {self._refusal(status, body)}")
                return {str(region["name"]): str(region.get("key", "")) for region in json.loads(body)}
            answer = self._grpc().get_system_shared_memory_status(headers=self._grpc_headers, as_json=True,
                                                                  client_timeout=timeout_s)
            return {str(name): str(region.get("key", "")) for name, region in answer.get("regions", {}).items()}
        except PyTritonServerError:
            raise
        except Exception as exc:
            raise PyTritonServerError(f"Triton could not list its shared memory: {exc}") from exc

    def unregister_shared_memory(self, name: str, timeout_s: float = 2.0) -> None:
        """Unregister a client's system shared-memory region (an unknown name is no error).

        Raises:
            PyTritonServerError: the server is unreachable or refuses.
        """
        try:
            if self._http:
                path = f"/v2/systemsharedmemory/region/{urllib.parse.quote(name)}/unregister"
                status, body = self._request("POST", path, timeout_s, b"{}")
                if status != 200:
                    raise PyTritonServerError(f"Triton could not unregister {name}: {self._refusal(status, body)}")
                return
            self._grpc().unregister_system_shared_memory(name, headers=self._grpc_headers, client_timeout=timeout_s)
        except PyTritonServerError:
            raise
        except Exception as exc:
            raise PyTritonServerError(f"Triton could not unregister {name}: {exc}") from exc

    def _repository_call(
        self,
        failure: str,
        action: str,
        name: Optional[str],
        timeout_s: float,
        override: Optional[Tuple[str, Dict[str, bytes]]] = None,
    ) -> Any:
        """One call of the model-repository API; its decoded answer, or a `PyTritonServerError`."""
        try:
            if self._http:
                path = "/v2/repository/index" if name is None else (
                    f"/v2/repository/models/{urllib.parse.quote(name)}/{action}")
                request = b"{}"
                if override is not None:
                    parameters = {"config": override[0]}
                    parameters.update({f"file:{path_}": base64.b64encode(data).decode("ascii")
                                       for path_, data in override[1].items()})
                    request = json.dumps({"parameters": parameters}).encode()
                status, body = self._request("POST", path, timeout_s, request)
                if status != 200:
                    raise PyTritonServerError(f"Triton {failure}: {self._refusal(status, body)}")
                return json.loads(body) if body else None
            client = self._grpc()
            if name is None:
                index = client.get_model_repository_index(headers=self._grpc_headers, as_json=True,
                                                          client_timeout=timeout_s)
                return index.get("models", [])
            if action == "unload":
                return client.unload_model(name, headers=self._grpc_headers, client_timeout=timeout_s)
            sent: Dict[str, Any] = {}
            if override is not None:
                sent = {"config": override[0], "files": {f"file:{path_}": data for path_, data in override[1].items()}}
            return client.load_model(name, headers=self._grpc_headers, client_timeout=timeout_s, **sent)
        except PyTritonServerError:
            raise
        except Exception as exc:
            raise PyTritonServerError(f"Triton {failure}: {exc}") from exc

    def _refusal(self, status: int, body: bytes) -> str:
        """The server's reason for a refused HTTP call, with the remedy of a missing token."""
        try:
            reason = str(json.loads(body or b"{}").get("error", ""))
        except ValueError:
            reason = ""
        reason = reason or body.decode(errors="replace") or f"HTTP status {status}"
        if status == 403:
            sent = "the access token sent was refused" if self._headers else "no access token was sent"
            reason += (f" ({sent}; the model-repository API needs the '{ACCESS_TOKEN_HEADER}' header the server "
                       "was started to expect)")
        return reason

    def close(self) -> None:
        if self._grpc_client is not None:
            self._grpc_client.close()
            self._grpc_client = None


def gate_parameters(release_path: str) -> Dict[str, Dict[str, str]]:
    """The parameters of a model without a worker on pytriton's backend (the readiness gate's
    kind): its load returns once `release_path` exists, or fails once this process is gone."""
    return {protocol.PARAM_GATE_RELEASE: {"string_value": release_path},
            protocol.PARAM_WORKER_PID: {"string_value": str(os.getpid())}}


def placeholder_model(name: str, backend: str) -> Tuple[str, Dict[str, bytes]]:
    """The configuration and files of a model named `name` that exists only to load at once.

    On pytriton's backend it is a model without a worker released by a path that always exists:
    a Python model would need the Python backend's stub, which cannot run where the backend
    path is the only one (Python 3.13: no NumPy 1.x for the stub), and a placeholder that fails
    to load would leave the server unready for good.
    """
    if backend == "python":
        model_py = b"class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
        return placeholder_config(name), {"1/model.py": model_py}
    config = placeholder_config(name, backend=backend, parameters=gate_parameters("/"))
    return config, {"1/PLACEHOLDER.txt": b"loaded and unloaded again, to clear a failed load of this name\n"}


def placeholder_config(name: str, **fields: Any) -> str:
    """The configuration (JSON, as a load call sends it) of a Python model named `name` that exists
    only to be loaded (one bool in, one out), with `fields` added."""
    return json.dumps({
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": "x", "data_type": "TYPE_BOOL", "dims": [1]}],
        "output": [{"name": "y", "data_type": "TYPE_BOOL", "dims": [1]}],
        **fields,
    })


def _close_for_every_process(connection: http.client.HTTPConnection) -> None:
    """Close an HTTP connection for good, also where a forked child holds a copy of its socket.

    A worker process forked while a call was open (the readiness gate's load call stays open
    for the whole start) inherits the socket; a plain close leaves the connection open in the
    child, and Triton's shutdown then waits its whole exit timeout for that "open HTTP
    connection". Shutting the socket down ends the connection in every process at once.
    """
    sock = connection.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer
    connection.close()


def accepts_connections(address: Optional[str], port: int, timeout_s: float = 0.5) -> bool:
    """Whether something listens on `port` of the host bound to `address` (a wildcard means this host).

    Triton answers ready on HTTP before its metrics endpoint listens (about 40 ms later): a
    start that only polled readiness could return while a scrape is still refused.
    """
    host = _connect_host(address)
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for(
    condition: Callable[[], bool], deadline: float, alive: Callable[[], bool], interval_s: float = 0.05
) -> bool:
    """Poll `condition` until it holds (True), `alive` turns false or `deadline` passes (False)."""
    while time.monotonic() < deadline:
        if condition():
            return True
        if not alive():
            return False
        time.sleep(interval_s)
    return condition()
