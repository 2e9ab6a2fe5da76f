"""An ensemble's steps, checked against the bound models -> its ``config.pbtxt``.

Pure functions. `plan_ensemble` resolves every step's tensor mapping, derives the ensemble's
inputs and outputs (with the dtypes and shapes the step models declared), and refuses at
`Triton.bind_ensemble` what tritonserver would refuse only at load time, or not at all: an
unknown model or tensor, a tensor written twice or never, a dtype or shape that does not match
between the step that writes a tensor and the one that reads it, a cycle, steps that disagree
on batching. `ensemble_config_proto` writes Triton's ``ensemble_scheduling``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
from tritonclient.grpc import model_config_pb2 as pb

from pytriton.exceptions import PyTritonBadParameterError
from pytriton.model_config.ensemble import EnsembleStep
from pytriton.model_config.tensor import Tensor
from pytriton.repository.pbtxt import to_triton_data_type


@dataclasses.dataclass(frozen=True)
class StepModel:
    """What a step needs to know of a bound model."""

    version: int
    inputs: Tuple[Tensor, ...]
    outputs: Tuple[Tensor, ...]
    max_batch_size: int  # 0: the model takes no batches
    decoupled: bool


@dataclasses.dataclass(frozen=True)
class ResolvedStep:
    """A step with its maps written out: model tensor name -> ensemble tensor name."""

    model_name: str
    model_version: int
    input_map: Dict[str, str]
    output_map: Dict[str, str]


@dataclasses.dataclass(frozen=True)
class EnsemblePlan:
    """A checked ensemble: its tensors, batching and steps in the order they run."""

    model_name: str
    inputs: Tuple[Tensor, ...]
    outputs: Tuple[Tensor, ...]
    max_batch_size: int
    decoupled: bool
    steps: Tuple[ResolvedStep, ...]


def plan_ensemble(
    model_name: str,
    steps: Sequence[EnsembleStep],
    models: Mapping[str, StepModel],
    inputs: Optional[Sequence[str]] = None,
    outputs: Optional[Sequence[str]] = None,
) -> EnsemblePlan:
    """Check an ensemble against the bound `models` and resolve it.

    Args:
        model_name: the ensemble's name.
        steps: its steps, in any order (they run in the order their tensors allow).
        models: the models bound in the same `Triton`, by name.
        inputs: the ensemble's input tensor names; None: every tensor a step reads and no step writes.
        outputs: the ensemble's output tensor names; None: every tensor a step writes and no step reads.

    Raises:
        PyTritonBadParameterError: naming the ensemble, the step (its position and model) and the
            tensor at fault, and what is expected.
    """
    where = f"ensemble '{model_name}'"
    if not isinstance(steps, (list, tuple)) or not steps:
        raise PyTritonBadParameterError(f"{where}: steps must be a non-empty list of EnsembleStep, got {steps!r}")
    resolved: List[ResolvedStep] = []
    writers: Dict[str, Tuple[int, Tensor]] = {}  # ensemble tensor -> (step, the model's output)
    readers: Dict[str, List[Tuple[int, Tensor]]] = {}
    for position, step in enumerate(steps):
        if not isinstance(step, EnsembleStep):
            raise PyTritonBadParameterError(f"{where}: steps[{position}] must be an EnsembleStep, got {step!r}")
        label = f"{where}, step {position} (model '{step.model_name}')"
        model = models.get(step.model_name)
        if model is None:
            raise PyTritonBadParameterError(
                f"{label}: no model of that name is bound to this Triton; bind it before the ensemble "
                f"(bound: {sorted(models)})"
            )
        if step.model_version not in (-1, model.version):
            raise PyTritonBadParameterError(
                f"{label}: model_version={step.model_version}, but version {model.version} is the one bound"
            )
        input_map = _resolved_map(label, "inputs", step.inputs, model.inputs)
        output_map = _resolved_map(label, "outputs", step.outputs, model.outputs)
        required = [t.name for t in model.inputs if not t.optional and t.name not in input_map]
        if required:
            raise PyTritonBadParameterError(f"{label}: required input(s) {required} of the model are not mapped")
        by_name = {t.name: t for t in model.inputs}
        for model_input, tensor in input_map.items():
            readers.setdefault(tensor, []).append((position, by_name[model_input]))
        by_name = {t.name: t for t in model.outputs}
        for model_output, tensor in output_map.items():
            if tensor in writers:
                other = writers[tensor][0]
                raise PyTritonBadParameterError(
                    f"{label}: ensemble tensor '{tensor}' is already written by step {other} "
                    f"(model '{steps[other].model_name}'); each tensor has one writer"
                )
            writers[tensor] = (position, by_name[model_output])
        resolved.append(ResolvedStep(step.model_name, model.version, dict(input_map), dict(output_map)))

    for tensor, tensor_readers in readers.items():
        if tensor in writers:
            for position, wanted in tensor_readers:
                _check_match(where, tensor, steps, writers[tensor], (position, wanted))
        else:  # an ensemble input: its readers must agree
            for reader in tensor_readers[1:]:
                _check_match(where, tensor, steps, tensor_readers[0], reader)
    order = _run_order(where, steps, readers, writers)

    ensemble_inputs = _names(where, "inputs", inputs, [t for t in readers if t not in writers])
    for name in ensemble_inputs:
        if name in writers or name not in readers:
            raise PyTritonBadParameterError(
                f"{where}: input '{name}' must be a tensor some step reads and no step writes "
                f"(those: {sorted(t for t in readers if t not in writers)})"
            )
    missing = sorted(t for t in readers if t not in writers and t not in ensemble_inputs)
    if missing:
        raise PyTritonBadParameterError(f"{where}: tensor(s) {missing} are read by a step but neither written by a "
                                        "step nor inputs of the ensemble")
    ensemble_outputs = _names(where, "outputs", outputs, [t for t in writers if t not in readers])
    for name in ensemble_outputs:
        if name not in writers:
            raise PyTritonBadParameterError(
                f"{where}: output '{name}' is written by no step (written: {sorted(writers)})"
            )
    if not ensemble_outputs:
        raise PyTritonBadParameterError(f"{where}: it has no output: name the tensors it returns with outputs=[...]")

    sizes = {steps[i].model_name: models[steps[i].model_name].max_batch_size for i in range(len(steps))}
    batching = {name for name, size in sizes.items() if size > 0}
    if batching and len(batching) != len(sizes):
        raise PyTritonBadParameterError(
            f"{where}: its steps must all take batches or none: {sorted(batching)} do, "
            f"{sorted(set(sizes) - batching)} do not"
        )
    decoupled = [steps[i].model_name for i in range(len(steps)) if models[steps[i].model_name].decoupled]
    # An input every reader declares optional stays optional; an output never is.
    tensor_inputs = tuple(
        _named(readers[name][0][1], name, all(t.optional for _, t in readers[name])) for name in ensemble_inputs
    )
    tensor_outputs = tuple(_named(writers[name][1], name, False) for name in ensemble_outputs)
    return EnsemblePlan(model_name, tensor_inputs, tensor_outputs, min(sizes.values()) if batching else 0,
                        bool(decoupled), tuple(resolved[i] for i in order))


def ensemble_config_proto(plan: EnsemblePlan) -> pb.ModelConfig:
    """Triton's configuration of the ensemble (``platform: "ensemble"``)."""
    proto = pb.ModelConfig(name=plan.model_name, platform="ensemble", max_batch_size=plan.max_batch_size)
    for tensor in plan.inputs:
        proto.input.add(name=tensor.name, data_type=to_triton_data_type(np.dtype(tensor.dtype), str(tensor.name)),
                        dims=tensor.shape, optional=tensor.optional)
    for tensor in plan.outputs:
        proto.output.add(name=tensor.name, data_type=to_triton_data_type(np.dtype(tensor.dtype), str(tensor.name)),
                         dims=tensor.shape)
    for step in plan.steps:
        entry = proto.ensemble_scheduling.step.add(model_name=step.model_name, model_version=step.model_version)
        entry.input_map.update(step.input_map)
        entry.output_map.update(step.output_map)
    if plan.decoupled:
        proto.model_transaction_policy.decoupled = True
    return proto


