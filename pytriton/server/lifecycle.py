"""When `Triton` starts its server, and where the server takes its models from: pure data."""

from __future__ import annotations

import dataclasses

from pytriton.exceptions import PyTritonBadParameterError


@dataclasses.dataclass(frozen=True)
class TritonLifecyclePolicy:
    """How a `Triton` manages its tritonserver (the published PyTriton's policy object).

    Args:
        launch_triton_on_startup: True: the server starts when the ``with Triton()`` block is
            entered, and each `bind` inside it loads its model at once (so clients can call it
            right after, without `run()`); False: the server starts at `run()` or `serve()` with
            every model bound so far.
        local_model_store: accepted for compatibility. The published library then polls a model
            store on the local disk instead of sending each model's configuration to the server;
            this library always writes the models into the server's private repository and
            loads them explicitly, which behaves the same for either value.

    When `TritonConfig.allow_vertex_ai` is true and no policy is given, `Triton` uses
    ``TritonLifecyclePolicy(launch_triton_on_startup=False, local_model_store=True)``: Vertex
    AI picks its default model when the server starts, so the models must be bound before.
    """

    launch_triton_on_startup: bool = True
    local_model_store: bool = False

    def __post_init__(self) -> None:
        for field in ("launch_triton_on_startup", "local_model_store"):
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise PyTritonBadParameterError(
                    f"TritonLifecyclePolicy.{field}={value!r} is invalid: expected True or False"
                )


DEFAULT_LIFECYCLE_POLICY = TritonLifecyclePolicy()
VERTEX_AI_LIFECYCLE_POLICY = TritonLifecyclePolicy(launch_triton_on_startup=False, local_model_store=True)
"""Chosen when Vertex AI is allowed and no policy is given (see `TritonLifecyclePolicy`)."""

# The published names of the two policies, spelling included ("Vertext"): the same objects.
DefaultTritonLifecyclePolicy = DEFAULT_LIFECYCLE_POLICY
"""Published name of `DEFAULT_LIFECYCLE_POLICY`."""
VertextAILifecyclePolicy = VERTEX_AI_LIFECYCLE_POLICY
"""Published name of `VERTEX_AI_LIFECYCLE_POLICY`."""


def choose_policy(policy: object, allow_vertex_ai: object) -> TritonLifecyclePolicy:
    """The policy a `Triton` follows: the user's, else the Vertex AI one or the default.

    Raises:
        PyTritonBadParameterError: `policy` is neither None nor a `TritonLifecyclePolicy`.
    """
    if policy is None:
        return VERTEX_AI_LIFECYCLE_POLICY if allow_vertex_ai is True else DEFAULT_LIFECYCLE_POLICY
    if not isinstance(policy, TritonLifecyclePolicy):
        raise PyTritonBadParameterError(
            f"triton_lifecycle_policy={policy!r} is invalid: expected a TritonLifecyclePolicy or None"
        )
    return policy
