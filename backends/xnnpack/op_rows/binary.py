"""Elementwise binary ops with numpy broadcasting: add, sub, mul, div, maximum, minimum."""

from typing import Sequence

import torch
from edgeshare.backends.xnnpack.op_rows._checks import broadcast_dims, dims_of, float_tensor, number
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, EmitFn, Emitter, OpRow
from edgeshare.exir.graph import node_arg

__all__ = ["ROWS"]

aten = torch.ops.aten


def _check(ctx: CheckContext, node: torch.fx.Node) -> bool:
    a, b = node.args[0], node.args[1]
    # add/sub's alpha scales b; XNNPACK has no such operand (the other ops have no alpha).
    if node_arg(node, 2, "alpha", 1) != 1:
        return False
    ok_a = float_tensor(a) or number(a)
    ok_b = float_tensor(b) or number(b)
    if not (ok_a and ok_b and (float_tensor(a) or float_tensor(b))):
        return False
    if not (float_tensor(a) and float_tensor(b)):
        return True
    # Both tensors: the broadcast must hold at every size of their symbols.
    want = broadcast_dims(dims_of(a.meta["val"]), dims_of(b.meta["val"]))
    return want is not None and want == dims_of(node.meta["val"])


def _emitter(kind: str) -> EmitFn:
    def emit(e: Emitter, node: torch.fx.Node) -> None:
        e.node(kind, [e.operand(node.args[0]), e.operand(node.args[1])], node)

    return emit


def _row(name: str, targets: Sequence[object], kind: str, condition: str = "") -> OpRow:
    return OpRow(
        name=name,
        targets=tuple(targets),
        kinds=(kind,),
        check=_check,
        emit=_emitter(kind),
        summary=f"{name} ({condition}tensor or scalar operands, at least one a tensor; numpy broadcasting)",
    )


ROWS = (
    _row("add", (aten.add.Tensor, aten.add.Scalar), "ADD", "alpha 1; "),
    _row("sub", (aten.sub.Tensor, aten.sub.Scalar), "SUBTRACT", "alpha 1; "),
    _row("mul", (aten.mul.Tensor, aten.mul.Scalar), "MULTIPLY"),
    _row("div", (aten.div.Tensor, aten.div.Scalar), "DIVIDE"),
    _row("maximum", (aten.maximum.default,), "MAXIMUM"),
    _row("minimum", (aten.minimum.default,), "MINIMUM"),
)
