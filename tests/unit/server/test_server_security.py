"""pytriton.server.security: TritonSecurityConfig -> restriction items of both protocols (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from pytriton.access_token import auth_headers
from pytriton.environment import ACCESS_TOKEN as ACCESS_TOKEN_ENV
from pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from pytriton.server.argv import build_argv
from pytriton.server.config import TritonConfig
from pytriton.server.security import (
    DEFAULT_PROTECTED_ENDPOINTS,
    DEFAULT_RESTRICTED_ENDPOINTS,
    TRITON_ACCESS_HEADER,
    TRITON_APIS,
    VALID_TRITON_ENDPOINTS,
    TritonSecurityConfig,
    claimed_apis,
    resolve_access_token,
    restricted_config,
    restriction_items,
)

DEFAULT_ITEM = "shared-memory,model-repository,statistics,trace,logging:triton-access-token=tok"


def _argv(config: TritonConfig) -> list:
    return build_argv(
        config, binary="tritonserver", model_repository="/m", backend_directory="/b", cache_directory="/c",
        shm_region_prefix="pytriton-1-ab",
    )  # fmt: skip


@pytest.fixture(autouse=True)
def _no_token_in_the_environment(monkeypatch):
    monkeypatch.delenv(ACCESS_TOKEN_ENV, raising=False)


def test_default_restricts_the_administrative_apis_and_leaves_client_apis_open():
    security = TritonSecurityConfig()
    assert security.restricted_endpoints == DEFAULT_RESTRICTED_ENDPOINTS
    assert security.effective_restricted_endpoints == DEFAULT_RESTRICTED_ENDPOINTS
    assert set(DEFAULT_RESTRICTED_ENDPOINTS) == {"model-repository", "shared-memory", "statistics", "trace", "logging"}
    assert not {"inference", "health", "metadata", "model-config"} & set(DEFAULT_RESTRICTED_ENDPOINTS)


def test_the_token_exists_as_soon_as_the_config_does():
    security = TritonSecurityConfig()
    assert isinstance(security.access_token, str) and len(security.access_token) >= 40  # 256 bits, URL-safe base64
    assert resolve_access_token(security) == security.access_token  # what a server built from it uses
    assert resolve_access_token(security) == security.access_token  # settled once, not per call


def test_each_config_gets_its_own_token():
    tokens = {TritonSecurityConfig().access_token for _ in range(20)}
    assert len(tokens) == 20


def test_a_given_token_is_kept_and_survives_replace():
    security = TritonSecurityConfig(access_token="chosen")
    assert security.access_token == "chosen" and resolve_access_token(security) == "chosen"
    assert TritonSecurityConfig(access_token="chosen") == security
    generated = TritonSecurityConfig()
    assert dataclasses.replace(generated, restricted_endpoints=["trace"]).access_token == generated.access_token


def test_the_token_stays_out_of_repr():
    assert "s3cr3t" not in repr(TritonSecurityConfig(access_token="s3cr3t"))
    generated = TritonSecurityConfig()
    assert generated.access_token not in repr(generated) and generated.access_token not in str(generated)


def test_nothing_restricted_and_no_token_given_leaves_the_token_none():
    assert TritonSecurityConfig(restricted_endpoints=[]).access_token is None
    assert TritonSecurityConfig(restricted_endpoints=[], access_token="kept").access_token == "kept"


def test_the_published_constants_have_the_published_types_and_values():
    assert TRITON_ACCESS_HEADER == "triton-access-token"
    assert isinstance(VALID_TRITON_ENDPOINTS, set) and VALID_TRITON_ENDPOINTS == set(TRITON_APIS)
    assert isinstance(DEFAULT_PROTECTED_ENDPOINTS, list)
    assert DEFAULT_PROTECTED_ENDPOINTS == ["shared-memory", "model-repository", "statistics", "trace", "logging"]
    # List arithmetic as code written for the published library does it.
    security = TritonSecurityConfig(restricted_endpoints=DEFAULT_PROTECTED_ENDPOINTS + ["inference"])
    assert set(security.restricted_endpoints) == set(DEFAULT_PROTECTED_ENDPOINTS) | {"inference"}


def test_endpoints_are_stored_in_tritons_order_without_repeats():
    security = TritonSecurityConfig(restricted_endpoints=["statistics", "inference", "statistics"])
    assert security.restricted_endpoints == ("inference", "statistics")
    assert TritonSecurityConfig(restricted_endpoints={"trace"}).restricted_endpoints == ("trace",)
    assert TritonSecurityConfig(restricted_endpoints=[]).effective_restricted_endpoints == ()
    assert TritonSecurityConfig(restricted_endpoints=TRITON_APIS).restricted_endpoints == TRITON_APIS
    assert len(TRITON_APIS) == 9


def test_an_unknown_endpoint_is_named_with_the_allowed_ones():
    with pytest.raises(PyTritonValidationError) as raised:
        TritonSecurityConfig(restricted_endpoints=["inference", "repository", "model_config"])
    message = str(raised.value)
    assert "Invalid endpoint names: repository, model_config" in message
    assert "TritonSecurityConfig.restricted_endpoints=['inference', 'repository', 'model_config']" in message
    assert "Valid endpoints are: health, metadata, inference, shared-memory, model-config" in message
    assert isinstance(raised.value, PyTritonBadParameterError)


@pytest.mark.parametrize("value", ["inference", b"inference", 3])
def test_endpoints_must_be_a_list(value):
    with pytest.raises(PyTritonBadParameterError, match="restricted_endpoints=.*expected a list of API names"):
        TritonSecurityConfig(restricted_endpoints=value)


@pytest.mark.parametrize("token", ["", "two words", "line\nbreak", "a,b:c", 123])
def test_bad_tokens_are_refused_without_echoing_them(token):
    with pytest.raises(PyTritonBadParameterError, match="access_token") as raised:
        TritonSecurityConfig(access_token=token)
    if isinstance(token, str) and token:
        assert token not in str(raised.value)


@pytest.mark.parametrize("token", ["abc", "A-b_c.d~e", "aGVsbG8=", "0123456789abcdef", "a+b/c=="])
def test_hex_and_base64_tokens_are_accepted(token):
    assert TritonSecurityConfig(access_token=token).access_token == token


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TritonSecurityConfig().access_token = "x"  # type: ignore[misc]


def test_items_of_the_default():
    assert restriction_items(TritonSecurityConfig(), "tok", None) == (DEFAULT_ITEM,)


def test_no_restriction_gives_no_item():
    assert restriction_items(TritonSecurityConfig(restricted_endpoints=[]), "tok", None) is None
    assert restriction_items(TritonSecurityConfig(restricted_endpoints=[]), "tok", ["trace:h=v"]) == ("trace:h=v",)


def test_user_items_win_for_the_apis_they_name_and_the_token_covers_the_rest():
    user = ["statistics, inference:x-key=abc", "logging:other=1"]
    assert claimed_apis(user) == ("statistics", "inference", "logging")
    items = restriction_items(TritonSecurityConfig(), "tok", user)
    assert items == (*user, "shared-memory,model-repository,trace:triton-access-token=tok")


def test_user_items_covering_every_restricted_api_leave_no_library_item():
    user = ["shared-memory,model-repository,statistics,trace,logging:h=v"]
    assert restriction_items(TritonSecurityConfig(), "tok", user) == tuple(user)


def test_restricted_config_sets_both_protocols_and_reaches_the_argv():
    config = restricted_config(
        TritonConfig(http_port=9000), TritonSecurityConfig(restricted_endpoints=["inference"]), "tok"
    )
    assert config.http_restricted_api == ("inference:triton-access-token=tok",)
    assert config.grpc_restricted_protocol == ("inference:triton-access-token=tok",)
    argv = _argv(config)
    assert "--http-restricted-api=inference:triton-access-token=tok" in argv
    assert "--grpc-restricted-protocol=inference:triton-access-token=tok" in argv


def test_restricted_config_keeps_each_protocols_own_user_items():
    config = TritonConfig(grpc_restricted_protocol=["model-repository:h=v"])
    merged = restricted_config(config, TritonSecurityConfig(), "tok")
    assert merged.http_restricted_api == (DEFAULT_ITEM,)
    assert merged.grpc_restricted_protocol == (
        "model-repository:h=v", "shared-memory,statistics,trace,logging:triton-access-token=tok",
    )  # fmt: skip


def test_disabled_restriction_writes_no_flag():
    argv = _argv(restricted_config(TritonConfig(), TritonSecurityConfig(restricted_endpoints=[]), "tok"))
    assert not [word for word in argv if "restricted" in word]


def test_auth_headers_carry_the_grpc_prefix_on_grpc_only():
    assert auth_headers("http", "tok") == {"triton-access-token": "tok"}
    assert auth_headers("grpc", "tok") == {"triton-grpc-protocol-triton-access-token": "tok"}
    assert auth_headers("grpc", None) == {}


def test_the_token_comes_from_the_argument_then_the_environment_then_is_generated(monkeypatch):
    monkeypatch.setenv(ACCESS_TOKEN_ENV, "from-a-secret")
    assert TritonSecurityConfig(access_token="chosen").access_token == "chosen"
    assert TritonSecurityConfig().access_token == "from-a-secret"
    assert TritonSecurityConfig(restricted_endpoints=[]).access_token == "from-a-secret"
    monkeypatch.setenv(ACCESS_TOKEN_ENV, " ")
    generated = TritonSecurityConfig().access_token
    assert generated is not None and len(generated) >= 40
    monkeypatch.setenv(ACCESS_TOKEN_ENV, "has spaces")
    with pytest.raises(PyTritonBadParameterError, match="PYTRITON_ACCESS_TOKEN holds an invalid") as raised:
        TritonSecurityConfig()
    assert "has spaces" not in str(raised.value)


def test_the_environment_is_read_when_the_config_is_built(monkeypatch):
    before = TritonSecurityConfig()
    monkeypatch.setenv(ACCESS_TOKEN_ENV, "set-later")
    assert resolve_access_token(before) == before.access_token != "set-later"


def test_restricting_without_a_token_is_refused():
    with pytest.raises(PyTritonBadParameterError, match="access_token=None is invalid.*restricts trace"):
        restriction_items(TritonSecurityConfig(restricted_endpoints=["trace"]), None, None)
    assert restriction_items(TritonSecurityConfig(restricted_endpoints=[]), None, None) is None
