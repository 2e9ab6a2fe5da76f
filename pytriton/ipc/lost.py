"""Notices of requests a dead model instance left unanswered: how the server writes them into the
model's configuration (how pytriton's clients read them: `pytriton.client_contract`).

Triton 2.51 never answers a relayed request (an async callable's, a decoupled model's) whose stub
died: the stub held its response sender. The stub's proxy keeps those requests' ids in a ledger
(`pytriton.proxy.ledger`); the supervisor, healing the instance, reads it and loads the model again
with a notice under the configuration parameter `LOST_REQUESTS_PARAMETER`. A pytriton client that
has waited a while on a relayed request reads the configuration and, finding its request's id,
ends the request with an error that names the death (a retry is served by the healed instance).

The parameter holds JSON: a list of notices ``{"instance", "pid", "cause", "at", "ids"}`` (``at``
in seconds since the epoch), those of the last `KEPT_S` seconds. Its name and its reading
(`notices_of`) are defined in `pytriton.client_contract`, which the client-only distribution ships.

The ledger file is a map of `SLOT_BYTES` slots: the id's length in the first byte (0: a free
slot), then the id's UTF-8 bytes.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

from pytriton.client_contract import LOST_REQUESTS_PARAMETER, notices_of

KEPT_S = 120.0
"""How long a notice stays in the model's configuration (a client looks within seconds)."""
MAX_IDS = 4096
"""The most ids kept over all notices (the oldest notices go first)."""
SLOT_BYTES = 64
ID_LIMIT = SLOT_BYTES - 1
"""The longest id a ledger records (pytriton's clients' ids are far shorter)."""


def read_ledger(path: str) -> List[str]:
    """The ids recorded in a ledger file (a dead stub's); empty when there is none."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return []
    found = []
    for start in range(0, len(data) - SLOT_BYTES + 1, SLOT_BYTES):
        length = data[start]
        if 0 < length <= ID_LIMIT:
            found.append(data[start + 1:start + 1 + length].decode("utf-8", "replace"))
    return found


def with_notice(config: Dict[str, Any], notice: Dict[str, Any], now: float) -> Dict[str, Any]:
    """`config` (Triton's JSON of a model configuration) with `notice` added to its notices, those
    older than `KEPT_S` dropped, and at most `MAX_IDS` ids kept."""
    parameters = dict(config.get("parameters") or {})
    kept = [old for old in notices_of(parameters) if now - float(old.get("at", 0)) <= KEPT_S]
    kept.append(notice)
    while len(kept) > 1 and sum(len(old.get("ids", ())) for old in kept) > MAX_IDS:
        kept.pop(0)
    parameters[LOST_REQUESTS_PARAMETER] = {"string_value": json.dumps(kept, separators=(",", ":"))}
    return {**config, "parameters": parameters}


def notice(instance: str, pid: int, cause: str, at: float, ids: Sequence[str]) -> Dict[str, Any]:
    return {"instance": instance, "pid": pid, "cause": cause, "at": at, "ids": list(ids)[-MAX_IDS:]}
