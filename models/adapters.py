"""Seeded LoRA adapters: the A and B matrices as a state dict, or a foundation wrapped in LoRALinear."""

import copy
from typing import Any, Dict, Optional, Sequence

import torch
from edgeshare.models.lora import LoRALinear
from torch import nn

__all__ = ["lora_state_dict", "with_lora"]


def lora_state_dict(
    model: nn.Module, layers: Sequence[str], rank: int, seed: int, scale: float = 0.1
) -> Dict[str, torch.Tensor]:
    """Seeded LoRA A and B matrices ("<layer>.lora_a.weight", "<layer>.lora_b.weight") for `layers`.

    Entries are N(0, scale^2), drawn layer by layer, A before B, from one generator seeded by
    `seed`: the same seed gives the same adapter on every machine.

    Args:
      model: the foundation whose nn.Linear layers are adapted.
      layers: their names, in drawing order.
      rank: the LoRA rank.
      seed: seeds both matrices.
      scale: standard deviation of the entries.

    Returns:
      The adapter as a state dict.

    Raises:
      TypeError: a named layer is not an nn.Linear.
    """
    g = torch.Generator().manual_seed(seed)
    out: Dict[str, torch.Tensor] = {}
    for name in layers:
        lin = model.get_submodule(name)
        if not isinstance(lin, nn.Linear):
            raise TypeError(f"layer '{name}' is {type(lin).__name__}, not nn.Linear")
        out[f"{name}.lora_a.weight"] = torch.randn(rank, lin.in_features, generator=g) * scale
        out[f"{name}.lora_b.weight"] = torch.randn(lin.out_features, rank, generator=g) * scale
    return out


def with_lora(
    foundation: nn.Module,
    rank: int,
    alpha: float,
    seed: int,
    std: float,
    layers: Optional[Sequence[str]] = None,
) -> nn.Module:
    """A copy of foundation with its nn.Linear layers wrapped in LoRALinear, A and B from
    lora_state_dict(foundation, layers, rank, seed, std).

    The copy shares the foundation's parameter tensors (no copy of the large weights).

    Args:
      foundation: the bare model.
      rank: LoRA rank.
      alpha: LoRA alpha.
      seed: seeds A and B.
      std: their standard deviation.
      layers: the layers to wrap (None: every nn.Linear, in module order).

    Returns:
      The LoRA model, in eval mode.
    """
    if layers is None:
        layers = [name for name, m in foundation.named_modules() if isinstance(m, nn.Linear)]
    weights = lora_state_dict(foundation, layers, rank, seed, std)
    memo: Dict[int, Any] = {id(p): p for p in foundation.parameters()}
    model = copy.deepcopy(foundation, memo)
    for name in layers:
        wrapped = LoRALinear(model.get_submodule(name), rank, alpha)
        with torch.no_grad():
            wrapped.lora_a.weight.copy_(weights[f"{name}.lora_a.weight"])
            wrapped.lora_b.weight.copy_(weights[f"{name}.lora_b.weight"])
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, wrapped)
    return model.eval()
