"""Declaration -> config.pbtxt, checked field by field and through text round-trips."""

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonModelConfigError
from pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction
from pytriton.repository.pbtxt import (
    from_triton_data_type,
    model_config_proto,
    parse_pbtxt,
    to_pbtxt,
    to_triton_data_type,
)

_IN = [Tensor(shape=(1,), dtype=np.float32)]
_OUT = [Tensor(shape=(1,), dtype=np.float32)]


def _proto(config=None, **kwargs):
    config = ModelConfig() if config is None else config
    arguments = {"model_name": "Model", "inputs": _IN, "outputs": _OUT, "config": config, "instance_count": 1}
    arguments.update(kwargs)
    return model_config_proto(**arguments)


@pytest.mark.parametrize(
    ("dtype", "data_type"),
    [
        (np.bool_, pb.TYPE_BOOL),
        (np.uint8, pb.TYPE_UINT8),
        (np.uint16, pb.TYPE_UINT16),
        (np.uint32, pb.TYPE_UINT32),
        (np.uint64, pb.TYPE_UINT64),
        (np.int8, pb.TYPE_INT8),
        (np.int16, pb.TYPE_INT16),
        (np.int32, pb.TYPE_INT32),
        (np.int64, pb.TYPE_INT64),
        (np.float16, pb.TYPE_FP16),
        (np.float32, pb.TYPE_FP32),
        (np.float64, pb.TYPE_FP64),
        (np.bytes_, pb.TYPE_STRING),
        ("S7", pb.TYPE_STRING),
        (object, pb.TYPE_STRING),
    ],
)
def test_numpy_dtypes_map_to_triton_types(dtype, data_type):
    assert to_triton_data_type(np.dtype(dtype), "x") == data_type


@pytest.mark.parametrize(
    ("data_type", "dtype"),
    [(pb.TYPE_FP32, np.dtype(np.float32)), (pb.TYPE_BOOL, np.dtype(bool)), (pb.TYPE_STRING, np.dtype(object))],
)
def test_triton_types_map_back_to_numpy(data_type, dtype):
    assert from_triton_data_type(data_type) == dtype


def test_triton_type_without_numpy_counterpart_is_refused():
    with pytest.raises(PyTritonModelConfigError, match="has no numpy dtype"):
        from_triton_data_type(pb.TYPE_BF16)


@pytest.mark.parametrize("dtype", [np.complex64, np.str_, "datetime64[s]"])
def test_unsupported_dtype_is_refused_naming_tensor_and_dtype(dtype):
    with pytest.raises(PyTritonModelConfigError) as info:
        _proto(inputs=[Tensor(name="image", shape=(1,), dtype=dtype)])

    assert "'image'" in str(info.value)
    assert repr(np.dtype(Tensor(shape=(1,), dtype=dtype).dtype)) in str(info.value)


def test_a_byte_order_is_not_kept_as_published():
    # Tensor stores the scalar type, so ">f4" declares a (native) float32 tensor.
    proto = _proto(inputs=[Tensor(name="image", shape=(1,), dtype=">f4")])

    assert proto.input[0].data_type == pb.TYPE_FP32


def test_unicode_dtype_error_hints_at_bytes():
    with pytest.raises(PyTritonModelConfigError, match="np.bytes_ or object"):
        to_triton_data_type(np.dtype(str), "text")


def test_name_backend_and_tensors():
    proto = model_config_proto(
        model_name="Model",
        inputs=[Tensor(shape=(224, 224, 3), dtype=np.uint8, name="image"), Tensor(shape=(-1,), dtype=np.bytes_)],
        outputs=[Tensor(shape=(1000,), dtype=np.float32), Tensor(shape=(-1, 2), dtype=object, name="labels")],
        config=ModelConfig(),
        instance_count=1,
    )

    assert proto.name == "Model"
    assert proto.backend == "python"
    assert [(i.name, i.data_type, list(i.dims), i.optional) for i in proto.input] == [
        ("image", pb.TYPE_UINT8, [224, 224, 3], False),
        ("INPUT_2", pb.TYPE_STRING, [-1], False),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in proto.output] == [
        ("OUTPUT_1", pb.TYPE_FP32, [1000]),
        ("labels", pb.TYPE_STRING, [-1, 2]),
    ]


