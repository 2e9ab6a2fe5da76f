"""`ModelConfig`, `DynamicBatcher` and `QueuePolicy` defaults and validation."""


import pytest

from pytriton import model_config
from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import DeviceKind, DynamicBatcher, ModelConfig, QueuePolicy, TimeoutAction, common


def test_public_names_are_importable_from_both_paths():
    assert common.DynamicBatcher is model_config.DynamicBatcher
    assert common.QueuePolicy is model_config.QueuePolicy
    assert common.TimeoutAction is model_config.TimeoutAction
    assert {"ModelConfig", "Tensor", "DynamicBatcher", "QueuePolicy", "TimeoutAction", "DeviceKind"} <= set(
        model_config.__all__
    )
    assert {kind.name for kind in DeviceKind} == {"KIND_AUTO", "KIND_CPU", "KIND_GPU"}
    assert {action.name for action in TimeoutAction} == {"REJECT", "DELAY"}


def test_model_config_defaults_match_the_documented_api():
    config = ModelConfig()

    assert config.batching is True
    assert config.max_batch_size == 4
    assert config.batcher == DynamicBatcher()
    assert config.response_cache is False
    assert config.decoupled is False


def test_dynamic_batcher_defaults_match_the_documented_api():
    batcher = DynamicBatcher()

    assert batcher.max_queue_delay_microseconds == 0
    assert batcher.preferred_batch_size is None
    assert batcher.preserve_ordering is False
    assert batcher.priority_levels == 0
    assert batcher.default_priority_level == 0
    assert batcher.default_queue_policy is None
    assert batcher.priority_queue_policy is None


def test_queue_policy_defaults_match_the_documented_api():
    policy = QueuePolicy()

    assert policy.timeout_action is TimeoutAction.REJECT
    assert policy.default_timeout_microseconds == 0
    assert policy.allow_timeout_override is False
    assert policy.max_queue_size == 0


def test_fields_may_be_assigned_and_rechecked_gives_a_checked_copy():
    # Published code builds a config and then assigns its fields (its L0 warm-up tests do).
    config = ModelConfig()
    config.max_batch_size = 8
    config.batcher.preferred_batch_size = [2, 4]
    config.batcher.default_queue_policy = QueuePolicy(max_queue_size=3)
    config.batcher.default_queue_policy.timeout_action = "delay"

    copy = common.rechecked(config)

    assert copy is not config and copy.batcher is not config.batcher
    assert copy.max_batch_size == 8
    assert copy.batcher.preferred_batch_size == (2, 4)  # normalised as the constructor would
    assert copy.batcher.default_queue_policy.timeout_action is TimeoutAction.DELAY
    assert copy == ModelConfig(
        max_batch_size=8,
        batcher=DynamicBatcher(preferred_batch_size=(2, 4), default_queue_policy=QueuePolicy(
            max_queue_size=3, timeout_action=TimeoutAction.DELAY)),
    )


@pytest.mark.parametrize(
    ("assign", "named"),
    [
        (lambda c: setattr(c, "max_batch_size", "8"), "ModelConfig.max_batch_size"),
        (lambda c: setattr(c.batcher, "max_queue_delay_microseconds", -1), "max_queue_delay_microseconds"),
        (lambda c: setattr(c.batcher, "preferred_batch_size", [16]), "preferred_batch_size"),
        (lambda c: setattr(c, "decoupled", "yes"), "ModelConfig.decoupled"),
    ],
)
def test_a_bad_assigned_value_is_refused_by_rechecked_naming_the_field(assign, named):
    config = ModelConfig()
    assign(config)

    with pytest.raises(PyTritonBadParameterError, match=named):
        common.rechecked(config)


@pytest.mark.parametrize("value", [0, -1, 2.0, "8", True])
def test_max_batch_size_must_be_positive_int_when_batching(value):
    with pytest.raises(PyTritonBadParameterError) as info:
        ModelConfig(max_batch_size=value)

    message = str(info.value)
    assert "ModelConfig.max_batch_size" in message
    assert repr(value) in message
    assert ">= 1" in message


def test_max_batch_size_may_be_zero_without_batching():
    assert ModelConfig(batching=False, max_batch_size=0).max_batch_size == 0


def test_batching_must_be_bool():
    with pytest.raises(PyTritonBadParameterError, match=r"ModelConfig.batching must be a bool.*'yes'"):
        ModelConfig(batching="yes")


def test_batcher_must_be_dynamic_batcher():
    with pytest.raises(PyTritonBadParameterError, match=r"ModelConfig.batcher must be a DynamicBatcher.*\{\}"):
        ModelConfig(batcher={})


def test_preferred_batch_size_above_max_batch_size_is_refused():
    with pytest.raises(PyTritonBadParameterError, match=r"preferred_batch_size.*<= max_batch_size \(4\), got 8"):
        ModelConfig(max_batch_size=4, batcher=DynamicBatcher(preferred_batch_size=[2, 8]))


def test_preferred_batch_size_is_not_checked_without_batching():
    config = ModelConfig(batching=False, batcher=DynamicBatcher(preferred_batch_size=[16]))

    assert config.batcher.preferred_batch_size == (16,)


