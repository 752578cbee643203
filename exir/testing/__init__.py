"""Models and adapters shared by edgeshare's end-to-end tests."""

from edgeshare.exir.testing.lora_models import TransformerBlock, lora_state_dict

__all__ = ["TransformerBlock", "lora_state_dict"]