def test_backend_can_be_chosen():
    assert _proto(backend="custom").backend == "custom"


def test_optional_input_is_marked_and_appears_in_text():
    proto = _proto(inputs=[Tensor(shape=(1,), dtype=np.float32), Tensor(shape=(1,), dtype=np.int32, optional=True)])

    assert [i.optional for i in proto.input] == [False, True]
    assert "optional: true" in to_pbtxt(proto)


def test_batching_sets_max_batch_size_and_a_default_batcher_without_a_queue_policy():
    """No queue policy unless asked: in Triton 2.51 one makes a one-instance batcher stall 500 ms at a time."""
    proto = _proto(ModelConfig(max_batch_size=16))

    assert proto.max_batch_size == 16
    assert proto.HasField("dynamic_batching")
    assert proto.dynamic_batching == pb.ModelDynamicBatching()
    assert not proto.dynamic_batching.HasField("default_queue_policy")
    assert "dynamic_batching {\n}" in to_pbtxt(proto)


def test_request_timeout_is_the_inference_timeout_in_microseconds():
    from pytriton.client.codec import request_timeout_us

    assert request_timeout_us(2.5) == 2_500_000
    assert request_timeout_us(0.0) == 1  # zero would mean "no deadline" to Triton


def test_no_batching_gives_max_batch_size_zero_and_no_dynamic_batcher():
    config = ModelConfig(batching=False, max_batch_size=8, batcher=DynamicBatcher(max_queue_delay_microseconds=100))

    proto = _proto(config)
    text = to_pbtxt(proto)

    assert proto.max_batch_size == 0
    assert not proto.HasField("dynamic_batching")
    assert "max_batch_size" not in text
    assert "dynamic_batching" not in text


def test_dynamic_batcher_fields():
    batcher = DynamicBatcher(
        max_queue_delay_microseconds=500,
        preferred_batch_size=[2, 4],
        preserve_ordering=True,
        priority_levels=3,
        default_priority_level=2,
    )

    batching = _proto(ModelConfig(max_batch_size=8, batcher=batcher)).dynamic_batching

    assert batching.max_queue_delay_microseconds == 500
    assert list(batching.preferred_batch_size) == [2, 4]
    assert batching.preserve_ordering is True
    assert batching.priority_levels == 3
    assert batching.default_priority_level == 2
    assert not batching.HasField("default_queue_policy")
    assert len(batching.priority_queue_policy) == 0


def test_queue_policies():
    batcher = DynamicBatcher(
        priority_levels=2,
        default_priority_level=1,
        default_queue_policy=QueuePolicy(
            timeout_action=TimeoutAction.DELAY,
            default_timeout_microseconds=1000,
            allow_timeout_override=True,
            max_queue_size=10,
        ),
        priority_queue_policy={2: QueuePolicy(max_queue_size=3)},
    )

    batching = _proto(ModelConfig(batcher=batcher)).dynamic_batching

    default = batching.default_queue_policy
    assert default.timeout_action == pb.ModelQueuePolicy.DELAY
    assert default.default_timeout_microseconds == 1000
    assert default.allow_timeout_override is True
    assert default.max_queue_size == 10
    assert set(batching.priority_queue_policy) == {2}
    level_2 = batching.priority_queue_policy[2]
    assert level_2.timeout_action == pb.ModelQueuePolicy.REJECT
    assert level_2.max_queue_size == 3


def test_one_cpu_instance_group_with_the_instance_count():
    proto = _proto(instance_count=3)

    assert len(proto.instance_group) == 1
    group = proto.instance_group[0]
    assert group.count == 3
    assert group.kind == pb.ModelInstanceGroup.KIND_CPU
    assert group.name == ""


@pytest.mark.parametrize("count", [0, -1, 1.0, True])
def test_instance_count_must_be_positive_int(count):
    with pytest.raises(PyTritonModelConfigError, match=r"instance_count must be an integer >= 1") as info:
        _proto(instance_count=count)

    assert repr(count) in str(info.value)


def test_response_cache_only_when_enabled():
    assert _proto(ModelConfig(response_cache=True)).response_cache.enable is True
    assert not _proto(ModelConfig()).HasField("response_cache")
    assert "response_cache {\n  enable: true\n}" in to_pbtxt(_proto(ModelConfig(response_cache=True)))