def test_response_cache_with_decoupled_is_refused():
    with pytest.raises(PyTritonBadParameterError, match=r"response_cache=True cannot be combined.*decoupled=True"):
        ModelConfig(response_cache=True, decoupled=True)


def test_preferred_batch_size_is_stored_as_tuple():
    sizes = [2, 4]
    batcher = DynamicBatcher(preferred_batch_size=sizes)
    sizes.append(8)

    assert batcher.preferred_batch_size == (2, 4)


@pytest.mark.parametrize("sizes", [[0], [2, -1], ["2"], "24", 4])
def test_bad_preferred_batch_size_is_refused(sizes):
    with pytest.raises(PyTritonBadParameterError, match=r"DynamicBatcher.preferred_batch_size"):
        DynamicBatcher(preferred_batch_size=sizes)


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_queue_delay_microseconds", -1), ("priority_levels", -2), ("max_queue_delay_microseconds", 1.5)],
)
def test_negative_or_non_int_batcher_fields_are_refused(field, value):
    with pytest.raises(PyTritonBadParameterError) as info:
        DynamicBatcher(**{field: value})

    assert f"DynamicBatcher.{field}" in str(info.value)
    assert repr(value) in str(info.value)


def test_preserve_ordering_must_be_bool():
    with pytest.raises(PyTritonBadParameterError, match=r"preserve_ordering must be a bool.*1"):
        DynamicBatcher(preserve_ordering=1)


def test_default_priority_level_must_be_within_levels():
    with pytest.raises(PyTritonBadParameterError, match=r"default_priority_level must be an integer in 1..3.*got 4"):
        DynamicBatcher(priority_levels=3, default_priority_level=4)
    with pytest.raises(PyTritonBadParameterError, match=r"default_priority_level.*in 1..3.*got 0"):
        DynamicBatcher(priority_levels=3, default_priority_level=0)


def test_default_priority_level_must_be_zero_without_levels():
    with pytest.raises(PyTritonBadParameterError, match=r"must be 0 when priority_levels is 0.*2"):
        DynamicBatcher(default_priority_level=2)


def test_priority_queue_policy_keys_must_be_levels():
    with pytest.raises(PyTritonBadParameterError, match=r"priority_queue_policy keys.*got key 3"):
        DynamicBatcher(priority_levels=2, default_priority_level=1, priority_queue_policy={3: QueuePolicy()})
    with pytest.raises(PyTritonBadParameterError, match=r"priority_queue_policy keys.*priority_levels=0.*got key 1"):
        DynamicBatcher(priority_queue_policy={1: QueuePolicy()})


def test_priority_queue_policy_values_must_be_queue_policies():
    with pytest.raises(PyTritonBadParameterError, match=r"priority_queue_policy\[1\] must be a QueuePolicy"):
        DynamicBatcher(priority_levels=1, default_priority_level=1, priority_queue_policy={1: {"max_queue_size": 2}})


def test_priority_queue_policy_is_copied():
    policies = {1: QueuePolicy(max_queue_size=1)}
    batcher = DynamicBatcher(priority_levels=2, default_priority_level=1, priority_queue_policy=policies)
    policies[2] = QueuePolicy()

    assert batcher.priority_queue_policy == {1: QueuePolicy(max_queue_size=1)}


def test_default_queue_policy_must_be_queue_policy():
    with pytest.raises(PyTritonBadParameterError, match=r"default_queue_policy must be a QueuePolicy or None"):
        DynamicBatcher(default_queue_policy="REJECT")


def test_timeout_action_accepts_enum_and_name():
    assert QueuePolicy(timeout_action=TimeoutAction.DELAY).timeout_action is TimeoutAction.DELAY
    assert QueuePolicy(timeout_action="delay").timeout_action is TimeoutAction.DELAY


def test_bad_timeout_action_is_refused_listing_allowed_values():
    with pytest.raises(PyTritonBadParameterError, match=r"timeout_action must be one of .*REJECT.*DELAY.*'drop'"):
        QueuePolicy(timeout_action="drop")


@pytest.mark.parametrize(
    ("field", "value"),
    [("default_timeout_microseconds", -5), ("max_queue_size", -1), ("allow_timeout_override", "no")],
)
def test_bad_queue_policy_fields_are_refused(field, value):
    with pytest.raises(PyTritonBadParameterError) as info:
        QueuePolicy(**{field: value})

    assert f"QueuePolicy.{field}" in str(info.value)
    assert repr(value) in str(info.value)


def test_max_batch_size_zero_points_to_batching_false():
    expected = r"got 0; for a model that takes no batches .* ModelConfig\(batching=False\)"
    with pytest.raises(PyTritonBadParameterError, match=expected):
        ModelConfig(max_batch_size=0)


def test_triton_max_batch_size_is_zero_for_a_model_without_a_batch_axis():
    assert ModelConfig(max_batch_size=8).triton_max_batch_size == 8
    assert ModelConfig(batching=False).triton_max_batch_size == 0
    assert ModelConfig(batching=False, max_batch_size=8).triton_max_batch_size == 0
