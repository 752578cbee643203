"""The built-in demo: a seeded three-layer LoRA MLP with two adapters.

Foundation (seed 0): fc1 Linear(256->512), relu, fc2 Linear(512->512), relu, fc3 Linear(512->256).
Adapters "lora_a" (seed 1) and "lora_b" (seed 2) wrap every layer in LoRALinear (rank 8, alpha 16),
with small random, non-zero A and B matrices. Example input: [4, 256] float32 (seed 3).
"""

from typing import Dict, Tuple

import torch
from edgeshare.models.adapters import with_lora
from torch import nn

__all__ = ["DemoMLP", "demo_lora", "make_adapter", "make_foundation"]

RANK = 8
ALPHA = 16.0
STD = 0.05
LAYERS = ("fc1", "fc2", "fc3")


class DemoMLP(nn.Module):
    """The bare foundation MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def make_foundation(seed: int = 0) -> DemoMLP:
    """Returns the foundation with weights drawn from seed."""
    torch.manual_seed(seed)
    return DemoMLP().eval()


def make_adapter(foundation: DemoMLP, seed: int) -> nn.Module:
    """Returns foundation with every layer wrapped in a seeded LoRALinear (rank 8, alpha 16).

    Args:
      foundation: the foundation (its weights are shared, not re-drawn).
      seed: seeds the A and B matrices (entries N(0, 0.05^2), fc1 to fc3, A before B).

    Returns:
      The LoRA model (names like "fc1.base.weight", "fc1.lora_a.weight").
    """
    return with_lora(foundation, RANK, ALPHA, seed, STD, LAYERS)


def demo_lora() -> Tuple[nn.Module, Dict[str, nn.Module], Tuple[torch.Tensor]]:
    """The demo as export_lora --model takes it: (foundation, {adapter: module}, example inputs)."""
    foundation = make_foundation(0)
    adapters = {"lora_a": make_adapter(foundation, 1), "lora_b": make_adapter(foundation, 2)}
    example = torch.randn(4, 256, generator=torch.Generator().manual_seed(3))
    return foundation, adapters, (example,)
