"""What an inference callable receives (one `Request` per client request of a batch), and the
`Response` it may answer each one with.

A `Request` is a dict of input names to numpy arrays (so ``lambda requests: requests`` is a
valid identity model), plus the request's parameters. It is a real ``dict`` because the
decorators and callables touch it for every request of every batch: a mapping implemented in
Python costs several times more per access. A `Response` is the same kind of dict, of output
names to arrays; a plain dict serves as well, the class exists for code written against
``pytriton.proxy.types.Response``.

Numeric input arrays are read-only views on the proxy's message or shared memory; they are
valid while the callable runs. Copy an array (``array.copy()``) to keep it beyond the call.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np


class _Tensors(Dict[str, np.ndarray]):
    """A dict of tensor name -> array that is also reachable as ``.data``.

    Published PyTriton wraps the dict in a ``data`` attribute; here the object is the dict, so
    ``x["name"]`` and ``x.data["name"]`` are one lookup of the same entry.
    """

    __slots__ = ()

    @property
    def data(self) -> Dict[str, np.ndarray]:
        """The tensors: the object itself, kept for code written against ``.data``."""
        return self

    @data.setter
    def data(self, tensors: Mapping[str, np.ndarray]) -> None:
        # Replacing `.data` replaces the entries: the object is its own data.
        if tensors is not self:
            self.clear()
            self.update(tensors)


class Request(_Tensors):
    """One inference request: input name -> array (with the batch axis), and its parameters."""

    __slots__ = ("parameters",)

    def __init__(self, data: Mapping[str, np.ndarray], parameters: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(data)
        self.parameters: Dict[str, Any] = parameters if parameters is not None else {}

    def __repr__(self) -> str:
        return f"Request(data={dict.__repr__(self)}, parameters={self.parameters!r})"


class Response(_Tensors):
    """One request's answer: output name -> array. Any dict of the same shape is accepted too."""

    __slots__ = ()

    def __init__(self, data: Mapping[str, np.ndarray]) -> None:
        super().__init__(data)

    def __repr__(self) -> str:
        return f"Response(data={dict.__repr__(self)})"
