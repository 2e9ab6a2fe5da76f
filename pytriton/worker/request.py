"""What an inference callable receives: one `Request` per client request of a batch.

A `Request` is a mutable mapping of input names to numpy arrays (so ``lambda requests: requests``
is a valid identity model), plus the request's parameters.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, MutableMapping, Optional

import numpy as np


class Request(MutableMapping[str, np.ndarray]):
    """One inference request: input name -> array (with the batch axis), and its parameters."""

    __slots__ = ("data", "parameters")

    def __init__(self, data: Dict[str, np.ndarray], parameters: Optional[Dict[str, Any]] = None) -> None:
        self.data = data
        self.parameters: Dict[str, Any] = parameters if parameters is not None else {}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.data[name] = value

    def __delitem__(self, name: str) -> None:
        del self.data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"Request(data={self.data!r}, parameters={self.parameters!r})"
