"""The request and response types of inference callables, under their published import path.

Published PyTriton defines them here, so callables are annotated
``def infer(requests: List[Request]) -> List[Response]`` with
``from pytriton.proxy.types import Request``. In this library they live with the worker that
builds them (`pytriton.worker.request`); this module only re-exports them. The proxy code that
runs inside Triton's Python backend does not import it.
"""

from __future__ import annotations

from typing import List

from pytriton.worker.request import Request, Response

Requests = List[Request]
"""What an inference callable receives: one `Request` per client request of the batch."""

Responses = List[Response]
"""What a callable answers: one mapping of output name -> array per request, in order."""

__all__ = ["Request", "Requests", "Response", "Responses"]
