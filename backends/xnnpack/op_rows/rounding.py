"""Elementwise rounding: floor -> FLOOR, ceil -> CEILING."""

import torch
from edgeshare.backends.xnnpack.op_rows._unary import unary_row

__all__ = ["ROWS"]

aten = torch.ops.aten

ROWS = (
    unary_row("floor", [aten.floor.default], "FLOOR", "floor"),
    unary_row("ceil", [aten.ceil.default], "CEILING", "ceil"),
)
