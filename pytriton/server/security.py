"""Who may call which tritonserver API -> restriction options of the argv.

Triton can refuse any of its nine API groups to requests that lack a chosen header
(``--http-restricted-api`` / ``--grpc-restricted-protocol``). A server bound to a public address
would otherwise let anyone load and unload models, read statistics, change logging and tracing,
or register shared memory. So the library restricts those administrative groups by default to
requests carrying ``triton-access-token: <token>``; the groups an ordinary client needs
(inference, health, metadata, model configuration) stay open.

The token is settled when `TritonSecurityConfig` is built, so a script can read
``config.access_token`` before any server starts and hand it to its clients; a server built
from the config uses exactly that token (`Triton.get_access_token()` returns it). Where it
comes from, first match wins: the ``access_token`` argument; the environment variable
``PYTRITON_ACCESS_TOKEN`` as it is when the config is built (how a Kubernetes Secret reaches
the server without the script reading it); a fresh random token. When nothing is restricted
(``restricted_endpoints=[]``) and neither of the first two gives one, the token stays None:
no API needs it.

Pure: `TritonSecurityConfig` is data, `restricted_config` turns it into `TritonConfig` items that
`pytriton.server.argv.build_argv` writes. Merge rule with items the user wrote into
`TritonConfig.http_restricted_api` / `grpc_restricted_protocol` (or their environment
variables): the user's items win for every API they name; the security config restricts the
remaining endpoints with the library's token. Triton refuses an API restricted twice, and a user
who restricted an API explicitly meant that header and value.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import warnings
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from pytriton.access_token import ACCESS_TOKEN_HEADER
from pytriton.environment import ACCESS_TOKEN, OPENAI_API_KEY
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config import TritonConfig

LOGGER = logging.getLogger("pytriton.server")

TRITON_APIS: Tuple[str, ...] = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
"""The API groups tritonserver 2.51 can restrict, by the names its options use."""

DEFAULT_RESTRICTED_ENDPOINTS: Tuple[str, ...] = ("shared-memory", "model-repository", "statistics", "trace", "logging")
"""Restricted unless the user chooses: the groups that change or reveal the server, not the ones clients need."""

# The names published PyTriton exports from ``pytriton.triton``, with its types (a set, a list),
# so that code such as ``DEFAULT_PROTECTED_ENDPOINTS + ["inference"]`` runs unchanged. They are
# copies: the library itself reads the tuples above, so changing these changes nothing.
TRITON_ACCESS_HEADER: str = ACCESS_TOKEN_HEADER
"""Published name of `ACCESS_TOKEN_HEADER`."""
VALID_TRITON_ENDPOINTS: Set[str] = set(TRITON_APIS)
"""Published name of `TRITON_APIS`, as a set."""
DEFAULT_PROTECTED_ENDPOINTS: List[str] = list(DEFAULT_RESTRICTED_ENDPOINTS)
"""Published name of `DEFAULT_RESTRICTED_ENDPOINTS`, as a list in the same order."""

# Characters that survive every layer the token crosses: the `API:HEADER=VALUE` option, HTTP
# headers and gRPC metadata (printable ASCII). Covers hex, base64 and URL-safe base64 tokens.
_TOKEN_SHAPE = re.compile(r"^[A-Za-z0-9._~+/=-]+$")
_TOKEN_BYTES = 32


@dataclasses.dataclass(frozen=True)
class TritonSecurityConfig:
    """Which tritonserver APIs require an access token, and which token.

    Args:
        access_token: The token clients send as header ``triton-access-token`` (gRPC:
            ``triton-grpc-protocol-triton-access-token``). None: the value of the environment
            variable ``PYTRITON_ACCESS_TOKEN`` when it is set, else a new random token made here,
            at construction, so ``config.access_token`` can be handed to clients before the
            server starts. It stays None only when nothing is restricted.
        restricted_endpoints: Names of the API groups that require the token, among
            ``health``, ``metadata``, ``inference``, ``shared-memory``, ``model-config``,
            ``model-repository``, ``statistics``, ``trace`` and ``logging``. None: the default
            (``shared-memory``, ``model-repository``, ``statistics``, ``trace``, ``logging``);
            an empty list: nothing is restricted. Stored as a tuple in Triton's order, the
            default filled in.
        allow_unguarded_endpoints: whether the SageMaker and Vertex AI endpoints
            (`TritonConfig.allow_sagemaker`, `allow_vertex_ai`) may run although they do not check
            the token: Triton 2.51 applies ``restricted_endpoints`` to its HTTP and gRPC
            endpoints only. None (the default): they run, and a warning names the port and how
            to keep it private, as code written for the published PyTriton expects; True: they
            run quietly (you confirm the port is private); False: a server with restricted
            endpoints and either of those endpoints on is refused (`check_unguarded_endpoints`).
        openai_api_key: The key clients of the OpenAI-compatible API (``TritonConfig.openai_port``)
            must send as ``Authorization: Bearer <key>``. None: the value of ``PYTRITON_OPENAI_API_KEY``
            when it is set, else no key is checked (as local OpenAI-compatible servers do; a
            warning says so when the port listens beyond localhost).

    The token and the key are left out of `repr`, so that logging the config does not leak it. Two configs
    built without a token hold different tokens, so one config is one token: build the config
    once and give it to the server and, through ``access_token``, to the clients.
    """

    access_token: Optional[str] = dataclasses.field(default=None, repr=False)
    restricted_endpoints: Optional[Sequence[str]] = None
    allow_unguarded_endpoints: Optional[bool] = None
    openai_api_key: Optional[str] = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Validate both fields, fill in the default endpoints and settle the token."""
        token = self.access_token
        if token is not None and (not isinstance(token, str) or not _TOKEN_SHAPE.match(token)):
            shown = "<a string of the wrong characters>" if isinstance(token, str) else repr(token)
            raise PyTritonBadParameterError(
                f"TritonSecurityConfig.access_token={shown} is invalid: expected None (taken from "
                f"{ACCESS_TOKEN} or generated) or a non-empty string of letters, digits and '-._~+/='"
            )
        endpoints = _checked_endpoints(self.restricted_endpoints)
        object.__setattr__(self, "restricted_endpoints", endpoints)
        if self.allow_unguarded_endpoints is not None and not isinstance(self.allow_unguarded_endpoints, bool):
            raise PyTritonBadParameterError(
                f"TritonSecurityConfig.allow_unguarded_endpoints={self.allow_unguarded_endpoints!r} is invalid: "
                "expected None (warn), True (allow) or False (refuse)"
            )
        if token is None:
            object.__setattr__(self, "access_token", _default_token(os.environ, needed=bool(endpoints)))
        key = self.openai_api_key if self.openai_api_key is not None else os.environ.get(OPENAI_API_KEY) or None
        if key is not None and (not isinstance(key, str) or not key.strip() or not key.isprintable()):
            shown = "<a string with blanks or unprintable characters>" if isinstance(key, str) else repr(key)
            raise PyTritonBadParameterError(
                f"TritonSecurityConfig.openai_api_key={shown} is invalid: expected None (taken from "
                f"{OPENAI_API_KEY}, or no key) or a non-empty printable string")
        object.__setattr__(self, "openai_api_key", key)

    @property
    def effective_restricted_endpoints(self) -> Tuple[str, ...]:
        """The API groups that require the token (the same as `restricted_endpoints`, as a tuple)."""
        return tuple(self.restricted_endpoints or ())