def _resolved_map(label: str, field: str, given: Optional[Mapping[str, str]],
                  tensors: Tuple[Tensor, ...]) -> Dict[str, str]:
    names = [str(t.name) for t in tensors]
    if given is None:
        return {name: name for name in names}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise PyTritonBadParameterError(
            f"{label}: {field} names {unknown}, which the model does not declare (its {field}: {names})"
        )
    return dict(given)


def _same_kind(a: np.dtype, b: np.dtype) -> bool:
    bytes_kinds = ("O", "S", "U")
    return a == b or (a.kind in bytes_kinds and b.kind in bytes_kinds)


def _check_match(where: str, tensor: str, steps: Sequence[EnsembleStep], first: Tuple[int, Tensor],
                 second: Tuple[int, Tensor]) -> None:
    """The tensor as one step declares it fits how another declares it: dtype and shape."""
    (one, a), (two, b) = first, second
    left, right = np.dtype(a.dtype), np.dtype(b.dtype)
    sides = (f"step {one} (model '{steps[one].model_name}', tensor '{a.name}') and step {two} "
             f"(model '{steps[two].model_name}', tensor '{b.name}')")
    if not _same_kind(left, right):
        raise PyTritonBadParameterError(
            f"{where}: ensemble tensor '{tensor}' has dtype {left} in {sides.replace(' and ', f' but {right} in ', 1)}"
        )
    if len(a.shape) != len(b.shape) or any(x != y and -1 not in (x, y) for x, y in zip(a.shape, b.shape)):
        raise PyTritonBadParameterError(
            f"{where}: ensemble tensor '{tensor}' has shape {a.shape} in "
            f"{sides.replace(' and ', f' but {b.shape} in ', 1)} (-1 matches any size)"
        )


