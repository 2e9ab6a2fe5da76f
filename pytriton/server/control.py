"""The library's own calls to its server: readiness and model loading.

Over HTTP with the standard library (no client stack on the server side), or over gRPC when the
user turned HTTP off. Every call has a timeout; readiness is polled against a monotonic deadline.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional

from pytriton.exceptions import PyTritonServerError
from pytriton.server.security import auth_headers


def _connect_host(address: Optional[str]) -> str:
    """Where to reach a server bound to `address` from this host."""
    if not address or address in ("0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    return address


class ServerControl:
    """Health and model-repository calls to one local tritonserver.

    Args:
        http_port: the server's HTTP port, or None when HTTP is off.
        grpc_port: the server's gRPC port (used when HTTP is off).
        access_token: sent with every call, so the library reaches the APIs it restricted
            (model loading is in the model-repository group).
    """

    def __init__(
        self,
        *,
        http_address: Optional[str],
        http_port: Optional[int],
        grpc_address: Optional[str],
        grpc_port: int,
        access_token: Optional[str] = None,
    ) -> None:
        self._http = (_connect_host(http_address), http_port) if http_port else None
        self._grpc_url = f"{_connect_host(grpc_address)}:{grpc_port}"
        self._headers: Dict[str, str] = auth_headers(access_token, grpc=False) if access_token else {}
        self._grpc_headers: Dict[str, str] = auth_headers(access_token, grpc=True) if access_token else {}
        self._grpc_client: Any = None

    def _request(self, method: str, path: str, timeout_s: float, body: bytes = b"") -> tuple[int, bytes]:
        assert self._http is not None
        connection = http.client.HTTPConnection(*self._http, timeout=timeout_s)
        try:
            connection.request(method, path, body=body or None, headers=self._headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def _grpc(self) -> Any:
        if self._grpc_client is None:
            import tritonclient.grpc as grpcclient

            self._grpc_client = grpcclient.InferenceServerClient(self._grpc_url)
        return self._grpc_client

    def is_ready(self, timeout_s: float = 1.0) -> bool:
        """True when the server and (strict readiness) all its loaded models are ready."""
        try:
            if self._http:
                return self._request("GET", "/v2/health/ready", timeout_s)[0] == 200
            return bool(self._grpc().is_server_ready(headers=self._grpc_headers, client_timeout=timeout_s))
        except Exception:  # noqa: BLE001 - not reachable yet counts as not ready
            return False

    def is_model_ready(self, name: str, version: int, timeout_s: float = 1.0) -> bool:
        try:
            if self._http:
                path = f"/v2/models/{urllib.parse.quote(name)}/versions/{version}/ready"
                return self._request("GET", path, timeout_s)[0] == 200
            return bool(self._grpc().is_model_ready(name, str(version), headers=self._grpc_headers,
                                                    client_timeout=timeout_s))
        except Exception:  # noqa: BLE001
            return False

    def load_model(self, name: str, timeout_s: float) -> None:
        """Ask the server to (re)load model `name` from the repository.

        Raises:
            PyTritonServerError: with the server's reason when the load fails.
        """
        try:
            if self._http:
                status, body = self._request("POST", f"/v2/repository/models/{urllib.parse.quote(name)}/load",
                                             timeout_s, b"{}")
                if status != 200:
                    reason = json.loads(body or b"{}").get("error", body.decode(errors="replace"))
                    raise PyTritonServerError(f"Triton could not load model '{name}': {reason}")
            else:
                self._grpc().load_model(name, headers=self._grpc_headers, client_timeout=timeout_s)
        except PyTritonServerError:
            raise
        except Exception as exc:
            raise PyTritonServerError(f"Triton could not load model '{name}': {exc}") from exc

    def close(self) -> None:
        if self._grpc_client is not None:
            self._grpc_client.close()
            self._grpc_client = None


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
