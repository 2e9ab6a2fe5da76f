"""The tensor convention of the models the OpenAI-compatible front serves (pure: no I/O).

The front (`pytriton.openai.front`) serves any Triton model whose tensors follow this
convention, whoever wrote it: `Triton.bind_chat` and `Triton.bind_embeddings` bind models that
do, a plain `Triton.bind` or a model written for Triton's Python backend may do as well. The
front recognises a model by its configuration alone, so the convention is all it needs to know.

Chat (serves ``/v1/chat/completions`` and ``/v1/completions``), a decoupled model:

- input ``messages``: BYTES, dims ``[1]``; the UTF-8 JSON array of the request's messages as
  sent (each a ``{"role": ..., "content": ..., ...}`` object);
- input ``params``: BYTES, dims ``[1]``; the UTF-8 JSON object of the request's other fields
  (``max_tokens``, ``temperature``, ``stop``, ``n``, unknown ones too; ``prompt`` for a completion);
- output ``piece``: BYTES, dims ``[1]``; each response carries one UTF-8 JSON object, a piece of
  the answer: ``{"content": str}``, ``{"tool_calls": [...]}``, ``{"finish_reason": str}``,
  ``{"usage": {"prompt_tokens": int, "completion_tokens": int}}``, or several keys at once. A
  piece with ``finish_reason`` ends its answer; the stream's final response ends it too.

Embeddings (serves ``/v1/embeddings``), a model that is not decoupled and batches
(``max_batch_size`` >= 1):

- input ``input``: BYTES, dims ``[1]``; one text per row, UTF-8;
- optional input ``dimensions``: INT32, dims ``[1]``; a model that declares it accepts the
  ``dimensions`` field (the wanted length of each embedding), others refuse it;
- output ``embedding``: FP32, FP16 or FP64, dims ``[-1]`` or ``[d]``; one row per text.

With ``max_batch_size`` >= 1 every tensor gets Triton's batch axis in front, as usual; the front
sends one conversation per chat request and up to ``max_batch_size`` texts per embeddings
request (a larger request is split into several).

A model of either kind may be multiplexed (``@multiplexed``; its configuration's
``pytriton.multiplex`` parameter, `pytriton.client_contract.PARAM_MULTIPLEX`): clients then name
``base:variant`` as the model, and the front sends ``base`` the variant in the request parameter
that parameter names.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pytriton.client_contract import multiplexing

CHAT_MESSAGES = "messages"
CHAT_PARAMS = "params"
CHAT_PIECE = "piece"
EMBED_INPUT = "input"
EMBED_DIMENSIONS = "dimensions"
EMBED_OUTPUT = "embedding"

CHAT = "chat"
EMBEDDINGS = "embeddings"

_FLOAT_TYPES = {"TYPE_FP32": "<f4", "TYPE_FP16": "<f2", "TYPE_FP64": "<f8"}
PIECE_KEYS = frozenset({"content", "tool_calls", "finish_reason", "usage", "role"})
"""The keys a piece may carry; anything else is refused, naming the model."""


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """What the front knows of one model that follows the convention."""

    name: str
    kind: str
    """`CHAT` or `EMBEDDINGS`."""
    version: str = ""
    max_batch_size: int = 0
    embedding_dtype: str = "<f4"
    """numpy's name of the embedding output's element type."""
    dimensions: bool = False
    """Whether the embeddings model takes the optional ``dimensions`` input."""
    variant_parameter: Optional[str] = None
    """For a multiplexed model: the request parameter that names the variant (else None)."""
    variants: Optional[Tuple[str, ...]] = None
    """For a multiplexed model that knows its variants ahead: them (None: its loader decides)."""
    variant: Optional[str] = None
    """The variant a request names (``base:variant``); None for the model itself."""

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0


def _tensors(config: Mapping[str, Any], key: str) -> Dict[str, Mapping[str, Any]]:
    return {str(t.get("name")): t for t in config.get(key) or ()}


def _is_single(tensor: Optional[Mapping[str, Any]], data_type: str) -> bool:
    if tensor is None or tensor.get("data_type") != data_type:
        return False
    dims = [int(d) for d in tensor.get("dims") or ()]
    return dims in ([1], [-1])


def served_model(config: Mapping[str, Any]) -> Optional[ServedModel]:
    """The model a Triton model configuration (as JSON, field names as in ``model_config.proto``)
    describes under the convention; None when it follows neither form."""
    found = _served(config)
    multiplexed = multiplexing(config.get("parameters") or {})
    if found is None or multiplexed is None:
        return found
    variants = multiplexed["variants"]
    return dataclasses.replace(found, variant_parameter=multiplexed["parameter"],
                               variants=tuple(variants) if variants is not None else None)


def _served(config: Mapping[str, Any]) -> Optional[ServedModel]:
    name = str(config.get("name", ""))
    inputs, outputs = _tensors(config, "input"), _tensors(config, "output")
    decoupled = bool((config.get("model_transaction_policy") or {}).get("decoupled", False))
    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    if (decoupled and _is_single(inputs.get(CHAT_MESSAGES), "TYPE_STRING")
            and _is_single(outputs.get(CHAT_PIECE), "TYPE_STRING")
            and (CHAT_PARAMS not in inputs or _is_single(inputs[CHAT_PARAMS], "TYPE_STRING"))
            and set(inputs) <= {CHAT_MESSAGES, CHAT_PARAMS}):
        return ServedModel(name, CHAT, max_batch_size=max_batch_size)
    embedding = outputs.get(EMBED_OUTPUT)
    dimensions = inputs.get(EMBED_DIMENSIONS)
    if (not decoupled and max_batch_size >= 1 and _is_single(inputs.get(EMBED_INPUT), "TYPE_STRING")
            and embedding is not None and embedding.get("data_type") in _FLOAT_TYPES
            and len(embedding.get("dims") or ()) == 1
            and (dimensions is None or _is_single(dimensions, "TYPE_INT32"))
            and set(inputs) <= {EMBED_INPUT, EMBED_DIMENSIONS}):
        return ServedModel(name, EMBEDDINGS, max_batch_size=max_batch_size,
                           embedding_dtype=_FLOAT_TYPES[str(embedding["data_type"])],
                           dimensions=dimensions is not None)
    return None


VARIANT_SEPARATOR = ":"
"""Between a multiplexed model's name and a variant's in the ``model`` field: ``base:variant``."""


def split_variant(name: str) -> Tuple[str, Optional[str]]:
    """``base:variant`` -> (``base``, ``variant``); a name without the separator -> (name, None)."""
    base, separator, variant = name.partition(VARIANT_SEPARATOR)
    return (base, variant) if separator and base and variant else (name, None)


def listed_names(model: ServedModel) -> List[str]:
    """What ``/v1/models`` lists of a model: its name, and ``name:variant`` for each variant it
    knows ahead (the variants its loader finds are served too, though not listed)."""
    return [model.name, *(f"{model.name}{VARIANT_SEPARATOR}{variant}" for variant in model.variants or ())]


def bytes_tensor(items: Sequence[bytes]) -> bytes:
    """Triton's raw form of a BYTES tensor: each element as a little-endian uint32 length, then its bytes."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def bytes_elements(raw: bytes) -> List[bytes]:
    """The elements of a BYTES tensor in Triton's raw form (`bytes_tensor`'s inverse).

    Raises:
        ValueError: the buffer is cut short.
    """
    found, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise ValueError("a BYTES tensor ends inside an element's length")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise ValueError("a BYTES tensor ends inside an element")
        found.append(raw[offset:offset + size])
        offset += size
    return found


