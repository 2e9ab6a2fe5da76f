"""TritonConfig: validation, environment variables and precedence (no process started)."""

from __future__ import annotations

import dataclasses
import pathlib
import warnings

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config import TritonConfig
from pytriton.server.config.merge import merge

P = "PYTRITON_TRITON_CONFIG_"


# --- the dataclass itself ---------------------------------------------------------------------


def test_every_field_defaults_to_none_meaning_tritons_default():
    config = TritonConfig()
    assert all(getattr(config, field.name) is None for field in dataclasses.fields(config))
    assert repr(config) == "TritonConfig()"


def test_ports_default_to_8000_8001_8002_and_follow_the_fields():
    assert (TritonConfig().effective_http_port, TritonConfig().effective_grpc_port) == (8000, 8001)
    assert TritonConfig().effective_metrics_port == 8002
    config = TritonConfig(http_port=9000, grpc_port=9001, metrics_port=9002)
    assert (config.effective_http_port, config.effective_grpc_port, config.effective_metrics_port) == (9000, 9001, 9002)


def test_fields_may_be_assigned_and_merge_checks_them_again():
    config = TritonConfig(http_port=9000)
    config.http_port = 9001
    config.log_file = "/tmp/triton.log"

    merged = merge(config, {})
    assert (merged.http_port, merged.log_file) == (9001, pathlib.Path("/tmp/triton.log"))

    config.grpc_port = 70000
    with pytest.raises(PyTritonBadParameterError, match="grpc_port"):
        merge(config, {})


def test_repr_shows_only_the_set_fields():
    assert repr(TritonConfig(http_port=9000, log_verbose=1)) == "TritonConfig(log_verbose=1, http_port=9000)"


def test_paths_lists_and_pool_mappings_are_normalised():
    pools = {1: 10}
    config = TritonConfig(log_file="/tmp/triton.log", backend_config=["python,a=b"], cuda_memory_pool_byte_size=pools)
    pools[2] = 20  # the caller's dict changing later must not change the frozen config
    assert config.log_file == pathlib.Path("/tmp/triton.log")
    assert config.backend_config == ("python,a=b",)
    assert config.cuda_memory_pool_byte_size == {1: 10}
    assert config == TritonConfig(
        log_file=pathlib.Path("/tmp/triton.log"), backend_config=("python,a=b",), cuda_memory_pool_byte_size={1: 10}
    )


