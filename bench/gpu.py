"""The GPU path of the benchmark (``run.py --gpu``): which device, and whether both output forms work.

`device_info` refuses, before anything starts, where torch cannot use the device (no torch, or
``torch.cuda.is_available()`` False), and otherwise says what the figures come from: the GPU's
name, its memory and compute capability, torch and CUDA versions. `check_outputs` sends one
request to the reference's ``torch_mlp`` and to ours' ``torch_mlp`` (the callable returns the
CUDA tensor) and ``torch_mlp_numpy`` (it returns a numpy array), and requires all three answers to
agree.
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, List

from perfanalyzer import BenchError
from servers import TORCH_NUMPY_MODEL, Server

TOLERANCE = 1e-3  # relative to the largest output: the same kernels, but batch shapes may differ


class NoDevice(BenchError):
    """The GPU path cannot run here; nothing was started."""


def device_info(device: str) -> Dict[str, Any]:
    """What the GPU path runs on; raises `NoDevice` where torch cannot use `device`."""
    try:
        import torch
    except ImportError as exc:
        raise NoDevice(f"the GPU path serves a torch model, but torch is not importable here ({exc}); "
                       "install it into .venv (pip install torch)") from exc
    info: Dict[str, Any] = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda}
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise NoDevice(
                f"--gpu needs an NVIDIA GPU that torch can use, and torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); nothing was measured. Run it on "
                "a machine with a GPU and a CUDA build of torch"
            )
        index = torch.device(device).index or 0
        properties = torch.cuda.get_device_properties(index)
        info.update(
            name=properties.name, memory_gib=round(properties.total_memory / 2**30, 1),
            capability=f"{properties.major}.{properties.minor}", count=torch.cuda.device_count(),
        )  # fmt: skip
    else:
        info["name"] = f"{device} (no GPU: a dry run of the GPU path's plumbing; its figures say nothing of GPUs)"
    return info


def _max_difference(got: List[float], expected: List[float]) -> float:
    if len(got) != len(expected):
        return math.inf
    return max((abs(a - b) for a, b in zip(got, expected)), default=0.0)


def check_outputs(reference: Server, ours: Server, features: int = 512) -> Dict[str, Any]:
    """One request to each MLP; every answer must match the reference's within `TOLERANCE`."""
    chooser = random.Random(7)
    values = [round(chooser.uniform(-1.0, 1.0), 4) for _ in range(features)]
    expected = reference.infer("torch_mlp", values)
    scale = max((abs(value) for value in expected), default=0.0) or 1.0
    checked: Dict[str, Any] = {"values": features, "tolerance": TOLERANCE}
    for label, model in (("torch_tensor", "torch_mlp"), ("numpy", TORCH_NUMPY_MODEL)):
        got = ours.infer(model, values)
        difference = _max_difference(got, expected)
        if not difference <= TOLERANCE * scale:
            raise BenchError(
                f"ours' '{model}' (outputs returned as {label.replace('_', ' ')}) answered {len(got)} values "
                f"differing from the reference's {len(expected)} by up to {difference:g}; expected at most "
                f"{TOLERANCE * scale:g}"
            )
        checked[label] = {"model": model, "max_abs_difference": difference, "ok": True}
    return checked
