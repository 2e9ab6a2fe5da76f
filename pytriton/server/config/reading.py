"""Reading `TritonConfig` values from text: the `PYTRITON_TRITON_CONFIG_*` environment variables
and mappings such as config files (`TritonConfig.from_env`, `TritonConfig.from_dict`).

The rules for each field kind are in `pytriton.server.config.options`'s docstring and in
`pytriton.server.config.fields`. The functions take the config class as an argument, so that this
module needs nothing of `pytriton.server.config.options`, which imports it.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
import typing
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pytriton.environment import TRITON_CONFIG_PREFIX
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config.fields import Kind, kind_of

LOGGER = logging.getLogger("pytriton.server.config")

ENV_PREFIX = TRITON_CONFIG_PREFIX
"""Every environment variable read by `TritonConfig.from_env` starts with this prefix."""

_ENV_ALIASES: Mapping[str, str] = {"LOG_VERBOSITY": "log_verbose"}
"""Extra environment names (after the prefix) -> field. The field's own name wins over an alias."""

_INDEXED_VARIABLE = re.compile(r"^(?P<field>.+)_(?P<index>[0-9]+)$")
"""`<FIELD>_<n>`: one item of a list field (after the prefix)."""

def config_from_dict(config_class: Any, config: Mapping[str, Any]) -> Any:
    """`TritonConfig.from_dict` for `config_class` (see there)."""
    names = [field.name for field in dataclasses.fields(config_class)]
    values: Dict[str, Any] = {}
    for key, value in config.items():
        if key not in names:
            what = f"Key {key!r} given to TritonConfig.from_dict names no TritonConfig field"
            _warn_ignored(what, str(key), names)
            continue
        if value is None:
            continue
        values[key] = _from_text(config_class, key, value, f"TritonConfig.from_dict key {key!r}")
    return config_class(**values)


def config_from_env(config_class: Any, environ: Mapping[str, str]) -> Any:
    """`TritonConfig.from_env` for `config_class`, reading `environ` (see there)."""
    by_env_name = {field.name.upper(): field.name for field in dataclasses.fields(config_class)}
    values: Dict[str, Any] = {}
    sources: Dict[str, Tuple[str, str]] = {}
    indexed: Dict[str, List[Tuple[int, str, str]]] = {}  # field -> (index, variable, item)
    # Sorted so that warnings come out in a stable order.
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        raw = environ[variable]
        suffix = variable[len(ENV_PREFIX) :]
        name = by_env_name.get(suffix) or _ENV_ALIASES.get(suffix)
        if name is None:
            item_of = _list_field_of_indexed(config_class, suffix, by_env_name)
            if item_of is None:
                _warn_ignored(f"Environment variable {variable} names no TritonConfig field", suffix,
                              list(by_env_name) + list(_ENV_ALIASES), prefix=ENV_PREFIX)
            elif raw.strip():
                indexed.setdefault(item_of[0], []).append((item_of[1], variable, raw.strip()))
            continue
        if raw.strip() == "":
            continue
        value = _parse_env_value(config_class, variable, raw, name)
        if name in sources:
            # Only an alias and its field can meet here; the field's own name wins.
            values[name], sources[name] = _resolve_alias(name, (value, variable, raw), values[name], sources[name])
            continue
        values[name] = value
        sources[name] = (variable, raw)
    for name, items in indexed.items():
        # Each indexed variable is one whole item (it may hold a ';'), checked on its own.
        for _, variable, item in items:
            _checked(config_class, name, (item,), f"Environment variable {variable}={item!r}")
        values[name] = tuple(values.get(name, ())) + tuple(item for _, _, item in sorted(items))
    try:
        return config_class(**values)
    except PyTritonBadParameterError as exc:
        raise PyTritonBadParameterError(f"{exc.message} (set by {ENV_PREFIX}* environment variables)") from exc


_KINDS: Dict[Any, Mapping[str, Kind]] = {}


def field_kinds(config_class: Any) -> Mapping[str, Kind]:
    """Each field's kind (`pytriton.server.config.fields`), read once from `config_class`'s annotations."""
    kinds = _KINDS.get(config_class)
    if kinds is None:
        hints = typing.get_type_hints(config_class)
        kinds = _KINDS[config_class] = {name: kind_of(annotation) for name, annotation in hints.items()}
    return kinds


def _checked(config_class: type, name: str, value: Any, source: str) -> Any:
    """`value` for field `name` after the field's own checks; an error names `source`."""
    try:
        config_class(**{name: value})  # range checks of this field alone, so the error names the source
    except PyTritonBadParameterError as exc:
        raise PyTritonBadParameterError(f"{source} is invalid for TritonConfig.{name}: {exc.message}") from exc
    return value


def _parsed(config_class: type, name: str, text: str, source: str) -> Any:
    """`text` read as a value of field `name` and checked; an error names `source`."""
    try:
        value = field_kinds(config_class)[name].parse(text)
    except ValueError as exc:
        raise PyTritonBadParameterError(f"{source} is invalid for TritonConfig.{name}: {exc}") from exc
    return _checked(config_class, name, value, source)


def _parse_env_value(config_class: type, variable: str, raw: str, name: str) -> Any:
    """Parse one variable for field `name`, naming the variable and its value in any error."""
    return _parsed(config_class, name, raw, f"Environment variable {variable}={raw!r}")


def _from_text(config_class: type, name: str, value: Any, source: str) -> Any:
    """A `from_dict` value: taken as it is when the field accepts it, else read as text."""
    if not isinstance(value, str):
        return value  # the dataclass checks it and names the field
    try:
        return field_kinds(config_class)[name].check(name, value)  # a string field, a path, one restriction item
    except PyTritonBadParameterError:
        return _parsed(config_class, name, value, f"{source}={value!r}")


def _list_field_of_indexed(
    config_class: type, suffix: str, by_env_name: Mapping[str, str]
) -> Optional[Tuple[str, int]]:
    """``(field, index)`` when `suffix` is ``<LIST FIELD>_<n>``, else None."""
    match = _INDEXED_VARIABLE.match(suffix)
    if match is None:
        return None
    name = by_env_name.get(match.group("field"))
    if name is None or not field_kinds(config_class)[name].is_list:
        return None
    return name, int(match.group("index"))


def _resolve_alias(
    name: str, new: Tuple[Any, str, str], old_value: Any, old_source: Tuple[str, str]
) -> Tuple[Any, Tuple[str, str]]:
    """Pick between a field's own variable and its alias: the field's own name wins."""
    new_value, new_variable, new_raw = new
    canonical = ENV_PREFIX + name.upper()
    if new_variable == canonical:
        winner, loser = (new_value, (new_variable, new_raw)), (old_value, old_source)
    else:
        winner, loser = (old_value, old_source), (new_value, (new_variable, new_raw))
    if winner[0] != loser[0]:
        message = (
            f"Both {winner[1][0]}={winner[1][1]!r} and {loser[1][0]}={loser[1][1]!r} are set; "
            f"using {winner[1][0]} for TritonConfig.{name}"
        )
        LOGGER.warning("%s", message)
        warnings.warn(message, UserWarning, stacklevel=3)
    return winner


def _warn_ignored(what: str, given: str, known: Sequence[str], prefix: str = "") -> None:
    """Warn (and log) that `given` names nothing, most likely a typo; suggest the closest name."""
    close = difflib.get_close_matches(given, known, n=1)
    hint = f"; did you mean {prefix}{close[0]}?" if close else ""
    message = f"{what} and is ignored{hint}"
    LOGGER.warning("%s", message)
    warnings.warn(message, UserWarning, stacklevel=3)  # points at the caller of from_env / from_dict
