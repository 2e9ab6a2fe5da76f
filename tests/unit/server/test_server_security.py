"""pytriton.server.security: TritonSecurityConfig -> restriction items of both protocols (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.argv import build_argv
from pytriton.server.config import TritonConfig
from pytriton.server.security import (
    DEFAULT_RESTRICTED_ENDPOINTS,
    TRITON_APIS,
    TritonSecurityConfig,
    auth_headers,
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


def test_default_restricts_the_administrative_apis_and_leaves_client_apis_open():
    security = TritonSecurityConfig()
    assert security.access_token is None and security.restricted_endpoints is None
    assert security.effective_restricted_endpoints == DEFAULT_RESTRICTED_ENDPOINTS
    assert set(DEFAULT_RESTRICTED_ENDPOINTS) == {"model-repository", "shared-memory", "statistics", "trace", "logging"}
    assert not {"inference", "health", "metadata", "model-config"} & set(DEFAULT_RESTRICTED_ENDPOINTS)


def test_a_token_is_generated_per_server_unless_chosen():
    first, second = resolve_access_token(TritonSecurityConfig()), resolve_access_token(TritonSecurityConfig())
    assert first != second
    assert len(first) >= 40  # 256 random bits, URL-safe base64
    assert TritonSecurityConfig(access_token=first) == TritonSecurityConfig(access_token=first)
    assert resolve_access_token(TritonSecurityConfig(access_token="chosen")) == "chosen"


def test_the_token_stays_out_of_repr():
    assert "s3cr3t" not in repr(TritonSecurityConfig(access_token="s3cr3t"))


def test_endpoints_are_stored_in_tritons_order_without_repeats():
    security = TritonSecurityConfig(restricted_endpoints=["statistics", "inference", "statistics"])
    assert security.restricted_endpoints == ("inference", "statistics")
    assert TritonSecurityConfig(restricted_endpoints={"trace"}).restricted_endpoints == ("trace",)
    assert TritonSecurityConfig(restricted_endpoints=[]).effective_restricted_endpoints == ()
    assert TritonSecurityConfig(restricted_endpoints=TRITON_APIS).restricted_endpoints == TRITON_APIS
    assert len(TRITON_APIS) == 9


def test_an_unknown_endpoint_is_named_with_the_allowed_ones():
    with pytest.raises(PyTritonBadParameterError, match=r"'repository' is invalid.*model-repository.*logging"):
        TritonSecurityConfig(restricted_endpoints=["inference", "repository"])


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
    assert auth_headers("tok", grpc=False) == {"triton-access-token": "tok"}
    assert auth_headers("tok", grpc=True) == {"triton-grpc-protocol-triton-access-token": "tok"}


def test_the_token_comes_from_the_config_then_the_environment_then_is_generated():
    from pytriton.server.security import ACCESS_TOKEN_ENV, TritonSecurityConfig, resolve_access_token

    assert resolve_access_token(TritonSecurityConfig(access_token="chosen"), {ACCESS_TOKEN_ENV: "env"}) == "chosen"
    assert resolve_access_token(TritonSecurityConfig(), {ACCESS_TOKEN_ENV: "from-a-secret"}) == "from-a-secret"
    generated = resolve_access_token(TritonSecurityConfig(), {ACCESS_TOKEN_ENV: ""})
    assert len(generated) >= 40 and generated != resolve_access_token(TritonSecurityConfig(), {})
    with pytest.raises(PyTritonBadParameterError, match="PYTRITON_ACCESS_TOKEN holds an invalid access token"):
        resolve_access_token(TritonSecurityConfig(), {ACCESS_TOKEN_ENV: "has spaces"})
