"""An OpenAI-compatible API for callables served by Triton (docs/openai.md).

Setup: `Triton.bind_chat` and `Triton.bind_embeddings` (`pytriton.openai.binding`) bind a text
callable as a model whose tensors follow `pytriton.openai.convention`; ``TritonConfig(openai_port=N)``
starts the front with the server, in a process of its own (`pytriton.openai.front`), which the
serving process starts, watches and stops (`pytriton.openai.process`). One request: client -> the
front's route (`pytriton.openai.handlers`, checks in `pytriton.openai.requests`) -> Triton over
gRPC (`pytriton.openai.link`) -> the model -> pieces -> OpenAI's answer (`pytriton.openai.answers`).

The front needs the ``openai`` extra (``pip install 'aiohttp>=3.9'``, `EXTRA_INSTALL`): aiohttp 3.9 or
newer, whose handlers are cancelled when their client disconnects.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from pytriton.environment import OPENAI_API_KEY as API_KEY_ENV
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.install_hints import OPENAI_EXTRA
from pytriton.server.config.merge import is_loopback
from pytriton.server.ports import openai_endpoint

logger = logging.getLogger("pytriton.openai")

__all__ = ["API_KEY_ENV", "EXTRA_INSTALL", "check_extra", "require_extra", "spawn_front"]

EXTRA_INSTALL = OPENAI_EXTRA  # what works from any pytriton installation (pytriton is on no index)
_MIN_AIOHTTP = (3, 9)


def require_extra() -> None:
    """Check that what the front needs is installed.

    Raises:
        PyTritonBadParameterError: it is not; the message has the pip line.
    """
    try:
        import aiohttp
    except ImportError as exc:
        raise PyTritonBadParameterError(
            f"TritonConfig.openai_port needs the 'openai' extra, which is not installed: {EXTRA_INSTALL}") from exc
    version = tuple(int(part) for part in aiohttp.__version__.split(".")[:2] if part.isdigit())
    if version < _MIN_AIOHTTP:
        raise PyTritonBadParameterError(
            f"TritonConfig.openai_port needs aiohttp >= 3.9 (found {aiohttp.__version__}): {EXTRA_INSTALL}")


def check_extra(config: Any) -> None:
    """`require_extra` when `config` (a `TritonConfig`) sets ``openai_port``; nothing otherwise."""
    if getattr(config, "openai_port", None) is not None:
        require_extra()


def spawn_front(config: Any, security: Any, access_token: Optional[str], bindings: Any,
                on_fatal: Optional[Callable[[Any], None]] = None) -> Any:
    """Start the front's process for a server started with `config` (None when ``openai_port`` is
    unset); it listens once `open` is called on what this returns (a `pytriton.openai.process.FrontProcess`)."""
    if config.openai_port is None:
        return None
    from pytriton.openai.measures import FrontMeasures
    from pytriton.openai.process import FrontProcess

    grpc_host = config.grpc_address if config.grpc_address not in (None, "", "0.0.0.0", "::") else "127.0.0.1"
    grpc_host = f"[{grpc_host}]" if ":" in grpc_host else grpc_host
    _, host, _ = openai_endpoint(config) or ("", None, 0)
    if security.openai_api_key is None and not is_loopback(host or "0.0.0.0"):
        logger.warning("The OpenAI-compatible API on port %d (address %s) takes requests without an API key; "
                       "set TritonSecurityConfig(openai_api_key=...) or PYTRITON_OPENAI_API_KEY, or keep the "
                       "port private", config.openai_port, host or "0.0.0.0")
    public = [field for field, allowed, address in (("http_port", config.allow_http, config.http_address),
                                                    ("grpc_port", config.allow_grpc, config.grpc_address))
              if allowed is not False and not is_loopback(address or "0.0.0.0")]
    if security.openai_api_key is not None and public:
        logger.warning("The OpenAI-compatible API asks for its API key, but Triton's own %s serve the same models "
                       "without it on %s; TritonConfig(triton_on_localhost=True) keeps them on this machine "
                       "(docs/security.md)", " and ".join(public), "every interface" if config.http_address is None
                       else config.http_address)
    settings = {"port": config.openai_port, "host": host, "grpc_address": f"{grpc_host}:{config.effective_grpc_port}",
                "access_token": access_token, "api_key": security.openai_api_key}
    front = FrontProcess(settings, record=FrontMeasures(bindings).record, on_fatal=on_fatal)
    front.spawn()
    return front
