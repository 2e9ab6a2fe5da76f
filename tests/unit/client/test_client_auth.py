"""pytriton.client.auth: the access-token headers, built and found the published way (pure)."""

from __future__ import annotations

import pytest

from pytriton.access_token import ACCESS_TOKEN_HEADER, GRPC_HEADER_PREFIX, auth_headers
from pytriton.client.auth import (
    PyTritonClientAuthHeaderError,
    create_auth_headers,
    extract_access_token_from_headers,
)
from pytriton.client.exceptions import PyTritonClientValueError


@pytest.mark.parametrize("protocol", ["http", "HTTP", "Http"])
def test_http_header(protocol):
    assert create_auth_headers("tok-1", protocol) == {"triton-access-token": "tok-1"}


@pytest.mark.parametrize("protocol", ["grpc", "GRPC"])
def test_grpc_metadata_has_tritons_prefix(protocol):
    assert create_auth_headers("tok-1", protocol) == {"triton-grpc-protocol-triton-access-token": "tok-1"}


def test_the_headers_are_the_ones_the_server_side_expects():
    # The server's own calls and the restriction options use these names; both sides must agree.
    assert create_auth_headers("t", "http") == auth_headers("http", "t")
    assert create_auth_headers("t", "grpc") == auth_headers("grpc", "t")
    assert ACCESS_TOKEN_HEADER == "triton-access-token" and GRPC_HEADER_PREFIX == "triton-grpc-protocol-"


@pytest.mark.parametrize("token", [None, "", 5, "a\nb"])
def test_a_missing_or_bad_token_is_refused(token):
    with pytest.raises(PyTritonClientAuthHeaderError, match="access_token"):
        create_auth_headers(token, "http")


@pytest.mark.parametrize("protocol", ["https", "", "grpcs", None])
def test_an_unknown_protocol_is_refused_naming_it(protocol):
    with pytest.raises(PyTritonClientAuthHeaderError, match=f"protocol={protocol!r}.*'http' or 'grpc'"):
        create_auth_headers("t", protocol)


def test_the_error_is_a_value_error_for_published_code_and_a_client_error_for_ours():
    with pytest.raises(ValueError):
        create_auth_headers("", "http")
    with pytest.raises(PyTritonClientValueError):
        create_auth_headers("t", "ftp")


@pytest.mark.parametrize(
    ("headers", "token"),
    [
        ({"triton-access-token": "a"}, "a"),
        ({"triton-grpc-protocol-triton-access-token": "b"}, "b"),
        ({"Triton-Access-Token": "c", "other": "x"}, "c"),
        ({"triton-access-token": "d", "triton-grpc-protocol-triton-access-token": "d"}, "d"),
        ({"triton-access-token": "", "triton-grpc-protocol-triton-access-token": "e"}, "e"),
        ({"other": "x"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_extract_finds_the_token_in_either_header(headers, token):
    assert extract_access_token_from_headers(headers) == token


def test_extract_reads_back_what_create_builds():
    for protocol in ("http", "grpc"):
        assert extract_access_token_from_headers(create_auth_headers("round-trip", protocol)) == "round-trip"


def test_two_different_tokens_are_refused_without_showing_them():
    headers = {"triton-access-token": "secret-1", "triton-grpc-protocol-triton-access-token": "secret-2"}
    with pytest.raises(ValueError, match="different access tokens") as info:
        extract_access_token_from_headers(headers)
    assert "secret" not in str(info.value)
