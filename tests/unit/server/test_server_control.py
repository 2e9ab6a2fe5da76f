"""pytriton.server.control: server URLs (pure); no server is reached."""

from __future__ import annotations

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.control import ServerControl, parse_server_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://triton:9000", ("http", "triton", 9000)),
        ("grpc://10.0.0.7:9001", ("grpc", "10.0.0.7", 9001)),
        ("localhost:8100", ("http", "localhost", 8100)),
        ("localhost", ("http", "localhost", 8000)),
        ("grpc://triton", ("grpc", "triton", 8001)),
        ("http://[::1]:8000/", ("http", "::1", 8000)),
        (" http://triton:8000 ", ("http", "triton", 8000)),
    ],
)
def test_server_urls(url, expected):
    assert parse_server_url(url) == expected
    ServerControl.for_url(url).close()  # builds without reaching anything


@pytest.mark.parametrize("url", ["", "https://triton:8000", "http://triton:8000/v2", "http://triton:port",
                                 "http://:8000", "http://triton:99999", None])
def test_bad_server_urls_are_refused(url):
    with pytest.raises(PyTritonBadParameterError, match="expected 'http://host:port'"):
        parse_server_url(url)
