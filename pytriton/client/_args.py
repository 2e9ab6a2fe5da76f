"""Checks of the arguments every client flavour takes (pure).

Shared so that the sync, futures and asyncio clients refuse the same values with the
same words, at construction, before any thread or connection exists.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from pytriton.client.core_request import CoreRequest
from pytriton.client.exceptions import PyTritonClientValueError
from pytriton.client.model_config import ClientModelConfig
from pytriton.client.url import TritonUrl, parse_url

DEFAULT_INIT_TIMEOUT_S = 300.0
DEFAULT_INFERENCE_TIMEOUT_S = 60.0


def timeout_arg(name: str, value: float | None, default: float) -> float:
    """``value`` in seconds, ``default`` for None; anything but a positive number is refused."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PyTritonClientValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)


def model_args(model_name: str, model_version: str | int | None) -> tuple[str, str]:
    """The model name and version as ``tritonclient`` wants them (version ``""``: the server's choice)."""
    if not isinstance(model_name, str) or not model_name:
        raise PyTritonClientValueError(f"model_name must be a non-empty string, got {model_name!r}")
    if model_version is None:
        return model_name, ""
    if isinstance(model_version, bool) or not isinstance(model_version, (str, int)):
        raise PyTritonClientValueError(f"model_version must be a string, an integer or None, got {model_version!r}")
    return model_name, str(model_version)


def mapping_arg(name: str, value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``parameters`` and ``headers`` must be mappings (or None)."""
    if value is not None and not isinstance(value, Mapping):
        raise PyTritonClientValueError(f"{name} must be a mapping or None, got {type(value).__name__}")
    return value


def sequence_args(sequence_id: int | str, sequence_start: bool, sequence_end: bool) -> dict[str, Any]:
    """tritonclient's ``sequence_id``/``sequence_start``/``sequence_end`` keywords, checked;
    empty for a request that belongs to no sequence (id 0, Triton's "none")."""
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, (int, str)) or sequence_id in ("",) or (
        isinstance(sequence_id, int) and not 0 <= sequence_id < 2**64
    ):
        raise PyTritonClientValueError(
            f"sequence_id must be an integer in 0..2**64-1 or a non-empty string, got {sequence_id!r}"
        )
    for name, flag in (("sequence_start", sequence_start), ("sequence_end", sequence_end)):
        if not isinstance(flag, bool):
            raise PyTritonClientValueError(f"{name} must be True or False, got {flag!r}")
    if sequence_id == 0:
        if sequence_start or sequence_end:
            raise PyTritonClientValueError("sequence_start and sequence_end need a sequence_id (0 means no sequence)")
        return {}
    return {"sequence_id": sequence_id, "sequence_start": sequence_start, "sequence_end": sequence_end}


def priority_arg(name: str, value: Any) -> int:
    """A request's priority level: an integer in 0..2**64-1 (0: the model's default level)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise PyTritonClientValueError(
            f"{name} must be a priority level: an integer >= 0 (1 the highest, 0 the model's default level), "
            f"got {value!r}"
        )
    return value


def check_priority(config: ClientModelConfig | None, priority: int) -> None:
    """Refuse a priority the model would not honour: Triton orders its dynamic batcher's queue by
    the request's level and takes any other value (0, or one above the model's levels) for the
    default level, without a word; a model without priority levels ignores it.

    A configuration that names no backend and no batcher (an ensemble, whose steps have their
    own queues, or one the user gave without them) is not judged.

    Raises:
        PyTritonClientValueError: `priority` is not 0 and not one of the model's levels.
    """
    if priority == 0 or config is None:
        return
    batcher = config.batcher
    if batcher is None and not config.backend:
        return
    if batcher is not None and batcher.priority_levels:
        if priority <= batcher.priority_levels:
            return
        raise PyTritonClientValueError(
            f"Model {config.model_name!r} has priority levels 1..{batcher.priority_levels} (1 the highest; 0 for its "
            f"default, {batcher.default_priority_level}), got priority={priority}; Triton would take it for the "
            "default level"
        )
    raise PyTritonClientValueError(
        f"Model {config.model_name!r} has no priority levels, so priority={priority} would be ignored: give the model "
        "DynamicBatcher(priority_levels=..., default_priority_level=...) or send priority 0"
    )


SEQUENCE_KEYS = ("sequence_id", "sequence_start", "sequence_end")
"""Triton's own request parameters that carry a request's sequence (see `sequence_args`)."""


def with_sequence(parameters: Mapping[str, Any] | None, sequence: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The request parameters of a stream, with its sequence among them under Triton's names:
    the streaming protocols carry a sequence as parameters (each encoder puts them where the
    protocol wants them)."""
    if not sequence:
        return parameters
    return {**(parameters or {}), **sequence}


