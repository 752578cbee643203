"""Elementwise math on one tensor: abs, neg, sqrt, rsqrt, pow with exponent 2 (XNNPACK's square)."""

import torch
from edgeshare.backends.xnnpack.op_rows._checks import number
from edgeshare.backends.xnnpack.op_rows._row import Emitter
from edgeshare.backends.xnnpack.op_rows._unary import unary_row
from edgeshare.exir.errors import LoweringError

__all__ = ["ROWS"]

aten = torch.ops.aten


def _square_ok(node: torch.fx.Node) -> bool:
    return number(node.args[1]) and node.args[1] == 2


def _emit_square(e: Emitter, node: torch.fx.Node) -> None:
    if node.args[1] != 2:
        raise LoweringError(f"{e.what}: node '{node.name}' raises to {node.args[1]}; XNNPACK squares only")
    e.node("SQUARE", [e.tensor(node.args[0])], node)


ROWS = (
    unary_row("abs", [aten.abs.default], "ABS", "abs"),
    unary_row("neg", [aten.neg.default], "NEGATE", "neg"),
    unary_row("sqrt", [aten.sqrt.default], "SQRT", "sqrt"),
    unary_row("rsqrt", [aten.rsqrt.default], "RSQRT", "rsqrt"),
    unary_row(
        "square",
        [aten.pow.Tensor_Scalar],
        "SQUARE",
        "pow with exponent 2 (XNNPACK's square)",
        _square_ok,
        _emit_square,
    ),
)
