"""The access-token headers of a restricted server, as published PyTriton's helpers name them.

A server that restricts some of its APIs (`TritonSecurityConfig`) checks the header
``triton-access-token``; over gRPC Triton expects it as ``triton-grpc-protocol-triton-access-token``
metadata. The clients add it themselves when given ``access_token=``; these helpers are for code
that builds its own requests (``curl``-style HTTP calls, raw ``tritonclient``) or that receives
headers and must find the token in them.

Both rest on the header rule the clients already use (`pytriton.access_token.auth_headers`), so
there is one spelling of the header in the client side.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

from pytriton.access_token import ACCESS_TOKEN_HEADER, GRPC_HEADER_PREFIX, auth_headers
from pytriton.client.exceptions import PyTritonClientValueError

_PROTOCOLS = ("http", "grpc")


class PyTritonClientAuthHeaderError(PyTritonClientValueError, ValueError):
    """A token or protocol given to these helpers is wrong, or two headers carry different tokens.

    Also a ``ValueError``, which is what published PyTriton raises here, so ``except ValueError``
    written for it catches this.
    """


def create_auth_headers(access_token: Optional[str], protocol: str) -> Dict[str, str]:
    """The header that carries `access_token` to a restricted server over `protocol`.

    Args:
        access_token: The server's token (``Triton.get_access_token()`` or
            ``TritonSecurityConfig.access_token``); must not be empty.
        protocol: ``"http"`` or ``"grpc"``, in any letter case.

    Returns:
        ``{"triton-access-token": token}`` for HTTP, or
        ``{"triton-grpc-protocol-triton-access-token": token}`` for gRPC metadata.

    Raises:
        PyTritonClientAuthHeaderError: the token is None, empty or not a string, or the protocol
            is neither ``"http"`` nor ``"grpc"``.
    """
    if not isinstance(access_token, str) or not access_token:
        raise PyTritonClientAuthHeaderError(
            f"access_token={access_token!r} is invalid: expected a non-empty string (the server's access token)"
        )
    if any(char in access_token for char in "\r\n"):
        raise PyTritonClientAuthHeaderError(
            "access_token is invalid: it contains a line break, which cannot travel in a header"
        )
    scheme = protocol.lower() if isinstance(protocol, str) else protocol
    if scheme not in _PROTOCOLS:
        raise PyTritonClientAuthHeaderError(f"protocol={protocol!r} is invalid: expected 'http' or 'grpc'")
    return auth_headers(scheme, access_token)


def extract_access_token_from_headers(headers: Optional[Mapping[str, str]]) -> Optional[str]:
    """The access token carried by `headers`, in either protocol's header, or None.

    Header names are compared without regard to letter case, as HTTP does. When both the HTTP
    and the gRPC header are present they must carry the same token.

    Args:
        headers: Header name -> value, or None.

    Returns:
        The token, or None when neither header is present (or `headers` is None or empty).

    Raises:
        PyTritonClientAuthHeaderError: the two headers carry different tokens.
    """
    if not headers:
        return None
    http_name = ACCESS_TOKEN_HEADER
    grpc_name = GRPC_HEADER_PREFIX + ACCESS_TOKEN_HEADER
    found: Dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower() if isinstance(name, str) else name
        if lowered in (http_name, grpc_name) and value:
            found[lowered] = value
    http_token, grpc_token = found.get(http_name), found.get(grpc_name)
    if http_token is not None and grpc_token is not None and http_token != grpc_token:
        # The tokens themselves are secrets: name the headers, never their values.
        raise PyTritonClientAuthHeaderError(
            f"headers '{http_name}' and '{grpc_name}' carry different access tokens: expected one token, sent "
            "in either header or the same in both"
        )
    return http_token if http_token is not None else grpc_token