def decode_piece(model_name: str, raw: bytes) -> Dict[str, Any]:
    """One ``piece`` element -> its dict, checked.

    Raises:
        ValueError: not a JSON object of the known keys with values of the right kinds; the
            message names the model, the bad value and what is expected.
    """
    try:
        piece = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"model '{model_name}' sent a piece that is not JSON ({raw[:80]!r}); "
                         "expected a UTF-8 JSON object such as {\"content\": \"...\"}") from exc
    return check_piece(model_name, piece)


def check_piece(model_name: str, piece: Any) -> Dict[str, Any]:
    """A piece (a dict, or a str standing for ``{"content": str}``), checked; see `decode_piece`."""
    if isinstance(piece, str):
        return {"content": piece}
    if not isinstance(piece, dict):
        raise ValueError(f"model '{model_name}' produced the piece {piece!r:.80}; expected a str or a dict "
                         f"with keys among {sorted(PIECE_KEYS)}")
    unknown = set(piece) - PIECE_KEYS
    if unknown:
        raise ValueError(f"model '{model_name}' produced a piece with unknown key(s) {sorted(unknown)}; "
                         f"expected keys among {sorted(PIECE_KEYS)}")
    for key, kind in (("content", str), ("tool_calls", list), ("finish_reason", str), ("usage", dict),
                      ("role", str)):
        if key in piece and piece[key] is not None and not isinstance(piece[key], kind):
            raise ValueError(f"model '{model_name}' produced a piece whose '{key}' is {piece[key]!r:.80}; "
                             f"expected a {kind.__name__}")
    usage = piece.get("usage")
    if usage is not None:
        for key, count in usage.items():
            if key not in ("prompt_tokens", "completion_tokens", "total_tokens") or not isinstance(count, int):
                raise ValueError(f"model '{model_name}' produced usage {usage!r:.120}; expected integer "
                                 "'prompt_tokens' and 'completion_tokens'")
    return piece