def _checked_endpoints(endpoints: Optional[Sequence[str]]) -> Tuple[str, ...]:
    """The chosen API groups in Triton's order without repeats; the default for None."""
    if endpoints is None:
        return DEFAULT_RESTRICTED_ENDPOINTS
    # A lone string would otherwise be read character by character.
    if isinstance(endpoints, (str, bytes)) or not isinstance(endpoints, Iterable):
        raise PyTritonBadParameterError(
            f"TritonSecurityConfig.restricted_endpoints={endpoints!r} is invalid: expected a list of API names "
            f"among {', '.join(TRITON_APIS)} (e.g. [{endpoints!r}] for one), or None for the default"
        )
    chosen = list(endpoints)
    unknown = [name for name in chosen if name not in TRITON_APIS]
    if unknown:
        raise PyTritonBadParameterError(
            f"Invalid endpoint names: {', '.join(map(str, unknown))} "
            f"(in TritonSecurityConfig.restricted_endpoints={chosen!r}). Valid endpoints are: {', '.join(TRITON_APIS)}"
        )
    return tuple(api for api in TRITON_APIS if api in chosen)


def _default_token(environ: Mapping[str, str], needed: bool) -> Optional[str]:
    """The token when none was given: `ACCESS_TOKEN` when set and not empty, else a fresh
    random one (URL-safe, 256 bits) if some API is restricted, else None."""
    from_env = environ.get(ACCESS_TOKEN, "").strip()
    if from_env:
        if not _TOKEN_SHAPE.match(from_env):  # the value itself is never shown: it is a secret
            raise PyTritonBadParameterError(
                f"the environment variable {ACCESS_TOKEN} holds an invalid access token: expected letters, "
                "digits and -._~+/= only"
            )
        return from_env
    return secrets.token_urlsafe(_TOKEN_BYTES) if needed else None


