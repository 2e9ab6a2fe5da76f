"""The versions of one model name in its config.pbtxt: which versions Triton serves, and whether
a new version can join those that serve.

Pure. Triton keeps one configuration per model name and, by default, serves only the highest
version found in the model's folder. pytriton writes the versions it binds as a ``specific``
version policy instead, and reloads the model when the set changes: Triton 2.51 then updates
the versions that stay in place (they go on serving, their instances untouched) and loads or
drops only the others, provided nothing but ``version_policy`` (and ``instance_group``, which
it would apply to the serving versions too) changed. So every version of a name must have the
same served configuration: `served_difference` says where a new one differs.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

from google.protobuf import text_format
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.repository.pbtxt import parse_pbtxt, to_pbtxt

VERSION_POLICY = "version_policy"

# What each served field is in the terms of `bind`, for the message of a refused version.
_FIELD_WORDS = {
    "input": "inputs",
    "output": "outputs",
    "max_batch_size": "max_batch_size (ModelConfig.batching, max_batch_size)",
    "dynamic_batching": "the dynamic batcher (ModelConfig.batcher)",
    "sequence_batching": "the sequence batcher (ModelConfig.batcher)",
    "instance_group": "the number of instances (callables in infer_func)",
    "model_transaction_policy": "decoupled (ModelConfig.decoupled)",
    "response_cache": "response_cache (ModelConfig.response_cache)",
    "model_warmup": "model_warmup (ModelConfig.model_warmup)",
    "backend": "backend",
}
_PARAMETER_WORDS = {
    "pytriton.relayed": "whether a callable is a coroutine (async def)",
    "pytriton.handlers": "the number of instances (callables in infer_func)",
}
_MAX_SHOWN = 240


def with_versions(config_text: str, versions: Iterable[int]) -> str:
    """`config_text` with a version policy that serves exactly `versions` (and no other folder).

    Raises:
        ValueError: `versions` is empty (Triton refuses a model with no version to load).
    """
    wanted = sorted(set(versions))
    if not wanted:
        raise ValueError("a model needs at least one version to serve")
    proto = parse_pbtxt(config_text)
    proto.ClearField(VERSION_POLICY)
    proto.version_policy.specific.versions.extend(wanted)
    return to_pbtxt(proto)


def served_versions(config_text: str) -> List[int]:
    """The versions a configuration's ``specific`` version policy names (empty: another policy)."""
    proto = parse_pbtxt(config_text)
    return sorted(proto.version_policy.specific.versions) if proto.version_policy.HasField("specific") else []


def served_difference(bound_text: str, new_text: str) -> Optional[Tuple[str, str, str]]:
    """The first served field in which two configurations of a name differ, version policy aside.

    Returns:
        None when a reload with `new_text` leaves the serving versions as they are; otherwise
        ``(field, bound value, new value)``, the field in the words of `bind`.
    """
    bound, new = parse_pbtxt(bound_text), parse_pbtxt(new_text)
    for proto in (bound, new):
        proto.ClearField(VERSION_POLICY)
    if bound == new:
        return None
    for field in pb.ModelConfig.DESCRIPTOR.fields:
        if field.name == "parameters":
            for key in sorted(set(bound.parameters) | set(new.parameters)):
                before, after = _parameter(bound, key), _parameter(new, key)
                if before != after:
                    return _PARAMETER_WORDS.get(key, f"parameter {key}"), before, after
            continue
        before, after = _shown(bound, field.name), _shown(new, field.name)
        if before != after:
            return _FIELD_WORDS.get(field.name, field.name), before, after
    return "configuration", _clip(to_pbtxt(bound)), _clip(to_pbtxt(new))


def refusal(model_name: str, bound_version: int, version: int, difference: Tuple[str, str, str]) -> str:
    """The message of a version refused for `difference` (from `served_difference`)."""
    field, before, after = difference
    return (
        f"model '{model_name}' version {version} cannot serve beside version {bound_version}: they differ in "
        f"{field}, {after} where version {bound_version} has {before}. The versions of one model name share one "
        "Triton configuration, so only their callables may differ: unbind the served version first "
        "(Triton.unbind), or bind the new one under another model name"
    )


def _parameter(proto: pb.ModelConfig, key: str) -> str:
    return proto.parameters[key].string_value if key in proto.parameters else "(none)"


def _shown(proto: pb.ModelConfig, name: str) -> str:
    """One field of `proto` as one line of text format; ``(none)`` when it is unset."""
    value = getattr(proto, name)
    if isinstance(value, Message):
        return "{" + _clip(_line(value)) + "}" if proto.HasField(name) else "(none)"
    if isinstance(value, (str, bytes, int, float)):
        return _clip(repr(value))
    if not len(value):  # a repeated field
        return "(none)"
    return _clip("[" + ", ".join("{" + _line(item) + "}" if isinstance(item, Message) else repr(item)
                                 for item in value) + "]")


def _line(message: object) -> str:
    return str(text_format.MessageToString(message, as_one_line=True)).strip()


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
