"""The front's own histograms on Triton's metrics port: time to first token, tokens per second.

Triton's ``nv_inference_*`` families and pytriton's ``pytriton_*`` ones already count every
request the front makes (it goes through Triton); what they cannot see is what the client sees
of a streamed answer: how long until its first piece, and how fast the rest came. The front
measures both per answer and records them in the registry of the model's first instance, which
reports them to Triton with the instance's other families (`pytriton.metrics`), so they appear
on the metrics port as ``pytriton_openai_time_to_first_token_seconds`` and
``pytriton_openai_tokens_per_second`` with the labels ``model``, ``version`` and ``instance``
(always ``"0"``: the front measures answers, not instances). The front's process measures each
answer (`answer_figures`) and sends the figures to the serving process every 0.1 s, which
records them (`FrontMeasures`).

Only models bound in the serving process itself are measured: a model of another process
(`RemoteTriton`), one written for Triton's Python backend, or one served from worker processes
(``process_instances``) has no registry here.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from pytriton.metrics import HISTOGRAM, Definition, observe
from pytriton.openai.answers import Choice

TIME_TO_FIRST_TOKEN = Definition(
    "pytriton_openai_time_to_first_token_seconds",
    "Time from a request's arrival at the OpenAI-compatible API to its answer's first piece of text or tool call",
    HISTOGRAM, (), (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
TOKENS_PER_SECOND = Definition(
    "pytriton_openai_tokens_per_second",
    "Completion tokens (the callable's usage, else pieces) per second of an answer, after its first piece",
    HISTOGRAM, (), (1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0))


def answer_figures(choice: Choice, started: float, ended: float) -> Optional[Tuple[float, Optional[float]]]:
    """One answer's time to first token and tokens per second (None when it had no first piece),
    from `time.perf_counter` times: the request's arrival, the first piece (``choice.first_at``),
    the end. Computed in the front's process, recorded in the serving process (`FrontMeasures`)."""
    if choice.first_at is None:
        return None
    tokens = choice.completion_tokens()
    rate = None
    if tokens > 1 and ended > choice.first_at:
        # After the first piece: the rate of the rest, as inference servers report it.
        rate = (tokens - 1) / (ended - choice.first_at)
    return max(0.0, choice.first_at - started), rate


class FrontMeasures:
    """Records the front's histograms of each finished answer (see the module docstring).

    Args:
        bindings: the facade's `pytriton.binding.ModelBindings`, to find a model's registry.
    """

    def __init__(self, bindings: Any) -> None:
        self._bindings = bindings

    def record(self, model: str, first_token_s: float, tokens_per_s: Optional[float]) -> None:
        """One answer of `model`, as `answer_figures` measured it; nothing for a model without a registry here."""
        registry = self._bindings.registry(model)
        if registry is None:
            return
        observe(TIME_TO_FIRST_TOKEN, registry.series(TIME_TO_FIRST_TOKEN), first_token_s)
        if tokens_per_s is not None:
            observe(TOKENS_PER_SECOND, registry.series(TOKENS_PER_SECOND), tokens_per_s)
