"""A small stand-in for Triton's ``triton_python_backend_utils``: pytriton's proxy without a server.

Inside tritonserver, the Python backend's stub provides the module the proxy model
(`pytriton.proxy.model`) imports as ``pb_utils``. Outside it, tests install this one under that
name (`install`) and drive the proxy's `TritonPythonModel` with `InferenceRequest` objects built
here. It holds only what the proxy uses, with the calling conventions of Triton's Python backend
documentation: tensors with ``name()`` and ``as_numpy()``, requests with ``inputs()``,
``parameters()`` (JSON text), ``requested_output_names()``, ``correlation_id()``, ``flags()``,
``trace()``, ``is_cancelled()``, ``request_id()`` and ``get_response_sender()``, responses with
output tensors or an error, and the errors' codes. Test code, never shipped in the package.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class TritonModelException(Exception):
    """What a model raises to fail its load (or a whole `execute`)."""


class TritonError:
    """An error meant for one request's client."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = 0) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    """A named numpy array."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    """One response: output tensors, or an error."""

    def __init__(self, output_tensors: Optional[Sequence[Tensor]] = None, error: Optional[TritonError] = None) -> None:
        self._tensors = list(output_tensors or ())
        self._error = error

    def output_tensors(self) -> List[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> Optional[TritonError]:
        return self._error

    def outputs(self) -> Dict[str, np.ndarray]:
        """The outputs by name (for tests to read)."""
        return {tensor.name(): tensor.as_numpy() for tensor in self._tensors}


class ResponseSender:
    """Where a decoupled (or relayed) request's responses go: kept, in order, for the test to read.

    Triton copies a response into its shared memory as it is sent, so the arrays the proxy gave it
    (views of the worker's message) may change afterwards: kept here as copies.
    """

    def __init__(self) -> None:
        self.sent: List[Tuple[Optional[InferenceResponse], int]] = []

    def send(self, response: Optional[InferenceResponse] = None, flags: int = 0) -> None:
        if response is not None:
            tensors = [Tensor(tensor.name(), np.array(tensor.as_numpy(), copy=True))
                       for tensor in response.output_tensors()]
            response = InferenceResponse(tensors, response.error())
        self.sent.append((response, flags))

    @property
    def complete(self) -> bool:
        return any(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL for _, flags in self.sent)


class _Trace:
    def __init__(self, context: Optional[str]) -> None:
        self._context = context

    def get_context(self) -> Optional[str]:
        return self._context


class InferenceRequest:
    """One request as Triton hands it to ``execute``.

    Args:
        inputs: the input arrays by name.
        parameters: the request's parameters (sent to the proxy as JSON text).
        requested: the outputs the client asked for (None: all of them, as Triton lists them).
        correlation_id, flags: a sequence-batched request's sequence id and flags.
        traceparent: the W3C trace context Triton would give a sampled request.
    """

    _ids = 0

    def __init__(
        self,
        inputs: Dict[str, Any],
        parameters: Optional[Dict[str, Any]] = None,
        *,
        requested: Optional[Sequence[str]] = None,
        all_outputs: Sequence[str] = (),
        correlation_id: Any = 0,
        flags: int = 0,
        traceparent: Optional[str] = None,
    ) -> None:
        self._inputs = [Tensor(name, np.asarray(value)) for name, value in inputs.items()]
        self._parameters = json.dumps(parameters or {})
        self._requested = list(requested) if requested is not None else list(all_outputs)
        self._correlation_id = correlation_id
        self._flags = flags
        self._trace = _Trace(json.dumps({"traceparent": traceparent}) if traceparent else None)
        self.cancelled = False
        self.sender = ResponseSender()
        InferenceRequest._ids += 1
        self._id = str(InferenceRequest._ids)

    def inputs(self) -> List[Tensor]:
        return self._inputs

    def parameters(self) -> str:
        return self._parameters

    def requested_output_names(self) -> List[str]:
        return self._requested

    def correlation_id(self) -> Any:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def trace(self) -> _Trace:
        return self._trace

    def is_cancelled(self) -> bool:
        return self.cancelled

    def request_id(self) -> str:
        return self._id

    def get_response_sender(self) -> ResponseSender:
        return self.sender


def install() -> types.ModuleType:
    """Make ``import triton_python_backend_utils`` give this module (before importing the proxy)."""
    module = sys.modules[__name__]
    sys.modules.setdefault("triton_python_backend_utils", module)
    return module
