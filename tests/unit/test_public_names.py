"""The public names of the published API and of the docs: a snapshot, so that moving code
between modules can never drop one (the whole suite runs code written against them)."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    'pytriton.triton': (
        'DEFAULT_PROTECTED_ENDPOINTS', 'DefaultTritonLifecyclePolicy', 'RemoteTriton', 'TRITON_ACCESS_HEADER',
        'Triton', 'TritonBase', 'TritonConfig', 'TritonLifecyclePolicy', 'TritonSecurityConfig',
        'VALID_TRITON_ENDPOINTS', 'VertextAILifecyclePolicy',
    ),
    'pytriton.remote': (
        'RemoteTriton',
    ),
    'pytriton.decorators': (
        'ConstantPadder', 'InferenceRequest', 'InferenceRequests', 'InferenceResult', 'InferenceResults',
        'InputNames', 'ModelConfigDict', 'ServedModelConfig', 'TritonContext', 'batch', 'convert_output',
        'fill_optionals', 'first_value', 'get_inference_request_batch_size', 'get_model_config',
        'get_triton_context', 'group_by_keys', 'group_by_values', 'pad_batch', 'sample', 'triton_context',
    ),
    'pytriton.model_config': (
        'DeviceKind', 'DynamicBatcher', 'EnsembleStep', 'InstancePlacement', 'InstanceSetup', 'ModelConfig',
        'ModelWarmup', 'QueuePolicy', 'SequenceBatcher', 'Tensor', 'TimeoutAction', 'WarmupInput',
    ),
    'pytriton.client': (
        'AsyncioDecoupledModelClient', 'AsyncioModelClient', 'ClientModelConfig', 'DecoupledModelClient',
        'FuturesModelClient', 'ModelClient', 'PyTritonClientClosedError',
        'PyTritonClientDecoupledMismatchError', 'PyTritonClientError', 'PyTritonClientInferenceServerError',
        'PyTritonClientInvalidUrlError', 'PyTritonClientModelDoesntSupportBatchingError',
        'PyTritonClientModelUnavailableError', 'PyTritonClientQueueFullError',
        'PyTritonClientRequestLostError', 'PyTritonClientTimeoutError', 'PyTritonClientValueError',
        'TensorSpec',
    ),
    'pytriton.client.utils': (
        'LATEST_MODEL_VERSION', 'ModelState', 'TritonUrl', 'create_client_from_url',
        'get_client_lib_from_client', 'get_model_config', 'get_model_state', 'parse_grpc_response',
        'parse_http_response', 'wait_for_model_ready', 'wait_for_server_ready',
    ),
    'pytriton.client.auth': (
        'ACCESS_TOKEN_HEADER', 'GRPC_HEADER_PREFIX', 'PyTritonClientAuthHeaderError', 'create_auth_headers',
        'extract_access_token_from_headers',
    ),
    'pytriton.client.exceptions': (
        'PyTritonClientClosedError', 'PyTritonClientDecoupledMismatchError', 'PyTritonClientError',
        'PyTritonClientInferenceServerError', 'PyTritonClientInvalidUrlError',
        'PyTritonClientModelDoesntSupportBatchingError', 'PyTritonClientModelUnavailableError',
        'PyTritonClientQueueFullError', 'PyTritonClientRequestLostError', 'PyTritonClientTimeoutError',
        'PyTritonClientValueError',
    ),
    'pytriton.exceptions': (
        'PyTritonBadParameterError', 'PyTritonError', 'PyTritonInvalidOperationError',
        'PyTritonModelConfigError', 'PyTritonModelHangError', 'PyTritonModelRestartLimitError',
        'PyTritonRuntimeError', 'PyTritonServerCrashedError', 'PyTritonServerError',
        'PyTritonServerStartupError', 'PyTritonUnrecoverableError', 'PyTritonValidationError',
    ),
    'pytriton.constants': (
        'CREATE_TRITON_CLIENT_TIMEOUT_S', 'DEFAULT_GRPC_PORT', 'DEFAULT_HTTP_PORT', 'DEFAULT_METRICS_PORT',
        'DEFAULT_TRITON_STARTUP_TIMEOUT_S', 'METRICS_PERIOD_ENV', 'PYTRITON_HOME', 'TRITON_CONTEXT_FIELD_NAME',
        'TRITON_LOCAL_IP', 'TRITON_PYTHON_BACKEND_INTERPRETER_DIRNAME', 'pytriton_home',
    ),
    'pytriton.metrics': (
        'Counter', 'DEFAULT_BUCKETS', 'Gauge', 'Histogram',
    ),
    'pytriton.proxy.types': (
        'Request', 'Requests', 'Response', 'Responses',
    ),
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_is_still_there(module):
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(imported, name)]
    assert missing == [], f"{module} lost {missing}"
