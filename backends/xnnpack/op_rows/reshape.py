"""Ops that only change the shape of a contiguous tensor: one COPY in the delegate.

(to_edge turns _unsafe_view into view and every squeeze into squeeze.dims.)
"""

import torch
from edgeshare.backends.xnnpack.op_rows._checks import float_tensor
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, Emitter, OpRow

__all__ = ["ROWS"]

aten = torch.ops.aten


def _check(ctx: CheckContext, node: torch.fx.Node) -> bool:
    x = node.args[0]
    if node.target is aten.clone.default:
        fmt = node.kwargs.get("memory_format")
        if fmt not in (None, torch.contiguous_format, torch.preserve_format):
            return False
    # Contiguous tensors hold the same bytes in both shapes.
    return float_tensor(x) and x.meta["val"].numel() == node.meta["val"].numel()


def _emit(e: Emitter, node: torch.fx.Node) -> None:
    e.node("COPY", [e.tensor(node.args[0])], node)


ROWS = (
    OpRow(
        name="reshape",
        targets=(aten.view.default, aten.clone.default, aten.squeeze.dims, aten.unsqueeze.default),
        kinds=("COPY",),
        check=_check,
        emit=_emit,
        summary="view, clone (contiguous or preserve memory_format), squeeze, unsqueeze: a COPY",
    ),
)