def _run_order(where: str, steps: Sequence[EnsembleStep], readers: Mapping[str, List[Tuple[int, Tensor]]],
               writers: Mapping[str, Tuple[int, Tensor]]) -> List[int]:
    """The steps in an order where each runs after the steps whose tensors it reads; a cycle is refused."""
    needs: Dict[int, Set[int]] = {position: set() for position in range(len(steps))}
    for tensor, tensor_readers in readers.items():
        if tensor in writers:
            for position, _ in tensor_readers:
                needs[position].add(writers[tensor][0])
    order: List[int] = []
    while len(order) < len(steps):
        ready = [p for p in sorted(needs) if p not in order and needs[p] <= set(order)]
        if not ready:
            stuck = [f"step {p} ('{steps[p].model_name}')" for p in sorted(needs) if p not in order]
            raise PyTritonBadParameterError(
                f"{where}: its steps read each other's tensors in a cycle: {', '.join(stuck)}"
            )
        order.extend(ready)
    return order


def _names(where: str, field: str, given: Optional[Sequence[str]], default: List[str]) -> List[str]:
    if given is None:
        return default
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not all(
        isinstance(name, str) and name for name in given
    ):
        raise PyTritonBadParameterError(f"{where}: {field} must be a list of tensor names, got {given!r}")
    return list(given)


def _named(tensor: Tensor, name: str, optional: bool) -> Tensor:
    return dataclasses.replace(tensor, name=name, optional=optional)


def step_model(version: int, inputs: Sequence[Tensor], outputs: Sequence[Tensor], config: Any) -> StepModel:
    """A bound model (its declared tensors and `ModelConfig`) as a step sees it."""
    return StepModel(version, tuple(inputs), tuple(outputs), config.triton_max_batch_size, bool(config.decoupled))