def resolve_access_token(security: TritonSecurityConfig) -> Optional[str]:
    """The token of a server built from `security`: the config's own, settled at construction.

    None only when the config restricts nothing and no token was given or set in the environment.
    """
    return security.access_token


def server_security(config: TritonConfig, security_config: object) -> TritonSecurityConfig:
    """The security of a server started with `config`: `security_config`, or the default one.

    Raises:
        PyTritonBadParameterError: `security_config` is neither a `TritonSecurityConfig` nor None,
            or it leaves endpoints open that `config` turns on (`check_unguarded_endpoints`).
    """
    security = security_config if security_config is not None else TritonSecurityConfig()
    if not isinstance(security, TritonSecurityConfig):
        raise PyTritonBadParameterError(
            f"security_config={security_config!r} is invalid: expected a TritonSecurityConfig or None"
        )
    check_unguarded_endpoints(config, security)
    return security


def claimed_apis(items: Optional[Sequence[str]]) -> Tuple[str, ...]:
    """The API names restricted by `"<api>[,<api>...]:<header>=<value>"` items, in order."""
    apis: list[str] = []
    for item in items or ():
        names, _, _ = item.partition(":")
        apis.extend(name.strip() for name in names.split(",") if name.strip())
    return tuple(apis)


def restriction_items(
    security: TritonSecurityConfig, access_token: Optional[str], user_items: Optional[Sequence[str]]
) -> Optional[Tuple[str, ...]]:
    """One protocol's restriction items: the user's, then the library's for the APIs they leave.

    Args:
        security: The restricted endpoints.
        access_token: The server's token (see `resolve_access_token`); None only when
            `security` restricts nothing.
        user_items: Items the user set in `TritonConfig` for this protocol, or None.

    Returns:
        The items to pass to Triton, or None when nothing is restricted.

    Raises:
        PyTritonBadParameterError: APIs to restrict but no token (Triton would take the
            literal text ``None`` as the token).
    """
    user = tuple(user_items or ())
    taken = set(claimed_apis(user))
    ours = [api for api in security.effective_restricted_endpoints if api not in taken]
    if ours and access_token is None:
        raise PyTritonBadParameterError(
            f"access_token=None is invalid while TritonSecurityConfig restricts {', '.join(ours)}: expected the "
            "config's token (TritonSecurityConfig.access_token)"
        )
    items = user + ((f"{','.join(ours)}:{ACCESS_TOKEN_HEADER}={access_token}",) if ours else ())
    return items or None


