"""The model of the GPU path: a small torch MLP, the same weights on both servers.

Both sides build it with `build` (the reference's ``model.py`` imports this file from its model
folder, ours from bench/): the weights come from a fixed seed on the CPU, then move to the
device, so both servers compute the same function and their answers can be compared.
"""

from __future__ import annotations

from typing import Any

FEATURES = 512
HIDDEN = 2048
SEED = 12


def build(device: str) -> Any:
    """The MLP (512 -> 2048 -> ReLU -> 512), in eval mode, on `device`."""
    import torch

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(SEED)
    try:
        model = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, FEATURES)
        )
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval().to(device)
