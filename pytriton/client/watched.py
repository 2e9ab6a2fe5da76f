"""Blocking inference requests that stay interruptible while they wait, for relayed models.

A request to an async callable or a decoupled model is never answered by Triton 2.51 when the
stub serving it dies (`pytriton.client.lost`). ``tritonclient``'s blocking ``infer`` cannot be
left early, so for such models the blocking cores send the request in a way they can wait on in
slices (`pytriton.client.lost.wait_slices`) and look for a notice of the request's loss between
two: over HTTP on an ``http.client`` connection of the core's own, kept alive between requests
(the body is ``tritonclient.http``'s own encoding, the answer parsed by it too); over gRPC with
``async_infer`` and an event. Errors come out as ``tritonclient`` raises them, for
``pytriton.client._errors.translate_errors``.
"""

from __future__ import annotations

import http.client
import json
import select
import threading
from typing import Any, Callable

import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from pytriton.client.codec import infer_call, request_timeout_us, requested_outputs, to_infer_inputs
from pytriton.client.core_request import CoreRequest
from pytriton.client.generate import model_path
from pytriton.client.lost import wait_slices
from pytriton.client.url import TritonUrl

_GRACE_S = 0.5
"""How long past its deadline a gRPC call is given to report its own deadline error."""


class WatchedHttp:
    """A core's HTTP connection for watched requests; one request at a time (a blocking client is
    used from one thread)."""

    def __init__(self, url: TritonUrl) -> None:
        self._url = url
        self._connection: http.client.HTTPConnection | None = None

    def infer(self, request: CoreRequest, look: Callable[[], None]) -> Any:
        """Send `request` (headers, parameters and timeout as sent) and wait for its answer,
        calling `look` between waits (it raises to end the request: the connection is then
        closed, which cancels the request in Triton).

        Returns:
            ``tritonclient.http.InferResult``.
        """
        assert request.timeout_s is not None
        timeout_s = request.timeout_s
        body, json_size = tritonclient.http.InferenceServerClient.generate_request_body(
            to_infer_inputs(tritonclient.http, request.inputs, request.shared),
            outputs=requested_outputs(tritonclient.http, request.shared),
            request_id=request.request_id,
            timeout=request_timeout_us(timeout_s),
            parameters=request.parameters,
            priority=request.priority,
            **request.sequence,
        )
        request_headers = dict(request.headers or {})
        if json_size is not None:
            request_headers["Inference-Header-Content-Length"] = str(json_size)
        connection = self._connection
        if connection is None:
            connection = self._connection = http.client.HTTPConnection(self._url.hostname, self._url.port,
                                                                       timeout=timeout_s)
        try:
            connection.timeout = timeout_s
            if connection.sock is not None:
                connection.sock.settimeout(timeout_s)
            connection.request("POST", model_path(request.model_name, request.model_version) + "/infer", body=body,
                               headers=request_headers)
            for wait_s in wait_slices(timeout_s):
                if select.select([connection.sock], [], [], wait_s)[0]:
                    break
                look()
            else:
                raise TimeoutError(f"no answer within {timeout_s:g} s")
            response = connection.getresponse()
            data = response.read()
        except BaseException:
            self.close()
            raise
        if response.status != 200:
            try:
                message = json.loads(data).get("error", "")
            except ValueError:
                message = data.decode("utf-8", "replace")
            raise InferenceServerException(msg=message, status=str(response.status))
        header_length = response.getheader("Inference-Header-Content-Length")
        return tritonclient.http.InferenceServerClient.parse_response_body(
            data,
            header_length=int(header_length) if header_length is not None else None,
            content_encoding=response.getheader("Content-Encoding"),
        )

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def grpc_infer_watched(client: tritonclient.grpc.InferenceServerClient, request: CoreRequest,
                       look: Callable[[], None]) -> Any:
    """`WatchedHttp.infer` over gRPC: the call is cancelled when `look` raises.

    Returns:
        ``tritonclient.grpc.InferResult``.
    """
    assert request.timeout_s is not None
    timeout_s = request.timeout_s
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def finished(result: Any, error: Any) -> None:
        outcome["result"], outcome["error"] = result, error
        done.set()

    args, keywords = infer_call(tritonclient.grpc, request)
    context = client.async_infer(*args, finished, client_timeout=timeout_s, **keywords)
    try:
        for wait_s in wait_slices(timeout_s):
            if done.wait(wait_s):
                break
            look()
        else:
            if not done.wait(_GRACE_S):
                raise TimeoutError(f"no answer within {timeout_s:g} s")
    except BaseException:
        context.cancel()
        raise
    if outcome["error"] is not None:
        raise outcome["error"]
    return outcome["result"]
