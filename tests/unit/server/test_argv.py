"""build_argv: TritonConfig -> tritonserver command line (pure; no process started)."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.argv import FIELDS_FROM_KEYWORDS, LIBRARY_FLAGS, OPTION_FLAGS, PYTRITON_SETTINGS, build_argv
from pytriton.server.config import TritonConfig

# Every option listed by `tritonserver --help` of Triton 2.51 (the binary shipped in nvidia-pytriton 0.7.0).
TRITON_2_51_FLAGS = frozenset(
    """
    --allow-cpu-metrics --allow-gpu-metrics --allow-grpc --allow-http --allow-metrics --allow-sagemaker
    --allow-vertex-ai --backend-config --backend-directory --buffer-manager-thread-count --cache-config
    --cache-directory --cuda-memory-pool-byte-size --cuda-virtual-address-size --disable-auto-complete-config
    --enable-peer-access --exit-on-error --exit-timeout-secs --grpc-address --grpc-header-forward-pattern
    --grpc-http2-max-ping-strikes --grpc-http2-max-pings-without-data --grpc-http2-min-recv-ping-interval-without-data
    --grpc-infer-allocation-pool-size --grpc-infer-response-compression-level --grpc-keepalive-permit-without-calls
    --grpc-keepalive-time --grpc-keepalive-timeout --grpc-max-connection-age --grpc-max-connection-age-grace
    --grpc-port --grpc-restricted-protocol --grpc-root-cert --grpc-server-cert --grpc-server-key --grpc-use-ssl
    --grpc-use-ssl-mutual --help --host-policy --http-address --http-header-forward-pattern --http-port
    --http-restricted-api --http-thread-count --id --load-model --log-error --log-file --log-format --log-info
    --log-verbose --log-warning --metrics-address --metrics-config --metrics-interval-ms --metrics-port
    --min-supported-compute-capability --model-config-name --model-control-mode --model-load-gpu-limit
    --model-load-retry-count --model-load-thread-count --model-namespacing --model-repository --model-store
    --pinned-memory-pool-byte-size --rate-limit --rate-limit-resource --repoagent-directory --repository-poll-secs
    --response-cache-byte-size --reuse-grpc-port --reuse-http-port --sagemaker-port --sagemaker-safe-port-range
    --sagemaker-thread-count --strict-model-config --strict-readiness --trace-config --trace-count --trace-file
    --trace-level --trace-log-frequency --trace-rate --vertex-ai-default-model --vertex-ai-port --vertex-ai-thread-count
    """.split()
)
DEPRECATED_FLAGS = frozenset(
    {
        "--response-cache-byte-size",
        "--trace-file",
        "--trace-level",
        "--trace-rate",
        "--trace-count",
        "--trace-log-frequency",
        "--model-store",
    }
)

PATHS = {
    "binary": pathlib.Path("/opt/ts/bin/tritonserver"),
    "model_repository": pathlib.Path("/tmp/repo"),
    "backend_directory": pathlib.Path("/opt/ts/backends"),
    "cache_directory": pathlib.Path("/opt/ts/caches"),
    "shm_region_prefix": "pytriton_abc_",
}

EVERY_FIELD_SET = TritonConfig(
    id="srv",
    model_repository=pathlib.Path("/tmp/user-repo"),
    log_verbose=1,
    log_info=True,
    log_warning=False,
    log_error=True,
    log_format="ISO8601",
    log_file=pathlib.Path("/tmp/triton.log"),
    exit_on_error=True,
    strict_readiness=False,
    exit_timeout_secs=5,
    http_address="127.0.0.1",
    http_port=9000,
    http_header_forward_pattern="x-.*",
    http_thread_count=4,
    http_restricted_api=("model-repository,statistics:token=abc",),
    allow_http=True,
    grpc_address="0.0.0.0",
    grpc_port=9001,
    grpc_header_forward_pattern="x-.*",
    grpc_infer_allocation_pool_size=16,
    grpc_use_ssl=True,
    grpc_use_ssl_mutual=True,
    grpc_server_cert=pathlib.Path("/certs/server.crt"),
    grpc_server_key=pathlib.Path("/certs/server.key"),
    grpc_root_cert=pathlib.Path("/certs/root.crt"),
    grpc_infer_response_compression_level="low",
    grpc_keepalive_time=1000,
    grpc_keepalive_timeout=2000,
    grpc_keepalive_permit_without_calls=True,
    grpc_http2_max_pings_without_data=0,
    grpc_http2_min_recv_ping_interval_without_data=300000,
    grpc_http2_max_ping_strikes=3,
    grpc_restricted_protocol=("model-repository:token=abc",),
    allow_grpc=True,
    allow_metrics=True,
    allow_gpu_metrics=False,
    allow_cpu_metrics=True,
    metrics_address="0.0.0.0",
    metrics_port=9002,
    metrics_interval_ms=1500.5,
    metrics_config=("summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01"),
    model_load_thread_count=2,
    buffer_manager_thread_count=0,
    pinned_memory_pool_byte_size=1 << 20,
    cuda_memory_pool_byte_size={1: 2048, 0: 1024},
    response_cache_byte_size=4096,
    cache_config=("redis,host=localhost",),
    cache_directory=pathlib.Path("/user/caches"),
    trace_config=("rate=100", "triton,file=/tmp/trace.json"),
    rate_limit="execution_count",
    backend_config=("python,shm-default-byte-size=1048576",),
    allow_sagemaker=True,
    sagemaker_port=9080,
    sagemaker_safe_port_range="9000-9002",
    sagemaker_thread_count=3,
)


def _flags(argv):
    return [word.split("=", 1)[0] for word in argv[1:]]


def test_defaults_give_the_library_flags_and_the_three_ports_only():
    argv = build_argv(TritonConfig(), **PATHS)
    assert argv == [
        "/opt/ts/bin/tritonserver",
        "--model-repository=/tmp/repo",
        "--model-control-mode=explicit",
        "--load-model=*",
        "--disable-auto-complete-config",
        "--backend-directory=/opt/ts/backends",
        "--cache-directory=/opt/ts/caches",
        "--backend-config=python,shm-region-prefix-name=pytriton_abc_",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
    ]


def test_every_field_has_a_flag_or_comes_through_a_keyword():
    fields = {field.name for field in dataclasses.fields(TritonConfig)}
    assert fields == set(OPTION_FLAGS) | FIELDS_FROM_KEYWORDS | PYTRITON_SETTINGS
    assert not set(OPTION_FLAGS) & FIELDS_FROM_KEYWORDS
    assert not (set(OPTION_FLAGS) | FIELDS_FROM_KEYWORDS) & PYTRITON_SETTINGS


def test_pytriton_settings_never_reach_the_argv():
    argv = build_argv(TritonConfig(model_backend="python"), **PATHS)
    assert not any("backend=python" in word or "model-backend" in word for word in argv)
    # The OpenAI-compatible API's port is served by pytriton itself, beside tritonserver.
    argv = build_argv(TritonConfig(openai_port=9123, drain_serving_s=2.0), **PATHS)
    assert not any("9123" in word or "openai" in word or "drain" in word for word in argv)


def test_every_flag_written_exists_in_triton_2_51_and_none_is_deprecated():
    used = set(OPTION_FLAGS.values()) | set(LIBRARY_FLAGS)
    assert used <= TRITON_2_51_FLAGS
    assert not used & DEPRECATED_FLAGS
    assert set(_flags(build_argv(EVERY_FIELD_SET, **PATHS))) <= used


def test_every_word_is_one_name_value_pair():
    # One word per option: no shell, and values such as '*' or 'local,size=N' stay intact.
    for word in build_argv(EVERY_FIELD_SET, **PATHS)[1:]:
        if word == "--disable-auto-complete-config":  # a switch: it takes no value
            continue
        name, sep, value = word.partition("=")
        assert name.startswith("--") and sep == "=" and value, word


def test_every_set_field_reaches_the_argv():
    argv = build_argv(EVERY_FIELD_SET, **PATHS)
    for word in [
        "--id=srv",
        "--log-verbose=1",
        "--log-format=ISO8601",
        "--log-file=/tmp/triton.log",
        "--exit-timeout-secs=5",
        "--http-address=127.0.0.1",
        "--http-header-forward-pattern=x-.*",
        "--http-thread-count=4",
        "--http-restricted-api=model-repository,statistics:token=abc",
        "--grpc-infer-allocation-pool-size=16",
        "--grpc-server-cert=/certs/server.crt",
        "--grpc-infer-response-compression-level=low",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-restricted-protocol=model-repository:token=abc",
        "--metrics-interval-ms=1500.5",
        "--buffer-manager-thread-count=0",
        "--pinned-memory-pool-byte-size=1048576",
        "--rate-limit=execution_count",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
        "--allow-sagemaker=true",
        "--sagemaker-port=9080",
        "--sagemaker-safe-port-range=9000-9002",
        "--sagemaker-thread-count=3",
    ]:
        assert word in argv
    assert len(argv) == len(set(argv))


def test_booleans_are_written_as_true_or_false():
    argv = build_argv(TritonConfig(log_info=True, log_warning=False, allow_grpc=False, strict_readiness=True), **PATHS)
    assert "--log-info=true" in argv and "--log-warning=false" in argv
    assert "--allow-grpc=false" in argv and "--strict-readiness=true" in argv


def test_mutual_ssl_false_writes_no_flag_because_triton_would_turn_ssl_on():
    argv = build_argv(TritonConfig(grpc_use_ssl_mutual=False), **PATHS)
    assert not any(word.startswith("--grpc-use-ssl") for word in argv)
    argv = build_argv(TritonConfig(grpc_use_ssl=True, grpc_use_ssl_mutual=True), **PATHS)
    assert "--grpc-use-ssl=true" in argv and "--grpc-use-ssl-mutual=true" in argv


def test_ports_follow_the_config():
    argv = build_argv(TritonConfig(http_port=9000, grpc_port=9001, metrics_port=9002), **PATHS)
    assert ["--http-port=9000", "--grpc-port=9001", "--metrics-port=9002"] == [w for w in argv if "-port=" in w]


def test_response_cache_size_becomes_a_local_cache_config():
    argv = build_argv(TritonConfig(response_cache_byte_size=1024 * 1024), **PATHS)
    assert "--cache-config=local,size=1048576" in argv
    assert not any(word.startswith("--response-cache-byte-size") for word in argv)


def test_list_fields_repeat_their_flag_in_order():
    config = TritonConfig(cache_config=["local,size=10", "local,x=y"], trace_config=["rate=1", "level=TIMESTAMPS"])
    argv = build_argv(config, **PATHS)
    assert [w for w in argv if w.startswith("--cache-config")] == [
        "--cache-config=local,size=10",
        "--cache-config=local,x=y",
    ]
    assert [w for w in argv if w.startswith("--trace-config")] == [
        "--trace-config=rate=1",
        "--trace-config=level=TIMESTAMPS",
    ]


def test_backend_config_order_is_prefix_then_library_items_then_user_items():
    config = TritonConfig(backend_config=["python,shm-default-byte-size=4194304"])
    argv = build_argv(config, **PATHS, extra_backend_config=["python,shm-growth-byte-size=1048576"])
    assert [w for w in argv if w.startswith("--backend-config")] == [
        "--backend-config=python,shm-region-prefix-name=pytriton_abc_",
        "--backend-config=python,shm-growth-byte-size=1048576",
        "--backend-config=python,shm-default-byte-size=4194304",
    ]


def test_cuda_pool_integer_means_gpu_0_and_a_mapping_one_flag_per_device():
    assert "--cuda-memory-pool-byte-size=0:512" in build_argv(TritonConfig(cuda_memory_pool_byte_size=512), **PATHS)
    argv = build_argv(TritonConfig(cuda_memory_pool_byte_size={1: 2048, 0: 1024}), **PATHS)
    assert [w for w in argv if w.startswith("--cuda")] == [
        "--cuda-memory-pool-byte-size=0:1024",
        "--cuda-memory-pool-byte-size=1:2048",
    ]


def test_model_repository_comes_from_the_keyword_not_the_config():
    argv = build_argv(TritonConfig(model_repository=pathlib.Path("/elsewhere")), **PATHS)
    assert [w for w in argv if w.startswith("--model-repository")] == ["--model-repository=/tmp/repo"]


def test_users_cache_directory_replaces_the_bundled_one():
    argv = build_argv(TritonConfig(cache_directory=pathlib.Path("/user/caches")), **PATHS)
    assert [w for w in argv if w.startswith("--cache-directory")] == ["--cache-directory=/user/caches"]


def test_load_model_star_is_the_only_load_model():
    argv = build_argv(EVERY_FIELD_SET, **PATHS)
    assert [w for w in argv if w.startswith("--load-model")] == ["--load-model=*"]
    assert "--model-control-mode=explicit" in argv


@pytest.mark.parametrize("prefix", ["", "a/b", "a,b", "a=b", "a b"])
def test_a_bad_shm_prefix_is_rejected(prefix):
    with pytest.raises(PyTritonBadParameterError, match="shm_region_prefix"):
        build_argv(TritonConfig(), **{**PATHS, "shm_region_prefix": prefix})


def test_the_user_cannot_change_the_shm_prefix():
    config = TritonConfig(backend_config=["python,shm-region-prefix-name=mine"])
    with pytest.raises(PyTritonBadParameterError, match="'python,shm-region-prefix-name=mine' is not allowed"):
        build_argv(config, **PATHS)


def test_sagemaker_port_is_written_whenever_the_endpoint_is_on():
    assert "--sagemaker-port=8080" in build_argv(TritonConfig(allow_sagemaker=True), **PATHS)
    off = build_argv(TritonConfig(allow_sagemaker=False), **PATHS)
    assert "--allow-sagemaker=false" in off and not any(word.startswith("--sagemaker-port") for word in off)
    assert not any("sagemaker" in word for word in build_argv(TritonConfig(), **PATHS))


def test_metrics_config_repeats_its_flag_in_order():
    argv = build_argv(TritonConfig(metrics_config=["summary_latencies=true", "counter_latencies=false"]), **PATHS)
    assert [w for w in argv if w.startswith("--metrics-config")] == [
        "--metrics-config=summary_latencies=true",
        "--metrics-config=counter_latencies=false",
    ]


def test_a_restriction_given_as_one_string_is_one_flag():
    argv = build_argv(TritonConfig(http_restricted_api="model-repository,statistics:token=abc"), **PATHS)
    assert [w for w in argv if w.startswith("--http-restricted-api")] == [
        "--http-restricted-api=model-repository,statistics:token=abc"
    ]
