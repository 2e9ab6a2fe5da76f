"""What pytriton's clients and its server side tell each other through Triton's own parameters.

Neither side calls the other: a client's deadline travels as a request parameter that the worker
reads, and the server marks relayed models and names the requests a dead instance left unanswered
in the model's configuration, which the client reads (`pytriton.client.lost`). Both sides take
the names and the notice format from here. The module imports only the standard library and
belongs to the client-only distribution (``pytriton-client``), so the clients need none of the
server side (`pytriton.ipc` names these constants too, for the proxy and the worker; the rest of
the notices, written by the supervisor, are in `pytriton.ipc.lost`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

DEADLINE_PARAMETER = "pytriton_deadline_ms"
"""Request parameter by which pytriton's clients send their deadline to the worker: the Unix time,
in milliseconds, after which nobody waits for the answer. Triton honours its own ``timeout``
parameter only over gRPC and only in the dynamic batcher's queue; the worker drops requests whose
deadline passed (and never shows the parameter to the callable) on both protocols. It compares
wall clocks, so the client's and the server's must agree to well within the timeouts used."""

PARAM_RELAYED = "pytriton.relayed"
"""``"1"`` in a model configuration's ``parameters`` when the proxy answers through Triton's
response senders from a relay thread (decoupled models, and callables that are coroutines, whose
batches may overlap); absent otherwise."""

PARAM_MULTIPLEX = "pytriton.multiplex"
"""For a multiplexed model (``@multiplexed``): JSON ``{"parameter": <the request parameter that
names the variant>, "max_loaded": <variants one instance holds>, "variants": <the known
variants, or null>}`` in the model configuration's ``parameters``. pytriton's backend routes by it;
clients (the OpenAI front) read which parameter to set and which variants to list. Absent for
every other model."""

UNKNOWN_VARIANT = "unknown variant"
"""The words of the worker's error for a request naming a variant the model does not have, which a
client reads where no status code comes with the error (a stream's responses carry none)."""


def multiplexing(parameters: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """A model configuration's `PARAM_MULTIPLEX` (``parameters`` as Triton's JSON gives them), as a
    dict with a str ``parameter``, an int ``max_loaded`` and ``variants`` a list of str or None;
    None for a model that is not multiplexed, or an unreadable value."""
    raw = parameters.get(PARAM_MULTIPLEX)
    if isinstance(raw, Mapping):
        raw = raw.get("string_value")
    if not isinstance(raw, str) or not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("parameter"), str):
        return None
    variants = value.get("variants")
    known = [name for name in variants if isinstance(name, str)] if isinstance(variants, list) else None
    return {"parameter": value["parameter"], "max_loaded": int(value.get("max_loaded") or 0), "variants": known}


STOPPING_MODEL = "pytriton_stopping"
"""The model a stopping pytriton server fails to load, at the start of its drain, so that it reports
not ready over HTTP and gRPC at once. Its failed load is also what a waiting client reads: a
model metadata request for it answers "... has no available versions" (a model the server has,
not ready) from then on, and "... is not found" before; so a client waiting for a model can tell
a stopping server from one still starting, and give up at once."""

LOST_REQUESTS_PARAMETER = "pytriton.lost_requests"
"""The model configuration parameter that holds the notices of lost requests, as JSON: a list of
``{"instance", "pid", "cause", "at", "ids"}`` (``at`` in seconds since the epoch)."""


def notices_of(parameters: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The notices in a model configuration's ``parameters`` (as Triton's JSON gives them: name
    to ``{"string_value": ...}``, or name to text); empty when there are none or they are unreadable."""
    raw = parameters.get(LOST_REQUESTS_PARAMETER)
    if isinstance(raw, Mapping):
        raw = raw.get("string_value")
    if not isinstance(raw, str) or not raw:
        return []
    try:
        notices = json.loads(raw)
    except ValueError:
        return []
    return [notice for notice in notices if isinstance(notice, dict)] if isinstance(notices, list) else []


def lost_message(model_name: str, request_id: str, notices: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """The error for request `request_id` when a notice names it, else None."""
    for found in notices:
        if request_id in found.get("ids", ()):
            return (
                f"Model '{model_name}': its instance {found.get('instance')} (stub pid {found.get('pid')}) "
                f"{found.get('cause', 'died')} while this request (id {request_id}) was in flight; the request "
                "was not answered. The instance was restarted: a retry will be served"
            )
    return None