def check_unguarded_endpoints(
    config: TritonConfig, security: TritonSecurityConfig, environ: Optional[Mapping[str, str]] = None
) -> None:
    """Warn about, or refuse, the SageMaker and Vertex AI endpoints while APIs are restricted.

    Triton 2.51 checks the access token on its HTTP and gRPC endpoints only: requests to the
    SageMaker endpoint (inference, and in multi-model mode the loading and unloading of models)
    and to the Vertex AI endpoint (inference) reach the server without it, so turning one on
    opens what ``restricted_endpoints`` closes elsewhere. The published PyTriton starts such a
    server without a word, and code written for it must still start: by default
    (``allow_unguarded_endpoints=None``) this warns once per endpoint and port, loudly (a
    `UserWarning` and a log line); ``True`` confirms quietly; ``False`` refuses.

    Args:
        config: the merged server config.
        security: the server's security config.
        environ: the environment the server runs in (default `os.environ`): on Vertex AI itself
            (``AIP_*`` variables set) the warning says that Vertex's own authentication fronts
            the port.

    Raises:
        PyTritonBadParameterError: one of them is on, some API is restricted, and
            ``allow_unguarded_endpoints`` is False.
    """
    opened = [(name, port) for name, on, port in (
        ("SageMaker", config.allow_sagemaker, config.effective_sagemaker_port),
        ("Vertex AI", config.allow_vertex_ai, config.effective_vertex_ai_port),
    ) if on]
    restricted = security.effective_restricted_endpoints
    if not opened or not restricted or security.allow_unguarded_endpoints:
        return
    names = " and ".join(f"the {name} endpoint (port {port})" for name, port in opened)
    problem = (
        f"TritonConfig turns on {names}, which Triton 2.51 serves without the access-token check that "
        f"TritonSecurityConfig(restricted_endpoints={list(restricted)!r}) asks for on HTTP and gRPC: requests there "
        "need no token."
    )
    if security.allow_unguarded_endpoints is False:
        raise PyTritonBadParameterError(
            f"{problem} Refused because TritonSecurityConfig(allow_unguarded_endpoints=False). Keep that port private "
            "(a NetworkPolicy, no Service) and confirm with allow_unguarded_endpoints=True, or restrict nothing "
            "(restricted_endpoints=[])"
        )
    key = tuple(opened)
    if key in _WARNED_UNGUARDED:
        return
    _WARNED_UNGUARDED.add(key)
    environ = os.environ if environ is None else environ
    on_vertex = any(name.startswith("AIP_") for name in environ) and config.allow_vertex_ai
    where = (
        " Vertex AI's own authentication fronts its port in a Vertex AI deployment (AIP_* variables are set here), "
        "so only Vertex AI reaches it there; keep any other port of these private."
        if on_vertex else
        " Keep that port private (a NetworkPolicy, a firewall, no Service)."
    )
    message = (
        f"{problem}{where} Confirm with TritonSecurityConfig(allow_unguarded_endpoints=True) to silence this, "
        "or set it to False to refuse to start"
    )
    LOGGER.warning("%s", message)
    warnings.warn(message, UserWarning, stacklevel=4)


_WARNED_UNGUARDED: Set[Tuple[Tuple[str, int], ...]] = set()
"""The endpoint sets already warned about in this process: the warning is said once."""


def restricted_config(
    config: TritonConfig, security: TritonSecurityConfig, access_token: Optional[str]
) -> TritonConfig:
    """`config` with the security config's restrictions added for both HTTP and gRPC.

    Both protocols get the same API groups and token (Triton itself adds the gRPC header
    prefix), so a client's choice of protocol never opens a restricted API.
    """
    changes: dict[str, Any] = {
        "http_restricted_api": restriction_items(security, access_token, config.http_restricted_api),
        "grpc_restricted_protocol": restriction_items(security, access_token, config.grpc_restricted_protocol),
    }
    return dataclasses.replace(config, **changes)
