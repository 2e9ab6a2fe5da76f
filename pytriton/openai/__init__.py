"""An OpenAI-compatible API for callables served by Triton (docs/openai.md).

Setup: `Triton.bind_chat` and `Triton.bind_embeddings` (`pytriton.openai.binding`) bind a text
callable as a model whose tensors follow `pytriton.openai.convention`; ``TritonConfig(openai_port=N)``
starts the front (`pytriton.openai.front`) with the server. One request: client -> the front's
route (`pytriton.openai.handlers`, checks in `pytriton.openai.requests`) -> Triton over gRPC
(`pytriton.openai.link`) -> the model -> pieces -> OpenAI's answer (`pytriton.openai.answers`).

The front needs the ``openai`` extra (``pip install 'aiohttp>=3.9'``, `EXTRA_INSTALL`): aiohttp 3.9 or
newer, whose handlers are cancelled when their client disconnects.
"""

from __future__ import annotations

from typing import Any, Optional

from pytriton.environment import OPENAI_API_KEY as API_KEY_ENV
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.install_hints import OPENAI_EXTRA

__all__ = ["API_KEY_ENV", "EXTRA_INSTALL", "check_extra", "require_extra", "start_front"]

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


def start_front(config: Any, security: Any, access_token: Optional[str], bindings: Any) -> Any:
    """Start the front for a server started with `config` (None when ``openai_port`` is unset).

    aiohttp is imported here, only where a front runs.
    """
    if config.openai_port is None:
        return None
    from pytriton.openai.front import OpenAIFront
    from pytriton.openai.measures import FrontMeasures

    grpc_host = config.grpc_address if config.grpc_address not in (None, "", "0.0.0.0", "::") else "127.0.0.1"
    grpc_host = f"[{grpc_host}]" if ":" in grpc_host else grpc_host
    front = OpenAIFront(port=config.openai_port, host=config.http_address, access_token=access_token,
                        grpc_address=f"{grpc_host}:{config.effective_grpc_port}",
                        api_key=security.openai_api_key, observe=FrontMeasures(bindings).observe)
    front.start()
    return front
