"""What a callable (and the decorators around it) may know about the model that runs it.

The worker sets the context once in each handler thread before serving, so `@batch` can map a
list of outputs to the model's output names without the user repeating them.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from typing import Any, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class TritonContext:
    """The model a callable serves: its name, version, resolved tensors and `ModelConfig`."""

    model_name: str
    model_version: int
    inputs: Tuple[Any, ...]  # pytriton.model_config.Tensor, names resolved
    outputs: Tuple[Any, ...]  # pytriton.model_config.Tensor, names resolved
    config: Any  # pytriton.model_config.ModelConfig
    tracing: Any = dataclasses.field(default=None, repr=False, compare=False)
    """Where the worker exports its spans (`pytriton.worker.tracing.TraceExport`) when the server
    traces with OpenTelemetry; None otherwise. Set by the facade that serves the model."""
    outputs_unnamed: bool = dataclasses.field(default=False, compare=False)
    """True when the user named none of the outputs (pytriton called them ``OUTPUT_<n>``): a
    response whose keys are all other names is then matched to them by position, since the user
    never chose the names it would otherwise have to use."""

    @functools.cached_property
    def input_names(self) -> Tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @functools.cached_property
    def output_names(self) -> Tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    @functools.cached_property
    def output_dtypes(self) -> Tuple[Any, ...]:
        """The declared dtype of each output, as `numpy.dtype` (looked up once: read per batch)."""
        import numpy as np

        return tuple(np.dtype(t.dtype) for t in self.outputs)


_current: contextvars.ContextVar[Optional[TritonContext]] = contextvars.ContextVar("pytriton_context", default=None)


def current_context() -> Optional[TritonContext]:
    """The context of the model served by this thread, or None outside a handler."""
    return _current.get()


def set_current_context(context: Optional[TritonContext]) -> contextvars.Token[Optional[TritonContext]]:
    """Set the context for this thread (the worker does it; tests may too)."""
    return _current.set(context)


def reset_current_context(token: contextvars.Token[Optional[TritonContext]]) -> None:
    """Undo a `set_current_context` (for code that borrows the thread, such as a warm-up at bind)."""
    _current.reset(token)
