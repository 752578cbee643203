"""aten.linear -> FULLY_CONNECTED (weight and optional bias held by the program)."""

from typing import Any, Tuple

import torch
from edgeshare.backends.xnnpack.op_rows._checks import dims_of, float_tensor
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, Emitter, OpRow
from edgeshare.exir.graph import node_arg

__all__ = ["ROWS"]

aten = torch.ops.aten


def _weight_and_bias(node: torch.fx.Node) -> Tuple[Any, ...]:
    return node.args[1], node_arg(node, 2, "bias", None)


def _check(ctx: CheckContext, node: torch.fx.Node) -> bool:
    x, w = node.args[0], node.args[1]
    b = node_arg(node, 2, "bias", None)
    return (
        float_tensor(x)
        and ctx.is_weight(w)
        and float_tensor(w)
        and w.meta["val"].dim() == 2
        # The weight's input channels: exact (x's other dims may be symbols).
        and dims_of(x.meta["val"])[-1:] == dims_of(w.meta["val"])[1:]
        and (b is None or (ctx.is_weight(b) and float_tensor(b)))
    )


def _emit(e: Emitter, node: torch.fx.Node) -> None:
    w, b = _weight_and_bias(node)
    inputs = [e.tensor(node.args[0]), e.fc_param(w)]
    if b is not None:
        inputs.append(e.fc_param(b))
    e.node("FULLY_CONNECTED", inputs, node)


ROWS = (
    OpRow(
        name="linear",
        targets=(aten.linear.default,),
        kinds=("FULLY_CONNECTED",),
        check=_check,
        emit=_emit,
        summary="aten.linear (weight a 2-d parameter or constant, bias optional and likewise held by the program)",
        half_weights=_weight_and_bias,
    ),
)
