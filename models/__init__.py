"""edgeshare's seeded models and LoRA adapters: the demo the tools export, the transformer block of
the end-to-end tests, and the benchmark's reference model.

    from edgeshare.models import demo_lora, with_lora, reference_foundation

    foundation, adapters, (x,) = demo_lora()          # what //testing:demo_lora_files exports
    lora = with_lora(reference_foundation(), rank=16, alpha=32.0, seed=1, std=0.02)
"""

from edgeshare.models.adapters import lora_state_dict, with_lora
from edgeshare.models.demo import DemoMLP, demo_lora, make_adapter, make_foundation
from edgeshare.models.reference import ReferenceBlock, ReferenceModel, reference_foundation
from edgeshare.models.transformer import TransformerBlock

__all__ = [
    "DemoMLP",
    "ReferenceBlock",
    "ReferenceModel",
    "TransformerBlock",
    "demo_lora",
    "lora_state_dict",
    "make_adapter",
    "make_foundation",
    "reference_foundation",
    "with_lora",
]
