"""A module's weights by the names torch.export gives them, and the placeholders it lifts them to.

The pipeline, the derivation of adapter programs from the foundation's and the copying of repeated
layers all name weights this way; they import it from here, below all three.
"""

import re
from typing import Dict

import torch
from torch import nn
from torch.export.graph_signature import InputKind

__all__ = ["module_weights", "placeholder_name"]


def module_weights(module: nn.Module) -> Dict[str, torch.Tensor]:
    """A module's parameters and buffers by every name torch.export may give them (tied ones
    under each of their names, non-persistent buffers too)."""
    tensors: Dict[str, torch.Tensor] = dict(module.state_dict(keep_vars=True))
    for name, buf in module.named_buffers(remove_duplicate=False):
        tensors.setdefault(name, buf)
    for name, param in module.named_parameters(remove_duplicate=False):
        tensors.setdefault(name, param)
    return {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}


def placeholder_name(fqn: str, kind: InputKind) -> str:
    """torch.export's placeholder name for a lifted weight ("p_" + the path, lower case)."""
    prefix = "p_" if kind == InputKind.PARAMETER else "b_"
    return prefix + re.sub(r"[^0-9a-zA-Z_]", "_", fqn).lower()
