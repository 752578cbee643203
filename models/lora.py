"""LoRA model code: the LoRALinear wrapper, and copies of a model that share its weights (the model
an adapter is injected into, without a second copy of the foundation's tensors).

    from edgeshare.models.lora import LoRALinear, shared_copy

    adapted = shared_copy(foundation)
    adapted.fc1 = LoRALinear(adapted.fc1, rank=8, alpha=16.0)   # adapted.fc1.base.weight IS foundation.fc1.weight
"""

import copy
from typing import Any, Dict

import torch
from torch import nn

__all__ = ["LoRALinear", "shared_copy"]


class LoRALinear(nn.Module):
    """y = base(x) + lora_b(lora_a(x)) * (alpha / rank).

    Args:
      base: the wrapped nn.Linear (its weights are the foundation's).
      rank: the adapter rank r.
      alpha: the LoRA alpha; the update is scaled by alpha / rank.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        if rank <= 0:
            raise ValueError(f"LoRA rank must be positive, got {rank}")
        self.base = base
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)
        self.rank = rank
        self.alpha = float(alpha)
        self.scale = float(alpha) / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scale


def shared_copy(module: nn.Module) -> nn.Module:
    """A copy of module whose parameters and buffers ARE module's: the structure is copied (so
    adapters can be injected into it), no weight is.

    Args:
      module: e.g. the bare foundation.

    Returns:
      The copy.
    """
    memo: Dict[int, Any] = {id(t): t for t in module.parameters()}
    memo.update({id(t): t for t in module.buffers()})
    return copy.deepcopy(module, memo)