def test_decoupled_only_when_enabled():
    assert _proto(ModelConfig(decoupled=True)).model_transaction_policy.decoupled is True
    assert not _proto(ModelConfig()).HasField("model_transaction_policy")


def test_parameters_become_string_values():
    proto = _proto(parameters={"shared-memory-socket": "ipc:///tmp/x", "workspace": "/tmp/ws"})

    assert {key: value.string_value for key, value in proto.parameters.items()} == {
        "shared-memory-socket": "ipc:///tmp/x",
        "workspace": "/tmp/ws",
    }
    assert 'key: "workspace"\n  value {\n    string_value: "/tmp/ws"\n  }' in to_pbtxt(proto)


def test_no_parameters_by_default():
    assert len(_proto().parameters) == 0


@pytest.mark.parametrize("parameters", [{"": "x"}, {"a": 1}, {2: "b"}])
def test_bad_parameters_are_refused(parameters):
    with pytest.raises(PyTritonModelConfigError, match="parameters must map non-empty strings to strings"):
        _proto(parameters=parameters)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "has space", "ü", None, 5])
def test_bad_model_name_is_refused_naming_it(name):
    with pytest.raises(PyTritonModelConfigError) as info:
        _proto(model_name=name)

    assert "model_name" in str(info.value)
    assert repr(name) in str(info.value)


@pytest.mark.parametrize("name", ["Model", "add_sub-2", "v1.0", "_x"])
def test_good_model_names_are_kept(name):
    assert _proto(model_name=name).name == name


def test_duplicate_input_names_are_refused_naming_the_duplicate():
    inputs = [Tensor(shape=(1,), dtype=np.float32, name="a"), Tensor(shape=(1,), dtype=np.float32, name="a")]

    with pytest.raises(PyTritonModelConfigError, match=r"'Model'.*unique.*'a'"):
        _proto(inputs=inputs)


def test_duplicate_output_names_are_refused_naming_the_duplicate():
    outputs = [Tensor(shape=(1,), dtype=np.float32), Tensor(shape=(1,), dtype=np.float32, name="OUTPUT_1")]

    with pytest.raises(PyTritonModelConfigError, match=r"unique.*'OUTPUT_1'"):
        _proto(outputs=outputs)


def test_same_name_for_an_input_and_an_output_is_allowed():
    proto = _proto(inputs=[Tensor(shape=(1,), dtype=np.float32, name="x")], outputs=[Tensor((1,), np.float32, "x")])

    assert proto.input[0].name == proto.output[0].name == "x"


def test_config_must_be_model_config():
    with pytest.raises(PyTritonModelConfigError, match="config must be a ModelConfig"):
        _proto(config={"max_batch_size": 4})


def test_full_config_round_trips_through_text():
    config = ModelConfig(
        max_batch_size=8,
        batcher=DynamicBatcher(
            max_queue_delay_microseconds=100,
            preferred_batch_size=[4, 8],
            preserve_ordering=True,
            priority_levels=2,
            default_priority_level=1,
            default_queue_policy=QueuePolicy(max_queue_size=5),
            priority_queue_policy={1: QueuePolicy(timeout_action=TimeoutAction.DELAY), 2: QueuePolicy()},
        ),
        response_cache=True,
    )
    proto = _proto(
        config,
        inputs=[Tensor(shape=(-1,), dtype=object, name="text", optional=True)],
        instance_count=2,
        parameters={"k": "v"},
    )

    text = to_pbtxt(proto)
    parsed = parse_pbtxt(text)

    assert parsed == proto
    assert to_pbtxt(parsed) == text
    assert 'name: "Model"' in text
    assert "max_batch_size: 8" in text
    assert "timeout_action: DELAY" in text


def test_decoupled_non_batching_config_round_trips_through_text():
    proto = _proto(ModelConfig(batching=False, decoupled=True))

    parsed = parse_pbtxt(to_pbtxt(proto))

    assert parsed == proto
    assert parsed.model_transaction_policy.decoupled is True
    assert parsed.max_batch_size == 0


def test_parse_translates_bad_text():
    with pytest.raises(PyTritonModelConfigError, match="not a valid Triton ModelConfig") as info:
        parse_pbtxt("no_such_field: 1")

    assert info.value.__cause__ is not None
