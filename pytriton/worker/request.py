"""What an inference callable receives: one `Request` per client request of a batch.

A `Request` is a dict of input names to numpy arrays (so ``lambda requests: requests`` is a
valid identity model), plus the request's parameters. It is a real ``dict`` because the
decorators and callables touch it for every request of every batch: a mapping implemented in
Python costs several times more per access.

Numeric input arrays are read-only views on the proxy's message or shared memory; they are
valid while the callable runs. Copy an array (``array.copy()``) to keep it beyond the call.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np


class Request(Dict[str, np.ndarray]):
    """One inference request: input name -> array (with the batch axis), and its parameters."""

    __slots__ = ("parameters",)

    def __init__(self, data: Dict[str, np.ndarray], parameters: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(data)
        self.parameters: Dict[str, Any] = parameters if parameters is not None else {}

    @property
    def data(self) -> Dict[str, np.ndarray]:
        """The request's inputs (the request itself: kept for code written against ``request.data``)."""
        return self

    def __repr__(self) -> str:
        return f"Request(data={dict.__repr__(self)}, parameters={self.parameters!r})"