def pool_arg(name: str, value: int | None, minimum: int) -> int | None:
    """A worker or queue count: None, or an integer >= ``minimum``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise PyTritonClientValueError(f"{name} must be an integer >= {minimum} or None, got {value!r}")
    return value


def token_arg(access_token: str | None) -> str | None:
    """The access token: None, or a non-empty string without line breaks (it goes into a header)."""
    if access_token is None:
        return None
    if not isinstance(access_token, str) or not access_token or any(c in access_token for c in "\r\n"):
        raise PyTritonClientValueError("access_token must be a non-empty string without line breaks, or None")
    return access_token


def with_auth(auth: Mapping[str, str], headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """A fresh dict of the user's headers plus the token's (tritonclient writes into the dict it gets)."""
    if not auth and not headers:
        return None
    merged = dict(headers or {})
    merged.update(auth)
    return merged


@dataclasses.dataclass(frozen=True)
class ClientArgs:
    """The checked arguments common to every client flavour.

    Attributes:
        url: the parsed server address (its scheme picks the protocol).
        model_name: the model's name.
        model_version: its version as ``tritonclient`` wants it, ``""`` for the server's choice.
        init_timeout_s: the longest wait for the server and model to be ready.
        inference_timeout_s: the longest wait for one inference.
        model_config: the model's configuration when the user gave it.
        access_token: the token for servers that restrict their APIs.
        priority: the priority level of the requests that set none (0: the model's default level).
    """

    url: TritonUrl
    model_name: str
    model_version: str
    init_timeout_s: float
    inference_timeout_s: float
    model_config: ClientModelConfig | None = None
    access_token: str | None = None
    priority: int = 0

    def request(
        self,
        inputs: Mapping[str, Any],
        parameters: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        request_id: str,
        sequence: Mapping[str, Any] | None = None,
        priority: int | None = None,
        config: ClientModelConfig | None = None,
    ) -> CoreRequest:
        """One request to this model, its parameters and headers checked, bounded by ``inference_timeout_s``.

        `priority`: the request's own level (checked by `priority_arg`), None for the client's;
        judged against `config`, the model's configuration, by `check_priority`.
        """
        level = self.priority if priority is None else priority
        check_priority(config, level)
        return CoreRequest(
            self.model_name,
            self.model_version,
            inputs,
            parameters=mapping_arg("parameters", parameters),
            headers=mapping_arg("headers", headers),
            timeout_s=self.inference_timeout_s,
            request_id=request_id,
            sequence=sequence or {},
            priority=level,
        )


def client_args(
    url: str,
    model_name: str,
    model_version: str | int | None,
    *,
    init_timeout_s: float | None,
    inference_timeout_s: float | None,
    model_config: ClientModelConfig | None = None,
    access_token: str | None = None,
    priority: int = 0,
) -> ClientArgs:
    """Check the common client arguments once, with the same words for every flavour.

    Raises:
        PyTritonClientInvalidUrlError: the URL is not understood.
        PyTritonClientValueError: another argument is wrong.
    """
    parsed_url = parse_url(url)
    name, version = model_args(model_name, model_version)
    if model_config is not None and not isinstance(model_config, ClientModelConfig):
        raise PyTritonClientValueError(
            f"model_config must be a ClientModelConfig or None, got {type(model_config).__name__}"
        )
    return ClientArgs(
        url=parsed_url,
        model_name=name,
        model_version=version,
        init_timeout_s=timeout_arg("init_timeout_s", init_timeout_s, DEFAULT_INIT_TIMEOUT_S),
        inference_timeout_s=timeout_arg("inference_timeout_s", inference_timeout_s, DEFAULT_INFERENCE_TIMEOUT_S),
        model_config=model_config,
        access_token=token_arg(access_token),
        priority=priority_arg("priority", priority),
    )


class ModelLoad(NamedTuple):
    """A checked ``load_model`` request: the configuration as JSON text, the model folder's files."""

    config: str | None
    files: dict[str, bytes] | None


def load_args(config: str | Mapping[str, Any] | None, files: Mapping[str, bytes] | None) -> ModelLoad:
    """Check the arguments of ``load_model``: Triton's load request as ``tritonclient`` sends it.

    Args:
        config: the model configuration as JSON text; a mapping is encoded to JSON here.
        files: ``"file:<path in the model folder>"`` to the file's bytes; needs ``config``.

    Returns:
        The configuration as JSON text (or None) and the files as a fresh dict (or None).

    Raises:
        PyTritonClientValueError: a wrong type, a key without the ``file:`` prefix, or files without config.
    """
    if isinstance(config, Mapping):
        config = json.dumps(config)
    elif config is not None and not isinstance(config, str):
        raise PyTritonClientValueError(
            f"config must be the model configuration as JSON text, a mapping or None, got {type(config).__name__}"
        )
    if files is None:
        return ModelLoad(config, None)
    if not isinstance(files, Mapping):
        raise PyTritonClientValueError(
            f"files must be a mapping of 'file:<path>' to bytes or None, got {type(files).__name__}"
        )
    for key, content in files.items():
        if not isinstance(key, str) or not key.startswith("file:"):
            raise PyTritonClientValueError(
                f"files keys must be 'file:<path in the model folder>' (e.g. 'file:1/model.py'), got {key!r}"
            )
        if not isinstance(content, (bytes, bytearray)):
            raise PyTritonClientValueError(f"files[{key!r}] must be bytes, got {type(content).__name__}")
    if files and config is None:
        raise PyTritonClientValueError(
            "files needs config: Triton loads a model folder given as files only with its configuration"
        )
    return ModelLoad(config, {key: bytes(content) for key, content in files.items()})


def clone_kwargs(existing_client: Any) -> dict[str, Any]:
    """The constructor arguments of a client like ``existing_client`` (for ``from_existing_client``).

    The new client talks to the same model with the same limits, token, priority and ``shared_memory``
    (when not False: the caller drops it for a streaming client, which takes none); a configuration the
    existing one already holds is handed over, with no new readiness wait, so the new client
    needs no request before its first inference.

    Raises:
        PyTritonClientValueError: ``existing_client`` is not one of this package's clients.
    """
    args = getattr(existing_client, "_args", None)
    if not isinstance(args, ClientArgs):
        raise PyTritonClientValueError(
            "existing_client must be a pytriton client (ModelClient, DecoupledModelClient, AsyncioModelClient, "
            f"AsyncioDecoupledModelClient or FuturesModelClient), got {type(existing_client).__name__}"
        )
    kwargs: dict[str, Any] = {
        "url": str(args.url),
        "model_name": args.model_name,
        "model_version": args.model_version or None,
        "init_timeout_s": args.init_timeout_s,
        "inference_timeout_s": args.inference_timeout_s,
        "access_token": args.access_token,
        "priority": args.priority,
    }
    # The one-response clients keep their shared-memory choice in their transport, the futures client as its own.
    choice = getattr(existing_client, "_shm_choice", None) or getattr(
        getattr(existing_client, "_transport", None), "choice", None)
    if getattr(choice, "mode", False) is not False:
        kwargs["shared_memory"] = choice.mode  # type: ignore[union-attr]
    # The model clients keep the configuration as _model_config, the futures client shares its workers' one.
    known = getattr(existing_client, "_model_config", None) or getattr(existing_client, "_shared_config", None)
    if isinstance(known, ClientModelConfig):
        kwargs.update(model_config=known, ensure_model_is_ready=False)
    return kwargs
