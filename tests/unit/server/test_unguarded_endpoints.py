"""The SageMaker and Vertex AI endpoints skip Triton's access-token check while APIs are
restricted: warned about once by default (published code must start), quiet when confirmed,
refused when the user asks for strictness."""

import warnings

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server import security as security_module
from pytriton.server.config import TritonConfig
from pytriton.server.security import TritonSecurityConfig, check_unguarded_endpoints


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(security_module, "_WARNED_UNGUARDED", set())


@pytest.mark.parametrize("field", ["allow_sagemaker", "allow_vertex_ai"])
def test_strictness_refuses_an_unguarded_endpoint_naming_the_way_out(field):
    config = TritonConfig(**{field: True})
    with pytest.raises(PyTritonBadParameterError, match="without the access-token check") as caught:
        check_unguarded_endpoints(config, TritonSecurityConfig(allow_unguarded_endpoints=False), environ={})
    assert "allow_unguarded_endpoints=True" in caught.value.message
    assert "restricted_endpoints=[]" in caught.value.message
    check_unguarded_endpoints(config, TritonSecurityConfig(restricted_endpoints=[], allow_unguarded_endpoints=False))


@pytest.mark.parametrize("field", ["allow_sagemaker", "allow_vertex_ai"])
def test_by_default_an_unguarded_endpoint_is_warned_about_once_naming_the_port(field, caplog):
    config = TritonConfig(**{field: True})
    port = config.effective_sagemaker_port if field == "allow_sagemaker" else config.effective_vertex_ai_port
    with pytest.warns(UserWarning, match="without the access-token check") as caught:
        check_unguarded_endpoints(config, TritonSecurityConfig(), environ={})
    (warning,) = caught
    text = str(warning.message)
    assert f"(port {port})" in text
    assert "Keep that port private" in text and "allow_unguarded_endpoints=True" in text
    assert "allow_unguarded_endpoints=True" in caplog.text  # logged too, for servers without warnings shown
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_unguarded_endpoints(config, TritonSecurityConfig(), environ={})  # once per process


def test_on_vertex_ai_itself_the_warning_says_vertex_authenticates_the_port():
    config = TritonConfig(allow_vertex_ai=True)
    with pytest.warns(UserWarning, match="Vertex AI's own authentication fronts its port"):
        check_unguarded_endpoints(config, TritonSecurityConfig(), environ={"AIP_MODE": "PREDICTION"})


def test_confirming_or_restricting_nothing_is_quiet():
    config = TritonConfig(allow_vertex_ai=True, allow_sagemaker=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_unguarded_endpoints(config, TritonSecurityConfig(allow_unguarded_endpoints=True), environ={})
        check_unguarded_endpoints(config, TritonSecurityConfig(restricted_endpoints=[]), environ={})
        check_unguarded_endpoints(TritonConfig(), TritonSecurityConfig(), environ={})


def test_the_setting_is_none_true_or_false():
    assert TritonSecurityConfig().allow_unguarded_endpoints is None
    with pytest.raises(PyTritonBadParameterError, match="allow_unguarded_endpoints='yes'"):
        TritonSecurityConfig(allow_unguarded_endpoints="yes")
