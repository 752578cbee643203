"""Ops that only change the shape of a contiguous tensor: one COPY in the delegate.

(to_edge turns _unsafe_view into view and every squeeze into squeeze.dims.)
"""

import torch
from edgeshare.backends.xnnpack.op_rows._checks import dims_of, float_tensor, same_numel
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, Emitter, OpRow
from torch.utils import _pytree as pytree

__all__ = ["ROWS"]

aten = torch.ops.aten


def _check(ctx: CheckContext, node: torch.fx.Node) -> bool:
    x = node.args[0]
    if node.target is aten.clone.default:
        fmt = node.kwargs.get("memory_format")
        if fmt not in (None, torch.contiguous_format, torch.preserve_format):
            return False
    # A size computed at run time (view(x, [1, sym_size(x, 1), 64])) would be a delegate input
    # that is no tensor: such a node stays a kernel call.
    if any(isinstance(a, torch.fx.Node) for a in pytree.tree_leaves((node.args[1:], node.kwargs))):
        return False
    # Contiguous tensors hold the same bytes in both shapes, at every size of their symbols.
    return float_tensor(x) and same_numel(dims_of(x.meta["val"]), dims_of(node.meta["val"]))


def _emit(e: Emitter, node: torch.fx.Node) -> None:
    e.node("COPY", [e.tensor(node.args[0])], node)


ROWS = (
    OpRow(
        name="reshape",
        targets=(aten.view.default, aten.clone.default, aten.squeeze.dims, aten.unsqueeze.default),
        kinds=("COPY",),
        check=_check,
        emit=_emit,
        summary=(
            "view, clone (contiguous or preserve memory_format), squeeze, unsqueeze: a COPY (no size "
            "computed at run time among the arguments)"
        ),
    ),
)
