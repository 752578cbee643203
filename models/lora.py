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

__all__ = ["FoldedDoraLinear", "LinearWithBiasDelta", "LoRALinear", "shared_copy"]


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


class LinearWithBiasDelta(nn.Linear):
    """y = linear(x, weight, bias) + bias_delta: a foundation layer whose bias an adapter trained.

    The weight and bias stay the foundation's tensors (so the packed weight and its bias are the
    ones every other program shares), and the adapter's own bytes are the difference of its bias
    from the foundation's, added after.

    Args:
      weight: the foundation's weight [out, in] (shared, not copied).
      bias: the foundation's bias [out] (shared).
      trained_bias: the adapter's bias [out].
    """

    def __init__(self, weight: nn.Parameter, bias: nn.Parameter, trained_bias: torch.Tensor) -> None:
        nn.Module.__init__(self)
        self.in_features = int(weight.shape[1])
        self.out_features = int(weight.shape[0])
        self.weight = weight
        self.bias = bias
        delta = trained_bias.detach().to(bias.dtype) - bias.detach()
        self.bias_delta = nn.Parameter(delta, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return nn.functional.linear(x, self.weight, self.bias) + self.bias_delta


class FoldedDoraLinear(nn.Module):
    """A DoRA layer at inference, its constants folded: y = scale * base(x) + shift + lora_b(lora_a(x)).

    DoRA computes m / ||W + s BA|| per output row (the magnitude over the column norm, a constant
    once trained) and multiplies the whole layer by it; folded, the foundation layer (weight and
    bias) stays shared and untouched, lora_b holds B * scale * s, and shift = (1 - scale) * bias
    puts the bias back to its own value.

    Args:
      base: the foundation nn.Linear (shared, not copied).
      lora_a: A [r, in].
      lora_b: the folded B [out, r].
      scale: [out].
    """

    def __init__(self, base: nn.Linear, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.base = base
        self.lora_a = nn.Linear(lora_a.shape[1], lora_a.shape[0], bias=False)
        self.lora_b = nn.Linear(lora_b.shape[1], lora_b.shape[0], bias=False)
        with torch.no_grad():
            self.lora_a.weight.copy_(lora_a)
            self.lora_b.weight.copy_(lora_b)
        self.scale = nn.Parameter(scale.detach().clone(), requires_grad=False)
        shift = None if base.bias is None else (1 - scale.detach()) * base.bias.detach()
        self.shift = None if shift is None else nn.Parameter(shift, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.base(x) * self.scale + self.lora_b(self.lora_a(x))
        return y if self.shift is None else y + self.shift


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
