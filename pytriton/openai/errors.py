"""Errors of the OpenAI-compatible front, in OpenAI's shape (pure).

Every refusal the front sends is ``{"error": {"message", "type", "param", "code"}}`` with the
status OpenAI's clients map to their exceptions: 400 bad request, 401 a wrong API key, 404 an
unknown model, 500 a callable that raised, 503 a server that is stopping. The message names the
model, the field, the bad value and what is expected, so the client's exception says it all.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          405: "invalid_request_error", 413: "invalid_request_error", 500: "server_error",
          503: "service_unavailable"}


class OpenAIError(Exception):
    """A refusal or a failure, sent to the client as OpenAI's error object with `status`."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def text(self) -> str:
        return json.dumps(self.body())


def bad_field(model: str, field: str, value: Any, expected: str) -> OpenAIError:
    """400 for one bad field: ``model 'm': field 'n' is 0; expected an integer from 1 to 128``."""
    shown = json.dumps(value)[:120] if _jsonable(value) else repr(value)[:120]
    where = f"model '{model}': " if model else ""
    return OpenAIError(400, f"{where}field '{field}' is {shown}; expected {expected}", param=field)


def missing_field(model: str, field: str, expected: str) -> OpenAIError:
    where = f"model '{model}': " if model else ""
    return OpenAIError(400, f"{where}field '{field}' is missing; expected {expected}", param=field)


def unknown_model(model: str, available: Any) -> OpenAIError:
    names = ", ".join(sorted(available)) or "none"
    return OpenAIError(404, f"The model '{model}' does not exist; the models served here are: {names}",
                       param="model", code="model_not_found")


def unknown_variant(name: str, model: str, variants: Any) -> OpenAIError:
    """404 for ``base:variant`` naming a variant the multiplexed model `model` does not list."""
    shown = ", ".join(sorted(variants)[:20]) + (f", ... ({len(variants)} in all)" if len(variants) > 20 else "")
    return OpenAIError(404, f"The model '{name}' does not exist: model '{model}' serves the variants {shown}",
                       param="model", code="model_not_found")


def wrong_kind(model: str, kind: str, endpoint: str) -> OpenAIError:
    article = "an" if kind[:1] in "aeiou" else "a"
    return OpenAIError(400, f"model '{model}' is {article} {kind} model; it does not serve {endpoint}", param="model")


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
