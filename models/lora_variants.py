"""Adapter models whose names say nothing about what they share with the foundation.

The exporter recognises foundation weights by dtype, shape and bytes (FoundationDataPolicy); these
models are the cases a name rule got wrong:
  - down_up_lora: LoRA layers whose low-rank weights are `down_proj` / `up_proj` and whose wrapped
    layer is `layer` (no "lora", no "base" in any name);
  - tied_lm_lora: a tiny language model whose lm_head shares the embedding's weight (one tensor
    under two names), with down/up adapters on its projection and on the lm_head;
  - replaced_weight: one adapter that replaces a foundation weight outright (not a LoRA) next to
    one plain LoRA adapter.
Each function returns what export_lora --model takes: (foundation, {adapter: module}, inputs).
"""

from typing import Dict, Sequence, Tuple

import torch
from edgeshare.models.lora import shared_copy
from torch import nn

__all__ = [
    "DownUpLoRA",
    "TinyLM",
    "down_up_lora",
    "replaced_weight",
    "share_foundation",
    "tied_lm_input",
    "tied_lm_lora",
    "wrap_down_up",
]

Export = Tuple[nn.Module, Dict[str, nn.Module], Tuple[torch.Tensor, ...]]


class DownUpLoRA(nn.Module):
    """y = layer(x) + up_proj(down_proj(x)) * scale, the low-rank pair drawn from `seed`.

    Args:
      layer: the wrapped nn.Linear (the foundation's weights).
      rank: the rank of down_proj [rank, in] and up_proj [out, rank].
      scale: the update's scale.
      seed: seeds down_proj then up_proj, entries N(0, 0.2^2).
    """

    def __init__(self, layer: nn.Linear, rank: int, scale: float, seed: int) -> None:
        super().__init__()
        self.layer = layer
        self.down_proj = nn.Linear(layer.in_features, rank, bias=False)
        self.up_proj = nn.Linear(rank, layer.out_features, bias=False)
        self.scale = scale
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.down_proj.weight.copy_(torch.randn(self.down_proj.weight.shape, generator=g) * 0.2)
            self.up_proj.weight.copy_(torch.randn(self.up_proj.weight.shape, generator=g) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.layer(x) + self.up_proj(self.down_proj(x)) * self.scale


def share_foundation(foundation: nn.Module) -> nn.Module:
    """A copy of foundation whose parameters and buffers ARE the foundation's (no weight copied)."""
    return shared_copy(foundation)


def wrap_down_up(foundation: nn.Module, layers: Sequence[str], rank: int, seed: int) -> nn.Module:
    """share_foundation(foundation) with each named nn.Linear wrapped in DownUpLoRA (seed + i)."""
    model = share_foundation(foundation)
    for i, name in enumerate(layers):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, DownUpLoRA(getattr(parent, child), rank, 0.5, seed + i))
    return model.eval()


class _Mlp(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _mlp_input() -> torch.Tensor:
    return torch.randn(3, 16, generator=torch.Generator().manual_seed(7))


def down_up_lora() -> Export:
    """An MLP with two down/up adapters ("chat" on fc1 and fc2, "code" on fc2 and fc3)."""
    foundation = _Mlp(0).eval()
    adapters = {
        "chat": wrap_down_up(foundation, ("fc1", "fc2"), 4, 1),
        "code": wrap_down_up(foundation, ("fc2", "fc3"), 2, 11),
    }
    return foundation, adapters, (_mlp_input(),)


class TinyLM(nn.Module):
    """tokens [T] -> embed -> relu(proj) -> lm_head [T, vocab]; lm_head.weight is embed.weight.

    Args:
      vocab: vocabulary size.
      dim: embedding width.
      seed: seeds every weight.
      tied: lm_head shares the embedding's tensor; False gives it an equal copy instead.
    """

    def __init__(self, vocab: int = 48, dim: int = 16, seed: int = 0, tied: bool = True) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight
        else:
            with torch.no_grad():
                self.lm_head.weight.copy_(self.embed.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.lm_head(torch.relu(self.proj(self.embed(tokens))))


def tied_lm_input(vocab: int = 48) -> torch.Tensor:
    """Seeded int64 tokens [6] below vocab."""
    return torch.randint(0, vocab, (6,), generator=torch.Generator().manual_seed(9))


def tied_lm_lora(tied: bool = True) -> Export:
    """TinyLM with "chat" (down/up on proj and lm_head) and "code" (down/up on proj)."""
    foundation = TinyLM(tied=tied).eval()
    adapters = {
        "chat": wrap_down_up(foundation, ("proj", "lm_head"), 4, 21),
        "code": wrap_down_up(foundation, ("proj",), 2, 31),
    }
    return foundation, adapters, (tied_lm_input(),)


def replaced_weight() -> Export:
    """Adapter "tuned" replaces fc2.weight with other values (the rest is the foundation's);
    adapter "lora" is a plain down/up adapter on fc2 over the foundation's fc2.weight."""
    foundation = _Mlp(0).eval()
    tuned = share_foundation(foundation)
    with torch.no_grad():
        tuned.fc2.weight = nn.Parameter(foundation.fc2.weight * 0.5 + 0.01)
    adapters = {"tuned": tuned.eval(), "lora": wrap_down_up(foundation, ("fc2",), 4, 41)}
    return foundation, adapters, (_mlp_input(),)
