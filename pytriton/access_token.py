"""The header that carries a restricted server's access token: one definition for the clients and
for the library's own control calls to its server.

Triton lets the operator name any header when it restricts an API group
(``--http-restricted-api=<groups>:<header>=<token>``); pytriton always names this one, and over
gRPC Triton expects it with a protocol prefix, which it strips before comparing.
"""

from __future__ import annotations

from typing import Dict, Optional

ACCESS_TOKEN_HEADER = "triton-access-token"
"""The header a request carries its token in."""

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
"""The prefix Triton expects on gRPC restriction headers."""


def auth_headers(scheme: str, access_token: Optional[str]) -> Dict[str, str]:
    """The headers (HTTP) or metadata (gRPC, `scheme` ``"grpc"``) that carry `access_token`;
    empty without a token."""
    if access_token is None:
        return {}
    prefix = GRPC_HEADER_PREFIX if scheme == "grpc" else ""
    return {prefix + ACCESS_TOKEN_HEADER: access_token}
