"""Predicates the rows' checks share: float32 static tensors, numbers."""

import math
from typing import Any

import torch

__all__ = ["MAX_RANK", "finite", "float_tensor", "number"]

# XNNPACK's subgraph API takes tensors of rank <= 6 (XNN_MAX_TENSOR_DIMS).
MAX_RANK = 6


def float_tensor(node: Any) -> bool:
    """Whether node computes a float32 tensor of rank <= MAX_RANK with static, non-zero dims."""
    if not isinstance(node, torch.fx.Node):
        return False
    val = node.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and val.dtype == torch.float32
        and val.dim() <= MAX_RANK
        and all(isinstance(s, int) and s > 0 for s in val.shape)
    )


def number(x: Any) -> bool:
    """Whether x is an int or float (not a bool) and not NaN."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def finite(x: Any) -> bool:
    """Whether x is a finite number."""
    return number(x) and math.isfinite(x)
