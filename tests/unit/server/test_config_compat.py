"""TritonConfig: the published PyTriton API on top of ours (to_dict/from_dict, indexed list
variables, one-string restrictions, HTTP-or-gRPC rule, metrics_config, SageMaker fields).
No process is started."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import warnings

import pytest

from pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from pytriton.server.config import DEFAULT_SAGEMAKER_PORT, TritonConfig
from pytriton.server.config.merge import merge

P = "PYTRITON_TRITON_CONFIG_"


# --- to_dict / from_dict ------------------------------------------------------------------------


def test_to_dict_has_every_field_with_none_for_the_unset_ones():
    as_dict = TritonConfig(http_port=9000).to_dict()
    assert set(as_dict) == {field.name for field in dataclasses.fields(TritonConfig)}
    assert as_dict["http_port"] == 9000
    assert as_dict["grpc_port"] is None and as_dict["metrics_config"] is None


def test_to_dict_gives_plain_lists_and_dicts():
    config = TritonConfig(cache_config=("local,size=10",), cuda_memory_pool_byte_size={0: 1}, log_file="/tmp/l")
    as_dict = config.to_dict()
    assert as_dict["cache_config"] == ["local,size=10"] and type(as_dict["cache_config"]) is list
    assert as_dict["cuda_memory_pool_byte_size"] == {0: 1}
    assert as_dict["log_file"] == pathlib.Path("/tmp/l")
    as_dict["cache_config"].append("local,x=y")  # editing the result leaves the frozen config alone
    assert config.cache_config == ("local,size=10",)


def test_from_dict_reads_back_what_to_dict_gives():
    config = TritonConfig(
        id="a",
        http_port=9000,
        allow_grpc=False,
        metrics_interval_ms=10.5,
        log_file=pathlib.Path("/tmp/t.log"),
        backend_config=["python,a=b", "python,c=d"],
        http_restricted_api="model-repository:token=x",
        cuda_memory_pool_byte_size={0: 1024},
        metrics_config=["summary_latencies=true"],
        allow_sagemaker=True,
        sagemaker_port=9080,
    )
    assert TritonConfig.from_dict(config.to_dict()) == config
    assert TritonConfig.from_dict(TritonConfig().to_dict()) == TritonConfig()


def test_from_dict_reads_text_values_by_the_environment_rules():
    # A config file read as text: JSON strings, .ini values...
    text = json.loads(
        '{"http_port": "9000", "allow_grpc": "false", "log_verbose": "2", "metrics_interval_ms": "1.5",'
        ' "cache_config": "local,size=1;local,x=y", "log_file": "/tmp/a.log", "id": "srv",'
        ' "grpc_restricted_protocol": "model-repository:token=x"}'
    )
    config = TritonConfig.from_dict(text)
    assert config == TritonConfig(
        http_port=9000,
        allow_grpc=False,
        log_verbose=2,
        metrics_interval_ms=1.5,
        cache_config=("local,size=1", "local,x=y"),
        log_file=pathlib.Path("/tmp/a.log"),
        id="srv",
        grpc_restricted_protocol=("model-repository:token=x",),
    )


def test_from_dict_names_the_key_of_a_bad_value():
    with pytest.raises(PyTritonBadParameterError, match=r"from_dict key 'http_port'='80a'.*an integer"):
        TritonConfig.from_dict({"http_port": "80a"})
    with pytest.raises(PyTritonBadParameterError, match=r"TritonConfig.grpc_port=True is invalid.*an integer"):
        TritonConfig.from_dict({"grpc_port": True})


def test_from_dict_warns_about_and_ignores_an_unknown_key():
    with pytest.warns(UserWarning, match=r"'http_prot'.*ignored; did you mean http_port\?"):
        config = TritonConfig.from_dict({"http_prot": 9000, "grpc_port": 9001})
    assert config == TritonConfig(grpc_port=9001)


# --- indexed list variables -----------------------------------------------------------------------


def test_indexed_variables_give_one_item_each_in_index_order():
    config = TritonConfig.from_env(
        {
            P + "CACHE_CONFIG_10": "local,c=3",
            P + "CACHE_CONFIG_2": "local,b=2",
            P + "CACHE_CONFIG_0": "local,size=1048576",
            P + "METRICS_CONFIG_0": "summary_latencies=true",
        }
    )
    assert config.cache_config == ("local,size=1048576", "local,b=2", "local,c=3")  # 10 after 2: numeric order
    assert config.metrics_config == ("summary_latencies=true",)


def test_an_indexed_item_is_whole_even_with_a_semicolon():
    config = TritonConfig.from_env({P + "TRACE_CONFIG_0": "opentelemetry,resource=a=1;b=2"})
    assert config.trace_config == ("opentelemetry,resource=a=1;b=2",)


def test_plain_and_indexed_variables_add_up_plain_first():
    config = TritonConfig.from_env(
        {P + "BACKEND_CONFIG": "python,a=1;python,b=2", P + "BACKEND_CONFIG_0": "python,c=3"}
    )
    assert config.backend_config == ("python,a=1", "python,b=2", "python,c=3")


def test_restriction_fields_take_indexed_variables_too():
    config = TritonConfig.from_env(
        {P + "HTTP_RESTRICTED_API_0": "model-repository:t=1", P + "HTTP_RESTRICTED_API_1": "statistics:t=1"}
    )
    assert config.http_restricted_api == ("model-repository:t=1", "statistics:t=1")


def test_an_empty_indexed_variable_counts_as_unset():
    assert TritonConfig.from_env({P + "CACHE_CONFIG_0": " "}) == TritonConfig()


def test_a_bad_indexed_item_names_its_variable():
    with pytest.raises(PyTritonBadParameterError, match=P + "CACHE_CONFIG_1='size=10'.*'<cache>,<setting>=<value>'"):
        TritonConfig.from_env({P + "CACHE_CONFIG_0": "local,size=1", P + "CACHE_CONFIG_1": "size=10"})


def test_an_index_on_a_field_that_is_not_a_list_is_an_unknown_variable():
    with pytest.warns(UserWarning, match=P + "HTTP_PORT_0 names no TritonConfig field"):
        assert TritonConfig.from_env({P + "HTTP_PORT_0": "9000"}) == TritonConfig()


def test_indexed_variables_merge_under_explicit_fields():
    environ = {P + "CACHE_CONFIG_0": "local,size=1", P + "METRICS_CONFIG_0": "summary_latencies=true"}
    merged = merge(TritonConfig(cache_config=["local,size=2"]), environ)
    assert merged.cache_config == ("local,size=2",)  # explicit wins as a whole
    assert merged.metrics_config == ("summary_latencies=true",)


# --- restrictions given as one string -------------------------------------------------------------


def test_a_restriction_may_be_one_string_or_a_list():
    one = TritonConfig(http_restricted_api="model-repository,statistics:token=abc", grpc_restricted_protocol="a:b=c")
    assert one.http_restricted_api == ("model-repository,statistics:token=abc",)
    assert one.grpc_restricted_protocol == ("a:b=c",)
    assert one == TritonConfig(
        http_restricted_api=["model-repository,statistics:token=abc"], grpc_restricted_protocol=("a:b=c",)
    )


@pytest.mark.parametrize("value", [3, b"a:b=c", ["a:b=c", 4]])
def test_a_restriction_of_another_type_is_refused(value):
    with pytest.raises(PyTritonBadParameterError, match="http_restricted_api.*a string or a list of strings"):
        TritonConfig(http_restricted_api=value)


def test_a_restriction_string_must_have_the_restriction_shape():
    with pytest.raises(PyTritonBadParameterError, match="grpc_restricted_protocol='health'.*<header>=<value>"):
        TritonConfig(grpc_restricted_protocol="health")


# --- HTTP or gRPC ----------------------------------------------------------------------------------


def test_turning_off_both_http_and_grpc_is_refused_at_construction():
    with pytest.raises(PyTritonValidationError, match="allow_http=False with allow_grpc=False"):
        TritonConfig(allow_http=False, allow_grpc=False)
    assert TritonConfig(allow_http=False).allow_grpc is None
    assert TritonConfig(allow_grpc=False, allow_http=True).allow_http is True


def test_turning_off_both_through_the_environment_is_refused_naming_it():
    with pytest.raises(PyTritonBadParameterError, match=r"allow_http=False with allow_grpc=False.*environment"):
        TritonConfig.from_env({P + "ALLOW_HTTP": "false", P + "ALLOW_GRPC": "0"})
    with pytest.raises(PyTritonBadParameterError, match=r"allow_http=False with allow_grpc=False.*after merging"):
        merge(TritonConfig(allow_grpc=False), {P + "ALLOW_HTTP": "false"})


# --- metrics_config ----------------------------------------------------------------------------------


def test_metrics_config_items_are_setting_value_pairs():
    config = TritonConfig(metrics_config=["summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01"])
    assert config.metrics_config == ("summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01")
    with pytest.raises(PyTritonBadParameterError, match="metrics_config='summary_latencies'.*'<setting>=<value>'"):
        TritonConfig(metrics_config=["summary_latencies"])
    with pytest.raises(PyTritonBadParameterError, match="metrics_config='summary_latencies=true'.*a list"):
        TritonConfig(metrics_config="summary_latencies=true")


def test_metrics_config_from_the_environment_is_split_on_semicolons():
    environ = {P + "METRICS_CONFIG": "summary_latencies=true;counter_latencies=false"}
    assert TritonConfig.from_env(environ).metrics_config == ("summary_latencies=true", "counter_latencies=false")


# --- SageMaker -------------------------------------------------------------------------------------


def test_sagemaker_fields_and_default_port():
    config = TritonConfig(
        allow_sagemaker=True, sagemaker_port=9080, sagemaker_safe_port_range="9000-9010", sagemaker_thread_count=2
    )
    assert config.effective_sagemaker_port == 9080
    assert TritonConfig().effective_sagemaker_port == DEFAULT_SAGEMAKER_PORT == 8080


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"sagemaker_port": 0}, ["sagemaker_port", "0", "1..65535"]),
        ({"sagemaker_thread_count": 0}, ["sagemaker_thread_count", "0", "> 0"]),
        ({"allow_sagemaker": "yes"}, ["allow_sagemaker", "'yes'", "True or False"]),
        ({"sagemaker_safe_port_range": "9000"}, ["sagemaker_safe_port_range", "'9000'", "'<low>-<high>'"]),
        ({"sagemaker_safe_port_range": "9010-9000"}, ["sagemaker_safe_port_range", "low <= high"]),
        ({"sagemaker_safe_port_range": "0-10"}, ["sagemaker_safe_port_range", "'0-10'", "1 <= low"]),
        ({"sagemaker_safe_port_range": "1-70000"}, ["sagemaker_safe_port_range", "65535"]),
    ],
)
def test_bad_sagemaker_values_name_the_field(kwargs, fragments):
    with pytest.raises(PyTritonBadParameterError) as info:
        TritonConfig(**kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "clashing"),
    [
        ({"http_port": 8080}, "http_port"),
        ({"sagemaker_port": 8001}, "grpc_port"),
        ({"sagemaker_port": 8002}, "metrics_port"),
        ({"allow_vertex_ai": True, "vertex_ai_default_model": "m"}, "vertex_ai_port"),  # both default to 8080
    ],
)
def test_the_sagemaker_endpoint_needs_a_port_of_its_own(kwargs, clashing):
    environ = {"AIP_PREDICT_ROUTE": "/predict", "AIP_HEALTH_ROUTE": "/health"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PyTritonBadParameterError, match=f"sagemaker_port=.*TritonConfig.{clashing} is"):
            merge(TritonConfig(allow_sagemaker=True, **kwargs), environ)


def test_a_port_clash_with_an_endpoint_turned_off_or_sagemaker_off_is_fine():
    metrics_off = TritonConfig(allow_sagemaker=True, allow_metrics=False, sagemaker_port=8002)
    assert merge(metrics_off, {}).sagemaker_port == 8002
    assert merge(TritonConfig(allow_sagemaker=False, http_port=8080), {}).http_port == 8080
