"""pytriton.constants: the published names and values, and the modules that read them."""

from __future__ import annotations

import pathlib

import pytest

from pytriton import constants
from pytriton.client.url import parse_url
from pytriton.server.config import TritonConfig
from pytriton.server.control import parse_server_url


def test_published_names_and_values():
    assert constants.DEFAULT_HTTP_PORT == 8000
    assert constants.DEFAULT_GRPC_PORT == 8001
    assert constants.DEFAULT_METRICS_PORT == 8002
    assert constants.TRITON_LOCAL_IP == "127.0.0.1"
    assert constants.TRITON_CONTEXT_FIELD_NAME == "triton_context"
    assert constants.TRITON_PYTHON_BACKEND_INTERPRETER_DIRNAME == "python_backend_interpreter"
    assert constants.DEFAULT_TRITON_STARTUP_TIMEOUT_S == 120
    assert constants.CREATE_TRITON_CLIENT_TIMEOUT_S == 10
    assert isinstance(constants.PYTRITON_HOME, pathlib.Path) and constants.PYTRITON_HOME.is_absolute()


def test_the_server_config_and_the_urls_default_to_these_ports():
    config = TritonConfig()
    assert (config.effective_http_port, config.effective_grpc_port, config.effective_metrics_port) == (
        constants.DEFAULT_HTTP_PORT,
        constants.DEFAULT_GRPC_PORT,
        constants.DEFAULT_METRICS_PORT,
    )
    assert parse_url("somehost").port == constants.DEFAULT_HTTP_PORT
    assert parse_url("grpc://somehost").port == constants.DEFAULT_GRPC_PORT
    assert parse_server_url("grpc://somehost")[2] == constants.DEFAULT_GRPC_PORT


def test_the_start_up_wait_is_the_published_timeout():
    import pytriton.facade.triton

    assert pytriton.facade.triton.STARTUP_TIMEOUT_S == constants.DEFAULT_TRITON_STARTUP_TIMEOUT_S


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"PYTRITON_HOME": "/srv/pt"}, "/srv/pt"),
        ({"PYTRITON_HOME": "/srv/$USER_DIR/pt", "USER_DIR": "u"}, None),  # variables expanded (see below)
        ({"XDG_CACHE_HOME": "/cache"}, "/cache/pytriton"),
        ({"PYTRITON_HOME": "/a", "XDG_CACHE_HOME": "/cache"}, "/a"),
        ({}, str(pathlib.Path("~/.cache/pytriton").expanduser())),
    ],
)
def test_pytriton_home_follows_the_environment(environ, expected, monkeypatch):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)  # expandvars reads os.environ
    home = constants.pytriton_home(environ)
    if expected is None:
        assert home == pathlib.Path("/srv/u/pt")
    else:
        assert home == pathlib.Path(expected).resolve()
