"""Reductions: mean over the last dimension only -> MEAN_LAST_DIM (XNNPACK's global average
pooling)."""

import torch
from edgeshare.backends.xnnpack.op_rows._unary import unary_row
from edgeshare.exir.graph import node_arg

__all__ = ["ROWS"]

aten = torch.ops.aten


def _last_dim_only(node: torch.fx.Node) -> bool:
    rank = node.args[0].meta["val"].dim()
    dims = node_arg(node, 1, "dim", None)
    keepdim = node_arg(node, 2, "keepdim", False)
    if rank == 0 or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return False
    (dim,) = dims
    return (
        isinstance(dim, int)
        and not isinstance(dim, bool)
        and dim in (-1, rank - 1)
        and isinstance(keepdim, bool)
        # dtype is keyword-only: any dtype (even float32) is refused, as the delegate has no cast.
        and node.kwargs.get("dtype") is None
    )


ROWS = (
    unary_row(
        "mean_last_dim",
        [aten.mean.dim],
        "MEAN_LAST_DIM",
        "mean over the last dim only (dim [-1] or [rank - 1], keepdim either way, no dtype)",
        _last_dim_only,
    ),
)
