"""A model's own trace settings (`Triton.bind(..., trace_config=...)`).

Triton traces requests to the file that the server was started with
(``TritonConfig(trace_config=["triton,file=..."])``); its per-model trace API then sets, for
one model, which requests are traced and at what level. `bind` takes those settings in the
``--trace-config`` item form (``"level=TIMESTAMPS"``, ``"rate=1"``); they are checked here, a
pure function, and sent once the model is ready (`ServerControl.set_model_trace`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from pytriton.exceptions import PyTritonBadParameterError

_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
_COUNTS = {"rate": ("trace_rate", 1), "count": ("trace_count", -1), "log_frequency": ("log_frequency", 0)}
SETTINGS = ("level", *_COUNTS)
"""The settings a model may have of its own (the file and the mode are the server's)."""


def model_trace_settings(model_name: str, items: Optional[Sequence[str]]) -> Optional[Dict[str, Any]]:
    """Triton's per-model trace setting body for `items`, or None when there are none.

    ``level`` may be given more than once (``TIMESTAMPS`` and ``TENSORS``); ``rate`` traces one
    request in N; ``count`` stops after N traces (-1: no end); ``log_frequency`` writes the
    file every N traces (0: at the end).

    Raises:
        PyTritonBadParameterError: an item that is not ``<setting>=<value>`` for one of
            `SETTINGS`, naming the model, the item and what is allowed.
    """
    if items is None:
        return None
    where = f"trace_config of model '{model_name}'"
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise PyTritonBadParameterError(
            f"{where} must be a list of '<setting>=<value>' strings (e.g. ['level=TIMESTAMPS', 'rate=1']), "
            f"got {items!r}"
        )
    settings: Dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=") if isinstance(item, str) else ("", "", "")
        key, value = key.strip().replace("-", "_"), value.strip()  # log-frequency, as --trace-config writes it
        if key == "level" and value.upper() in _LEVELS:
            settings.setdefault("trace_level", []).append(value.upper())
        elif key in _COUNTS and _is_count(value, _COUNTS[key][1]):
            settings[_COUNTS[key][0]] = str(int(value))
        elif key in SETTINGS:
            expected = "one of " + ", ".join(_LEVELS) if key == "level" else f"an integer >= {_COUNTS[key][1]}"
            raise PyTritonBadParameterError(f"{where}: {item!r} has a bad value; {key} must be {expected}")
        else:
            raise PyTritonBadParameterError(
                f"{where}: {item!r} is not '<setting>=<value>' for a setting a model may have of its own "
                f"({', '.join(SETTINGS)}); the trace file and mode are the server's: "
                "TritonConfig(trace_config=['triton,file=/path/trace.json'])"
            )
    return settings or None


def _is_count(value: str, minimum: int) -> bool:
    try:
        return int(value) >= minimum
    except ValueError:
        return False
