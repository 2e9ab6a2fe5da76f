"""`plan_ensemble` and `ensemble_config_proto`: an ensemble checked against the bound models (pure)."""

import numpy as np
import pytest

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config import EnsembleStep, Tensor
from pytriton.repository.ensemble import StepModel, ensemble_config_proto, plan_ensemble


def _t(name, dtype=np.float32, shape=(2,), optional=False):
    return Tensor(name=name, dtype=dtype, shape=shape, optional=optional)


MODELS = {
    "Pre": StepModel(1, (_t("text", bytes, (1,)),), (_t("ids", np.int64, (-1,)),), 8, False),
    "Net": StepModel(3, (_t("ids", np.int64, (4,)), _t("mask", np.bool_, (4,), optional=True)),
                     (_t("logits"),), 4, False),
    "Post": StepModel(1, (_t("logits"),), (_t("label", object, (1,)),), 8, False),
    "Flat": StepModel(1, (_t("logits"),), (_t("label", object, (1,)),), 0, False),
    "Loop": StepModel(1, (_t("logits"),), (_t("ids", np.int64, (4,)),), 8, False),
}
PIPELINE = [EnsembleStep("Post"), EnsembleStep("Pre"), EnsembleStep("Net")]


def test_inputs_outputs_batching_and_order_are_derived():
    plan = plan_ensemble("E", PIPELINE, MODELS)
    assert [(t.name, t.optional) for t in plan.inputs] == [("text", False), ("mask", True)]
    assert [t.name for t in plan.outputs] == ["label"]
    assert np.dtype(plan.inputs[0].dtype).kind == "S" and plan.outputs[0].shape == (1,)
    assert plan.max_batch_size == 4  # the smallest step's
    assert [s.model_name for s in plan.steps] == ["Pre", "Net", "Post"]  # the order tensors allow
    assert plan.steps[1].model_version == 3 and plan.steps[1].input_map == {"ids": "ids", "mask": "mask"}


def test_the_proto_is_tritons_ensemble_scheduling():
    proto = ensemble_config_proto(plan_ensemble("E", PIPELINE, MODELS))
    assert proto.platform == "ensemble" and proto.max_batch_size == 4
    assert [s.model_name for s in proto.ensemble_scheduling.step] == ["Pre", "Net", "Post"]
    assert dict(proto.ensemble_scheduling.step[2].output_map) == {"label": "label"}
    assert not proto.HasField("model_transaction_policy")


def test_renamed_tensors_and_explicit_outputs():
    steps = [EnsembleStep("Pre", outputs={"ids": "tokens"}), EnsembleStep("Net", inputs={"ids": "tokens"})]
    plan = plan_ensemble("E", steps, MODELS, outputs=["logits", "tokens"])
    assert [t.name for t in plan.outputs] == ["logits", "tokens"]


@pytest.mark.parametrize(
    ("steps", "kwargs", "message"),
    [
        ([EnsembleStep("Pre"), EnsembleStep("Gone")], {}, r"step 1 \(model 'Gone'\): no model of that name is bound"),
        ([EnsembleStep("Pre", outputs={"idz": "ids"})], {}, r"outputs names \['idz'\], which the model does not"),
        ([EnsembleStep("Net", inputs={"mask": "m"})], {}, r"required input\(s\) \['ids'\] of the model are not mapped"),
        ([EnsembleStep("Pre"), EnsembleStep("Loop")] + PIPELINE[2:], {}, r"'ids' is already written by step 0"),
        ([EnsembleStep("Pre"), EnsembleStep("Post", inputs={"logits": "ids"})], {},
         r"tensor 'ids' has dtype int64 in step 0 \(model 'Pre', tensor 'ids'\) but float32 in step 1"),
        ([EnsembleStep("Net", inputs={"ids": "x"}), EnsembleStep("Pre", inputs={"text": "x"})], {},
         r"tensor 'x' has dtype int64 .* but \|S"),
        ([EnsembleStep("Net"), EnsembleStep("Loop")], {}, r"in a cycle: step 0 \('Net'\), step 1 \('Loop'\)"),
        ([EnsembleStep("Pre"), EnsembleStep("Net"), EnsembleStep("Flat")], {}, r"must all take batches or none"),
        (PIPELINE, {"outputs": ["nothing"]}, r"output 'nothing' is written by no step"),
        (PIPELINE, {"inputs": ["ids"]}, r"input 'ids' must be a tensor some step reads and no step writes"),
        ([], {}, r"steps must be a non-empty list"),
        (["Pre"], {}, r"steps\[0\] must be an EnsembleStep"),
        ([EnsembleStep("Net", model_version=2)], {}, r"model_version=2, but version 3 is the one bound"),
    ],
)
def test_what_does_not_fit_is_refused_naming_it(steps, kwargs, message):
    with pytest.raises(PyTritonBadParameterError, match=message) as info:
        plan_ensemble("E", steps, MODELS, **kwargs)
    assert "ensemble 'E'" in str(info.value)


def test_a_shape_mismatch_is_refused():
    models = dict(MODELS, Wide=StepModel(1, (_t("logits", shape=(3,)),), (_t("out"),), 8, False))
    with pytest.raises(PyTritonBadParameterError, match=r"tensor 'logits' has shape \(2,\) in step 0 .* but \(3,\)"):
        plan_ensemble("E", [EnsembleStep("Net"), EnsembleStep("Wide")], models)


def test_step_fields_are_checked():
    with pytest.raises(PyTritonBadParameterError, match=r"EnsembleStep\('A'\).inputs must map"):
        EnsembleStep("A", inputs={"x": 1})
    with pytest.raises(PyTritonBadParameterError, match=r"model_version must be -1"):
        EnsembleStep("A", model_version=0)
