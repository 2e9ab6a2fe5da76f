"""Server URL parsing: accepted forms, defaults and the messages of refused URLs."""

from __future__ import annotations

import pytest

from pytriton.client.exceptions import PyTritonClientInvalidUrlError, PyTritonClientValueError
from pytriton.client.url import TritonUrl, parse_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("localhost", TritonUrl("http", "localhost", 8000)),
        ("localhost:8000", TritonUrl("http", "localhost", 8000)),
        ("localhost:9000", TritonUrl("http", "localhost", 9000)),
        ("http://localhost", TritonUrl("http", "localhost", 8000)),
        ("http://127.0.0.1:8010", TritonUrl("http", "127.0.0.1", 8010)),
        ("grpc://localhost", TritonUrl("grpc", "localhost", 8001)),
        ("grpc://my-host.example:9001", TritonUrl("grpc", "my-host.example", 9001)),
        ("GRPC://localhost:1", TritonUrl("grpc", "localhost", 1)),
        ("  localhost:8000/ ", TritonUrl("http", "localhost", 8000)),
        ("[::1]:8000", TritonUrl("http", "::1", 8000)),
        ("grpc://[::1]", TritonUrl("grpc", "::1", 8001)),
    ],
)
def test_accepted_forms(url, expected):
    assert parse_url(url) == expected


def test_address_is_what_tritonclient_expects():
    assert parse_url("grpc://localhost:8001").address == "localhost:8001"
    assert parse_url("[::1]:8000").address == "[::1]:8000"
    assert str(parse_url("localhost")) == "http://localhost:8000"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("https://localhost:8000", "unsupported scheme 'https' (TLS is not supported"),
        ("grpcs://localhost", "unsupported scheme 'grpcs' (TLS is not supported"),
        ("ftp://localhost", "unsupported scheme 'ftp'"),
        ("localhost:abc", "the port must be a number from 1 to 65535"),
        ("localhost:70000", "the port must be a number from 1 to 65535"),
        ("localhost:0", "the port must be a number from 1 to 65535"),
        ("localhost:", "the port after ':' is missing"),
        ("http://:8000", "the host is missing"),
        ("localhost:8000/v2/models", "unexpected path '/v2/models'"),
        ("localhost:8000?x=1", "unexpected query or fragment"),
        ("user:pw@localhost:8000", "user or password parts are not supported"),
    ],
)
def test_refused_urls_name_the_url_the_reason_and_the_accepted_forms(url, reason):
    with pytest.raises(PyTritonClientInvalidUrlError) as info:
        parse_url(url)
    message = str(info.value)
    assert repr(url) in message
    assert reason in message
    assert "'host:port'" in message and "'grpc://host[:port]'" in message and "8001" in message


def test_not_a_string():
    with pytest.raises(PyTritonClientInvalidUrlError, match="expected a string, got int"):
        parse_url(8000)  # type: ignore[arg-type]


def test_invalid_url_is_a_value_error_of_the_client():
    assert issubclass(PyTritonClientInvalidUrlError, PyTritonClientValueError)
