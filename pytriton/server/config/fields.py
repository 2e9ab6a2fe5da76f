"""How each kind of `TritonConfig` field is checked, and read from text (pure).

A field's kind follows from its type annotation (`kind_of`): ``Optional[int]`` is an integer,
``Optional[Sequence[str]]`` a list of items, and so on. Each kind has two functions: `check`
type-checks a value given in Python and returns it normalised (paths as `pathlib.Path`, lists as
tuples, so equal configs compare equal); `parse` reads the text of an environment variable or
of a `TritonConfig.from_dict` value. Range rules between fields live with `TritonConfig`.

Text rules:

- integers and floats are parsed as numbers, paths taken as given;
- booleans accept ``true/1/yes/on`` and ``false/0/no/off``, case-insensitive;
- lists are split on ``;``, because their items contain commas;
- CUDA pool sizes are an integer (GPU 0) or ``;``-separated ``<device>:<bytes>`` pairs.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import typing
from typing import Any, Callable, Dict, Mapping, Sequence, Tuple, Union

from pytriton.exceptions import PyTritonBadParameterError

TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


@dataclasses.dataclass(frozen=True)
class Kind:
    """How one kind of field is type-checked and parsed from text."""

    description: str
    check: Callable[[str, Any], Any]  # (field name, value) -> normalised value, or raises
    parse: Callable[[str], Any]  # text -> value, or raises ValueError
    is_list: bool = False  # its values are tuples of items, one flag each


def bad(name: str, value: Any, allowed: str) -> PyTritonBadParameterError:
    """The error for field `name`: it names the field, the value and what is allowed."""
    return PyTritonBadParameterError(f"TritonConfig.{name}={value!r} is invalid: expected {allowed}")


def _check_int(name: str, value: Any) -> int:
    # bool is an int subclass; `http_port=True` is a mistake, not port 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, value, "an integer")
    return value


def _check_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(name, value, "a number")
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad(name, value, "True or False")
    return value


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise bad(name, value, "a string")
    return value


def _check_path(name: str, value: Any) -> pathlib.Path:
    if isinstance(value, pathlib.Path):
        return value
    if isinstance(value, (str, os.PathLike)):
        return pathlib.Path(value)
    raise bad(name, value, "a path (pathlib.Path or str)")


def _check_str_list(name: str, value: Any) -> Tuple[str, ...]:
    # A lone string would otherwise be iterated character by character.
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise bad(name, value, "a list of strings")
    if not all(isinstance(item, str) for item in value):
        raise bad(name, value, "a list of strings")
    return value if isinstance(value, tuple) else tuple(value)


def _check_str_or_list(name: str, value: Any) -> Tuple[str, ...]:
    # Published PyTriton types these fields as one string; a list gives several restrictions.
    if isinstance(value, str):
        return (value,)
    if isinstance(value, bytes) or not isinstance(value, Sequence) or not all(isinstance(i, str) for i in value):
        raise bad(name, value, "a string or a list of strings")
    return value if isinstance(value, tuple) else tuple(value)


def _check_cuda_pool(name: str, value: Any) -> Union[int, Dict[int, int]]:
    if isinstance(value, Mapping):
        pools = dict(value)  # a copy: the frozen config must not change with the caller's dict
        for device, size in pools.items():
            if any(isinstance(number, bool) or not isinstance(number, int) for number in (device, size)):
                raise bad(name, value, "a mapping of integer device ids to integer byte sizes")
        return pools
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, value, "an integer byte size (for GPU 0) or a mapping {device_id: byte_size}")
    return value


def parse_bool(text: str) -> bool:
    """``true/1/yes/on`` or ``false/0/no/off``, any case; anything else raises ValueError."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"expected one of {'/'.join(sorted(TRUE_WORDS))} or {'/'.join(sorted(FALSE_WORDS))}")


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _parse_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("expected a number") from None


def split_items(text: str) -> Tuple[str, ...]:
    """The `;`-separated items of a list value, stripped, empty ones dropped."""
    return tuple(item.strip() for item in text.split(";") if item.strip())


def _parse_cuda_pool(text: str) -> Union[int, Dict[int, int]]:
    text = text.strip()
    if ":" not in text:
        try:
            return int(text)
        except ValueError:
            raise ValueError("expected an integer byte size or '<device>:<bytes>' pairs separated by ';'") from None
    pools: Dict[int, int] = {}
    for item in split_items(text):
        device, _, size = item.partition(":")
        try:
            pools[int(device)] = int(size)
        except ValueError:
            raise ValueError(f"expected '<device>:<bytes>' pairs separated by ';', got item {item!r}") from None
    return pools


_KINDS_BY_TYPE: Mapping[Any, Kind] = {
    int: Kind("integer", _check_int, _parse_int),
    float: Kind("number", _check_float, _parse_float),
    bool: Kind("boolean", _check_bool, parse_bool),
    str: Kind("string", _check_str, lambda text: text.strip()),
    pathlib.Path: Kind("path", _check_path, lambda text: pathlib.Path(text.strip())),
    Sequence[str]: Kind("list", _check_str_list, split_items, is_list=True),
    Union[str, Sequence[str]]: Kind("string or list", _check_str_or_list, split_items, is_list=True),
    Union[int, Mapping[int, int]]: Kind("CUDA pool sizes", _check_cuda_pool, _parse_cuda_pool),
}


def kind_of(annotation: Any) -> Kind:
    """The kind of a field annotated ``Optional[X]`` (every `TritonConfig` field is)."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    inner = args[0] if len(args) == 1 else Union[tuple(args)]
    return _KINDS_BY_TYPE[inner]


def plain(value: Any) -> Any:
    """A normalised field value as plain Python data: tuples as lists, mappings as dicts.

    `TritonConfig.to_dict` gives these, so its result can be edited, dumped to JSON (paths
    aside) and given back to `TritonConfig.from_dict`.
    """
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value
