"""edgeshare's seeded models and LoRA adapters: the demo the tools export, the transformer block of
the end-to-end tests, the benchmark's reference model, and adapter models whose names say nothing
about what they share with the foundation (lora_variants).

    from edgeshare.models import demo_lora, with_lora, reference_foundation

    foundation, adapters, (x,) = demo_lora()          # what //testing:demo_lora_files exports
    lora = with_lora(reference_foundation(), rank=16, alpha=32.0, seed=1, std=0.02)
"""

from edgeshare.models.adapters import lora_state_dict, with_lora
from edgeshare.models.demo import DemoMLP, demo_lora, make_adapter, make_foundation
from edgeshare.models.lora_variants import (
    DownUpLoRA,
    TinyLM,
    down_up_lora,
    replaced_weight,
    tied_lm_lora,
)
from edgeshare.models.reference import ReferenceBlock, ReferenceModel, reference_foundation
from edgeshare.models.transformer import TransformerBlock

__all__ = [
    "DemoMLP",
    "DownUpLoRA",
    "ReferenceBlock",
    "ReferenceModel",
    "TinyLM",
    "TransformerBlock",
    "demo_lora",
    "down_up_lora",
    "lora_state_dict",
    "make_adapter",
    "make_foundation",
    "reference_foundation",
    "replaced_weight",
    "tied_lm_lora",
    "with_lora",
]