@pytest.mark.parametrize("port", [1, 8000, 65535])
def test_valid_ports_are_accepted(port):
    assert TritonConfig(http_port=port, grpc_port=port, metrics_port=port).grpc_port == port


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"http_port": 0}, ["http_port", "0", "1..65535"]),
        ({"grpc_port": 65536}, ["grpc_port", "65536", "1..65535"]),
        ({"metrics_port": -1}, ["metrics_port", "-1", "1..65535"]),
        ({"http_port": "8000"}, ["http_port", "'8000'", "an integer"]),
        ({"http_port": True}, ["http_port", "True", "an integer"]),
        ({"log_verbose": -1}, ["log_verbose", "-1", ">= 0"]),
        ({"exit_timeout_secs": -5}, ["exit_timeout_secs", "-5", ">= 0"]),
        ({"pinned_memory_pool_byte_size": -1}, ["pinned_memory_pool_byte_size", "-1", ">= 0"]),
        ({"http_thread_count": 0}, ["http_thread_count", "0", "> 0"]),
        ({"model_load_thread_count": 0}, ["model_load_thread_count", "0", "> 0"]),
        ({"metrics_interval_ms": 0.0}, ["metrics_interval_ms", "0.0", "> 0"]),
        ({"response_cache_byte_size": 0}, ["response_cache_byte_size", "0", "> 0"]),
        ({"allow_http": "yes"}, ["allow_http", "'yes'", "True or False"]),
        ({"log_format": "json"}, ["log_format", "'json'", "'default', 'ISO8601'"]),
        ({"grpc_infer_response_compression_level": "max"}, ["compression_level", "'max'", "'none', 'low'"]),
        ({"rate_limit": "on"}, ["rate_limit", "'on'", "'execution_count', 'off'"]),
        ({"backend_config": "python,a=b"}, ["backend_config", "'python,a=b'", "a list of strings"]),
        ({"backend_config": ["python"]}, ["backend_config", "'python'", "'<backend>,<setting>=<value>'"]),
        ({"cache_config": ["size=10"]}, ["cache_config", "'size=10'", "'<cache>,<setting>=<value>'"]),
        ({"http_restricted_api": ["health"]}, ["http_restricted_api", "'health'", "<header>=<value>"]),
        ({"cuda_memory_pool_byte_size": -1}, ["cuda_memory_pool_byte_size", "-1", ">= 0"]),
        ({"cuda_memory_pool_byte_size": {0: -1}}, ["cuda_memory_pool_byte_size", "{0: -1}", ">= 0"]),
        ({"cuda_memory_pool_byte_size": "1024"}, ["cuda_memory_pool_byte_size", "'1024'", "mapping"]),
        ({"log_file": 3}, ["log_file", "3", "a path"]),
    ],
)
def test_invalid_values_name_the_field_the_value_and_what_is_allowed(kwargs, fragments):
    with pytest.raises(PyTritonBadParameterError) as info:
        TritonConfig(**kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_trace_config_accepts_global_and_mode_settings():
    items = ("rate=100", "triton,file=/tmp/trace.json", "opentelemetry,url=localhost:4318")
    assert TritonConfig(trace_config=items).trace_config == items


def test_cache_size_set_twice_is_rejected():
    with pytest.raises(PyTritonBadParameterError, match="response_cache_byte_size=1024.*'local,size=2048'"):
        TritonConfig(response_cache_byte_size=1024, cache_config=["local,size=2048"])
    other_setting = TritonConfig(response_cache_byte_size=1024, cache_config=["redis,host=localhost"])
    assert other_setting.cache_config == ("redis,host=localhost",)


def test_mutual_ssl_without_ssl_is_rejected():
    with pytest.raises(PyTritonBadParameterError, match="grpc_use_ssl_mutual=True with grpc_use_ssl=False"):
        TritonConfig(grpc_use_ssl=False, grpc_use_ssl_mutual=True)
    assert TritonConfig(grpc_use_ssl_mutual=True).grpc_use_ssl is None


# --- from_env -----------------------------------------------------------------------------------


def test_from_env_reads_nothing_from_an_environment_without_the_prefix():
    assert TritonConfig.from_env({"PATH": "/bin", "HTTP_PORT": "1", "PYTRITON_OTHER": "x"}) == TritonConfig()


def test_from_env_reads_each_scalar_type():
    config = TritonConfig.from_env(
        {
            P + "HTTP_PORT": "9000",
            P + "LOG_VERBOSE": " 2 ",
            P + "METRICS_INTERVAL_MS": "1500.5",
            P + "LOG_FILE": "/var/log/triton.log",
            P + "ID": "server-a",
            P + "ALLOW_GRPC": "false",
            P + "STRICT_READINESS": "TRUE",
        }
    )
    assert config == TritonConfig(
        http_port=9000,
        log_verbose=2,
        metrics_interval_ms=1500.5,
        log_file=pathlib.Path("/var/log/triton.log"),
        id="server-a",
        allow_grpc=False,
        strict_readiness=True,
    )


@pytest.mark.parametrize("text", ["true", "1", "yes", "on", "True", "YES", "On"])
def test_true_words(text):
    assert TritonConfig.from_env({P + "ALLOW_HTTP": text}).allow_http is True


@pytest.mark.parametrize("text", ["false", "0", "no", "off", "False", "NO", "OFF"])
def test_false_words(text):
    assert TritonConfig.from_env({P + "ALLOW_HTTP": text}).allow_http is False


def test_an_unreadable_boolean_names_the_variable_and_the_value():
    with pytest.raises(PyTritonBadParameterError) as info:
        TritonConfig.from_env({P + "ALLOW_METRICS": "maybe"})
    message = str(info.value)
    assert P + "ALLOW_METRICS" in message and "'maybe'" in message and "true" in message and "off" in message


def test_an_unreadable_integer_names_the_variable_and_the_value():
    with pytest.raises(PyTritonBadParameterError, match=P + "GRPC_PORT='80a'.*an integer"):
        TritonConfig.from_env({P + "GRPC_PORT": "80a"})


def test_an_out_of_range_value_names_the_variable_and_the_rule():
    with pytest.raises(PyTritonBadParameterError, match=P + "HTTP_PORT='70000'.*1..65535"):
        TritonConfig.from_env({P + "HTTP_PORT": "70000"})


def test_list_fields_are_split_on_semicolons():
    config = TritonConfig.from_env(
        {
            P + "BACKEND_CONFIG": "python,shm-default-byte-size=1048576; python,shm-growth-byte-size=65536;",
            P + "CACHE_CONFIG": "local,size=1024",
            P + "TRACE_CONFIG": "rate=10;triton,file=/tmp/t.json",
        }
    )
    assert config.backend_config == ("python,shm-default-byte-size=1048576", "python,shm-growth-byte-size=65536")
    assert config.cache_config == ("local,size=1024",)
    assert config.trace_config == ("rate=10", "triton,file=/tmp/t.json")


def test_cuda_pool_is_an_integer_or_device_pairs():
    assert TritonConfig.from_env({P + "CUDA_MEMORY_POOL_BYTE_SIZE": "1024"}).cuda_memory_pool_byte_size == 1024
    pairs = TritonConfig.from_env({P + "CUDA_MEMORY_POOL_BYTE_SIZE": "0:1024;1:2048"})
    assert pairs.cuda_memory_pool_byte_size == {0: 1024, 1: 2048}
    with pytest.raises(PyTritonBadParameterError, match="CUDA_MEMORY_POOL_BYTE_SIZE='0:1k'.*'0:1k'"):
        TritonConfig.from_env({P + "CUDA_MEMORY_POOL_BYTE_SIZE": "0:1k"})


def test_an_empty_value_counts_as_unset():
    assert TritonConfig.from_env({P + "HTTP_PORT": "", P + "ALLOW_HTTP": "  "}) == TritonConfig()


def test_log_verbosity_is_an_alias_of_log_verbose():
    assert TritonConfig.from_env({P + "LOG_VERBOSITY": "4"}).log_verbose == 4
    assert TritonConfig.from_env({P + "LOG_VERBOSE": "3"}).log_verbose == 3


def test_log_verbosity_and_log_verbose_agreeing_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TritonConfig.from_env({P + "LOG_VERBOSITY": "2", P + "LOG_VERBOSE": "2"}).log_verbose == 2


def test_log_verbose_wins_over_its_alias_with_a_warning():
    with pytest.warns(UserWarning, match=f"using {P}LOG_VERBOSE for TritonConfig.log_verbose"):
        config = TritonConfig.from_env({P + "LOG_VERBOSITY": "4", P + "LOG_VERBOSE": "1"})
    assert config.log_verbose == 1


def test_an_unknown_variable_warns_naming_it_and_is_ignored():
    with pytest.warns(UserWarning, match=f"{P}HTTP_PROT names no TritonConfig field") as record:
        config = TritonConfig.from_env({P + "HTTP_PROT": "9000", P + "GRPC_PORT": "9001"})
    assert config == TritonConfig(grpc_port=9001)
    assert f"did you mean {P}HTTP_PORT?" in str(record[0].message)


def test_an_unknown_variable_is_also_logged(caplog):
    with pytest.warns(UserWarning):
        TritonConfig.from_env({P + "NOT_A_FIELD": "1"})
    assert any(P + "NOT_A_FIELD" in record.getMessage() and record.levelname == "WARNING" for record in caplog.records)


def test_from_env_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv(P + "HTTP_PORT", "9100")
    assert TritonConfig.from_env().http_port == 9100


# --- merge: explicit > environment > default ------------------------------------------------------


def test_explicit_fields_win_over_the_environment():
    environ = {P + "HTTP_PORT": "9000", P + "LOG_VERBOSE": "3"}
    merged = merge(TritonConfig(http_port=7000), environ)
    assert merged.http_port == 7000  # explicit
    assert merged.log_verbose == 3  # environment fills what the code left unset
    assert merged.grpc_port is None and merged.effective_grpc_port == 8001  # default


def test_explicit_false_is_still_explicit():
    merged = merge(TritonConfig(allow_grpc=False), {P + "ALLOW_GRPC": "true"})
    assert merged.allow_grpc is False


def test_no_explicit_config_means_the_environment_alone():
    assert merge(None, {P + "LOG_VERBOSITY": "4"}) == TritonConfig(log_verbose=4)
    assert merge(None, {}) == TritonConfig()


def test_merge_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv(P + "METRICS_PORT", "9102")
    assert merge(TritonConfig(http_port=9100)) == TritonConfig(http_port=9100, metrics_port=9102)


def test_a_contradiction_across_sources_says_the_environment_took_part():
    with pytest.raises(PyTritonBadParameterError, match="local cache size.*environment variables"):
        merge(TritonConfig(response_cache_byte_size=1024), {P + "CACHE_CONFIG": "local,size=2048"})


def test_triton_on_localhost_keeps_tritons_http_and_grpc_on_this_machine_behind_the_openai_front():
    from pytriton.server.argv import build_argv
    from pytriton.server.ports import listening_ports

    config = merge(TritonConfig(openai_port=9000, triton_on_localhost=True), {})
    assert (config.http_address, config.grpc_address, config.metrics_address) == ("127.0.0.1", "127.0.0.1", None)
    argv = build_argv(config, binary=pathlib.Path("/t"), model_repository=pathlib.Path("/m"),
                      backend_directory=pathlib.Path("/b"), cache_directory=pathlib.Path("/c"),
                      shm_region_prefix="pytriton_a_")
    assert "--http-address=127.0.0.1" in argv and "--grpc-address=127.0.0.1" in argv
    assert not any("localhost" in word for word in argv)
    # The front is the public door: every interface.
    assert ("openai_port", None, 9000) in listening_ports(config)
    from_env = merge(None, {"PYTRITON_TRITON_CONFIG_OPENAI_PORT": "9000",
                            "PYTRITON_TRITON_CONFIG_TRITON_ON_LOCALHOST": "1"})
    assert (from_env.http_address, from_env.grpc_address) == ("127.0.0.1", "127.0.0.1")
    # Unset, nothing changes: published configs keep Triton's own addresses.
    plain = merge(TritonConfig(openai_port=9000), {})
    assert plain.http_address is None and ("openai_port", None, 9000) in listening_ports(plain)
    assert merge(TritonConfig(openai_port=9000, http_address="10.0.0.2"), {}).http_address == "10.0.0.2"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"triton_on_localhost": True}, "openai_port is not set"),
        ({"openai_port": 9000, "triton_on_localhost": True, "grpc_address": "0.0.0.0"}, "grpc_address='0.0.0.0'"),
        ({"openai_port": 9000, "triton_on_localhost": True, "allow_sagemaker": True, "sagemaker_port": 9100},
         "SageMaker endpoint"),
    ],
)
def test_triton_on_localhost_refuses_what_contradicts_it(kwargs, words):
    with pytest.raises(PyTritonBadParameterError, match="triton_on_localhost=True") as caught:
        merge(TritonConfig(**kwargs), {})
    assert words in str(caught.value)
