"""aten.linear -> FULLY_CONNECTED (weight and optional bias held by the program), or
FULLY_CONNECTED_UNPACKED when the weight is open data (a swappable adapter's: a delegate input read
as stored at each execute, so the runtime may rebind it); edgeshare::linear_stored (an open weight
in an adapter format row, exir/stored_linear.py) -> FULLY_CONNECTED_UNPACKED over its HALF weight,
or its CHAR weight and float32 scales."""

from typing import Any, Sequence, Tuple

import torch
from edgeshare.backends.xnnpack.op_rows._checks import dims_of, float_tensor
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, Emitter, OpRow
from edgeshare.exir.data_policy import DATA_OPEN_META
from edgeshare.exir.graph import node_arg
from edgeshare.exir.stored_linear import linear_stored as _linear_stored  # noqa: F401 (defines the op)

__all__ = ["ROWS"]

aten = torch.ops.aten


def _weight_and_bias(node: torch.fx.Node) -> Tuple[Any, ...]:
    return node.args[1], node_arg(node, 2, "bias", None)


def _is_open(x: Any) -> bool:
    return isinstance(x, torch.fx.Node) and bool(x.meta.get(DATA_OPEN_META, False))


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


def _reads_open(node: torch.fx.Node, opens: Sequence[torch.fx.Node]) -> bool:
    """Only the weight may be open, and then without a bias (the unpacked product has none)."""
    w, b = _weight_and_bias(node)
    return list(opens) == [w] and b is None and node.args[0] is not w


def _emit(e: Emitter, node: torch.fx.Node) -> None:
    w, b = _weight_and_bias(node)
    if _is_open(w):
        # The partition's input (exir.lower keeps open data out of the delegate's weights).
        e.node("FULLY_CONNECTED_UNPACKED", [e.tensor(node.args[0]), e.tensor(w)], node)
        return
    inputs = [e.tensor(node.args[0]), e.fc_param(w)]
    if b is not None:
        inputs.append(e.fc_param(b))
    e.node("FULLY_CONNECTED", inputs, node)


def _stored_args(node: torch.fx.Node) -> Tuple[Any, ...]:
    """linear_stored's weight and scales (None for an unquantized row)."""
    return node.args[1], node_arg(node, 2, "scales", None)


def _check_stored(ctx: CheckContext, node: torch.fx.Node) -> bool:
    x = node.args[0]
    w, scales = _stored_args(node)
    return (
        float_tensor(x)
        and _is_open(w)
        and w.meta["val"].dim() == 2
        and dims_of(x.meta["val"])[-1:] == dims_of(w.meta["val"])[1:]
        and (scales is None or _is_open(scales))
    )


def _reads_stored(node: torch.fx.Node, opens: Sequence[torch.fx.Node]) -> bool:
    """The weight and its scales are the open data it reads, never its input."""
    w, scales = _stored_args(node)
    return set(opens) == {a for a in (w, scales) if a is not None} and node.args[0] not in opens


def _emit_stored(e: Emitter, node: torch.fx.Node) -> None:
    w, scales = _stored_args(node)
    inputs = [e.tensor(node.args[0]), e.tensor(w)]
    if scales is not None:
        inputs.append(e.tensor(scales))
    e.node("FULLY_CONNECTED_UNPACKED", inputs, node)


ROWS = (
    OpRow(
        name="linear",
        targets=(aten.linear.default,),
        kinds=("FULLY_CONNECTED", "FULLY_CONNECTED_UNPACKED"),
        check=_check,
        emit=_emit,
        summary="aten.linear (weight a 2-d parameter or constant, bias optional and likewise held by the program; "
        "an open (swappable) weight without bias is read as stored at each execute)",
        half_weights=_weight_and_bias,
        reads_open=_reads_open,
    ),
    OpRow(
        name="linear_stored",
        targets=(torch.ops.edgeshare.linear_stored.default,),
        kinds=("FULLY_CONNECTED_UNPACKED",),
        check=_check_stored,
        emit=_emit_stored,
        summary="edgeshare.linear_stored (an open weight stored half, or int8 with float32 scales per row, "
        "read as stored at each execute)",
        reads_open=_reads_stored,
    ),
)
