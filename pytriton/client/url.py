"""Parse the server address a user gives to a client (pure, no I/O).

First step of a request: the URL decides which protocol (HTTP or gRPC) the client speaks and
where. ``tritonclient`` wants a bare ``host:port`` and a protocol chosen by the module used, so
the scheme is split off here, once, and checked before anything touches the network.

TLS schemes (``https://``, ``grpcs://``) are refused with a clear message rather than half
supported: certificates and client keys would need options this client does not expose.
"""

from __future__ import annotations

import dataclasses
import urllib.parse

from pytriton.client.exceptions import PyTritonClientInvalidUrlError
from pytriton.constants import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT

DEFAULT_PORTS: dict[str, int] = {"http": DEFAULT_HTTP_PORT, "grpc": DEFAULT_GRPC_PORT}

_ACCEPTED = (
    "accepted forms: 'host', 'host:port', 'http://host[:port]', 'grpc://host[:port]' "
    f"(default port {DEFAULT_PORTS['http']} for http, {DEFAULT_PORTS['grpc']} for grpc; "
    "a URL without scheme uses http)"
)


@dataclasses.dataclass(frozen=True)
class TritonUrl:
    """A parsed server address.

    Attributes:
        scheme: ``"http"`` or ``"grpc"``.
        hostname: host name or IP address, without brackets for IPv6.
        port: TCP port.
    """

    scheme: str
    hostname: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> TritonUrl:
        """Parse ``url`` as :func:`parse_url` does (the published name of the parser).

        Raises:
            PyTritonClientInvalidUrlError: as :func:`parse_url`.
        """
        parsed = parse_url(url)
        return cls(scheme=parsed.scheme, hostname=parsed.hostname, port=parsed.port)

    @property
    def address(self) -> str:
        """``host:port`` as ``tritonclient`` expects it (IPv6 hosts in brackets)."""
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"

    @property
    def with_scheme(self) -> str:
        """``scheme://host:port``, the published spelling of ``str(url)``."""
        return f"{self.scheme}://{self.address}"

    @property
    def without_scheme(self) -> str:
        """``host:port``, the published spelling of :attr:`address`."""
        return self.address

    def __str__(self) -> str:
        return self.with_scheme


def _invalid(url: str, why: str) -> PyTritonClientInvalidUrlError:
    return PyTritonClientInvalidUrlError(f"Invalid server URL {url!r}: {why}; {_ACCEPTED}.")


def parse_url(url: str) -> TritonUrl:
    """Split a user-given server URL into scheme, host and port.

    Args:
        url: ``localhost``, ``localhost:8000``, ``http://host:port``, ``grpc://host:port``;
            a missing scheme means HTTP, a missing port the protocol's default.

    Returns:
        The parsed address.

    Raises:
        PyTritonClientInvalidUrlError: ``url`` is not a string, is empty, has an unsupported scheme,
            a bad port, or a path, query, fragment or user part (the server has no use for them).
    """
    if not isinstance(url, str):
        raise _invalid(repr(url), f"expected a string, got {type(url).__name__}")
    text = url.strip()
    if not text:
        raise _invalid(url, "it is empty")

    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in DEFAULT_PORTS:
            hint = " (TLS is not supported by this client)" if scheme in ("https", "grpcs") else ""
            raise _invalid(url, f"unsupported scheme {scheme!r}{hint}")
        rest = text.split("://", 1)[1]
    else:
        scheme, rest = "http", text

    # urlsplit needs a scheme it knows to find the network location; the original scheme is kept aside.
    parts = urllib.parse.urlsplit(f"http://{rest}")
    if parts.path not in ("", "/"):
        raise _invalid(url, f"unexpected path {parts.path!r}")
    if parts.query or parts.fragment:
        raise _invalid(url, "unexpected query or fragment")
    if parts.username is not None or parts.password is not None:
        raise _invalid(url, "user or password parts are not supported")
    try:
        port = parts.port
    except ValueError as exc:
        raise _invalid(url, "the port must be a number from 1 to 65535") from exc
    hostname = parts.hostname
    if not hostname:
        raise _invalid(url, "the host is missing")
    if port is None:
        if parts.netloc.endswith(":"):
            raise _invalid(url, "the port after ':' is missing")
        port = DEFAULT_PORTS[scheme]
    if port == 0:
        raise _invalid(url, "the port must be a number from 1 to 65535")
    return TritonUrl(scheme=scheme, hostname=hostname, port=port)
