"""What the user declares — one step of an ensemble (`Triton.bind_ensemble`).

An ensemble is a model Triton runs by passing tensors from model to model inside the server:
a pipeline (pre-process -> model -> post-process) that a client calls once. Each step names a
model bound in the same `Triton` and maps its tensors to the ensemble's tensors by name. Pure
data; `pytriton.repository.ensemble` checks the steps against the bound models.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Mapping, Optional

from pytriton.exceptions import PyTritonBadParameterError


@dataclasses.dataclass(frozen=True)
class EnsembleStep:
    """One model of an ensemble and how its tensors connect to the others.

    Args:
        model_name: a model bound in the same `Triton` (or another ensemble of it).
        inputs: the step model's input name -> the ensemble tensor it reads. None: every input
            of the model reads the ensemble tensor of its own name.
        outputs: the step model's output name -> the ensemble tensor it writes. None: every
            output of the model writes the ensemble tensor of its own name.
        model_version: the version of the step model; -1 for the one bound.

    Example:
        ``EnsembleStep("Tokenize", inputs={"text": "prompt"}, outputs={"ids": "token_ids"})``
    """

    model_name: str
    inputs: Optional[Mapping[str, str]] = None
    outputs: Optional[Mapping[str, str]] = None
    model_version: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise PyTritonBadParameterError(
                f"EnsembleStep.model_name must be the name of a bound model, got {self.model_name!r}"
            )
        for field in ("inputs", "outputs"):
            object.__setattr__(self, field, _checked_map(self.model_name, field, getattr(self, field)))
        version = self.model_version
        if isinstance(version, bool) or not isinstance(version, int) or (version < 1 and version != -1):
            raise PyTritonBadParameterError(
                f"EnsembleStep({self.model_name!r}).model_version must be -1 (the bound one) or an int >= 1, "
                f"got {version!r}"
            )


def _checked_map(model_name: str, field: str, value: Any) -> Optional[Mapping[str, str]]:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and key and isinstance(item, str) and item for key, item in value.items()
    ):
        raise PyTritonBadParameterError(
            f"EnsembleStep({model_name!r}).{field} must map the step model's tensor names to ensemble tensor "
            f"names (non-empty strings), got {value!r}"
        )
    return types.MappingProxyType(dict(value))
