"""The models the LoRA benchmark measures, built from edgeshare.models."""

import dataclasses
from typing import Callable, Dict

import torch
from edgeshare.models import demo_lora, make_adapter, reference_foundation, with_lora
from torch import nn

__all__ = ["MODELS", "NUM_ADAPTERS", "BenchModel", "demo_model", "reference_model"]

NUM_ADAPTERS = 8


@dataclasses.dataclass
class BenchModel:
    """A model to benchmark.

    Attributes:
      name: its key in the report ("demo", "reference").
      description: one line for the table.
      foundation: the bare foundation.
      adapters: NUM_ADAPTERS LoRA-wrapped models over the foundation's weights, by program name.
      make_input: tokens -> an example input [tokens, features].
      iterations_b32: timed runs at T=32 (a few for large models, to keep the run short).
    """

    name: str
    description: str
    foundation: nn.Module
    adapters: Dict[str, nn.Module]
    make_input: Callable[[int], torch.Tensor]
    iterations_b32: int


def _seeded_input(features: int, seed: int) -> Callable[[int], torch.Tensor]:
    def make(tokens: int) -> torch.Tensor:
        return torch.randn(tokens, features, generator=torch.Generator().manual_seed(seed))

    return make


def reference_model(blocks: int = 4, d_model: int = 1024, d_ff: int = 2048) -> BenchModel:
    """The reference: 4 blocks, d_model 1024, d_ff 2048, LoRA rank 16 alpha 32 on every Linear.

    Foundation from seed 0 (about 80 MiB fp32), adapters from seeds 1..8 (about 2 MiB each).
    """
    foundation = reference_foundation(blocks, d_model, d_ff, seed=0)
    adapters = {
        f"adapter{seed}": with_lora(foundation, rank=16, alpha=32.0, seed=seed, std=0.02)
        for seed in range(1, NUM_ADAPTERS + 1)
    }
    return BenchModel(
        name="reference",
        description=f"{blocks} blocks, d_model {d_model}, d_ff {d_ff}, LoRA r16 on every Linear",
        foundation=foundation,
        adapters=adapters,
        make_input=_seeded_input(d_model, 100),
        iterations_b32=10,
    )


def demo_model() -> BenchModel:
    """The demo of edgeshare.models: its two adapters (seeds 1, 2) plus seeds 3..8."""
    foundation, demo_adapters, _ = demo_lora()
    adapters = {"adapter1": demo_adapters["lora_a"], "adapter2": demo_adapters["lora_b"]}
    for seed in range(3, NUM_ADAPTERS + 1):
        adapters[f"adapter{seed}"] = make_adapter(foundation, seed)
    return BenchModel(
        name="demo",
        description="demo MLP 256-512-512-256, LoRA r8 on every Linear",
        foundation=foundation,
        adapters=adapters,
        make_input=_seeded_input(256, 3),
        iterations_b32=50,
    )


MODELS: Dict[str, Callable[[], BenchModel]] = {"demo": demo_model, "reference": reference_model}
