"""The SageMaker and Vertex AI endpoints skip Triton's access-token check: refused while APIs are
restricted, unless confirmed."""

import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.server.config import TritonConfig
from pytriton.server.security import TritonSecurityConfig, check_unguarded_endpoints


@pytest.mark.parametrize("field", ["allow_sagemaker", "allow_vertex_ai"])
def test_an_unguarded_endpoint_with_restricted_apis_is_refused_naming_the_way_out(field):
    config = TritonConfig(**{field: True})
    with pytest.raises(PyTritonBadParameterError, match="without the access-token check") as caught:
        check_unguarded_endpoints(config, TritonSecurityConfig())
    assert "allow_unguarded_endpoints=True" in caught.value.message
    assert "restricted_endpoints=[]" in caught.value.message
    check_unguarded_endpoints(config, TritonSecurityConfig(allow_unguarded_endpoints=True))
    check_unguarded_endpoints(config, TritonSecurityConfig(restricted_endpoints=[]))


def test_without_those_endpoints_nothing_is_refused():
    check_unguarded_endpoints(TritonConfig(), TritonSecurityConfig())


def test_the_confirmation_is_a_bool():
    with pytest.raises(PyTritonBadParameterError, match="allow_unguarded_endpoints='yes'"):
        TritonSecurityConfig(allow_unguarded_endpoints="yes")
