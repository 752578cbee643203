"""Activations: the clamp family (relu, hardtanh, clamp), sigmoid, silu, softmax, hardswish,
leaky_relu, elu."""

import math

import torch
from edgeshare.backends.xnnpack.op_rows._checks import dims_of, finite, number
from edgeshare.backends.xnnpack.op_rows._row import Emitter
from edgeshare.backends.xnnpack.op_rows._unary import unary_row
from edgeshare.exir.graph import node_arg

__all__ = ["ROWS"]

aten = torch.ops.aten


def _clamp_ok(node: torch.fx.Node) -> bool:
    lo, hi = node_arg(node, 1, "min", None), node_arg(node, 2, "max", None)
    if (lo is not None and not number(lo)) or (hi is not None and not number(hi)):
        return False
    # XNNPACK's clamp needs min < max (torch's clamp with min >= max is constant).
    return lo is None or hi is None or lo < hi


def _hardtanh_bounds(node: torch.fx.Node):
    return node_arg(node, 1, "min_val", -1.0), node_arg(node, 2, "max_val", 1.0)


def _hardtanh_ok(node: torch.fx.Node) -> bool:
    lo, hi = _hardtanh_bounds(node)
    return number(lo) and number(hi) and lo < hi


def _softmax_ok(node: torch.fx.Node) -> bool:
    dims = dims_of(node.args[0].meta["val"])
    rank = len(dims)
    dim = node.args[1]
    # args[2] is half_to_float. XNNPACK's softmax fixes its row length at create: an exact last dim.
    return rank > 0 and dim in (-1, rank - 1) and not node.args[2] and isinstance(dims[-1], int)


def _elu_ok(node: torch.fx.Node) -> bool:
    alpha = node_arg(node, 1, "alpha", 1.0)
    return (
        finite(alpha) and alpha > 0 and node_arg(node, 2, "scale", 1) == 1 and node_arg(node, 3, "input_scale", 1) == 1
    )


def _emit_relu(e: Emitter, node: torch.fx.Node) -> None:
    e.node("CLAMP", [e.tensor(node.args[0])], node, 0.0, math.inf)


def _emit_hardtanh(e: Emitter, node: torch.fx.Node) -> None:
    lo, hi = _hardtanh_bounds(node)
    e.node("CLAMP", [e.tensor(node.args[0])], node, lo, hi)


def _emit_clamp(e: Emitter, node: torch.fx.Node) -> None:
    lo, hi = node_arg(node, 1, "min", None), node_arg(node, 2, "max", None)
    e.node("CLAMP", [e.tensor(node.args[0])], node, -math.inf if lo is None else lo, math.inf if hi is None else hi)


def _emit_leaky_relu(e: Emitter, node: torch.fx.Node) -> None:
    e.node("LEAKY_RELU", [e.tensor(node.args[0])], node, alpha=node_arg(node, 1, "negative_slope", 0.01))


def _emit_elu(e: Emitter, node: torch.fx.Node) -> None:
    e.node("ELU", [e.tensor(node.args[0])], node, alpha=node_arg(node, 1, "alpha", 1.0))


ROWS = (
    unary_row("relu", [aten.relu.default], "CLAMP", "relu", emit=_emit_relu),
    unary_row(
        "hardtanh",
        [aten.hardtanh.default],
        "CLAMP",
        "hardtanh (number bounds, min < max)",
        _hardtanh_ok,
        _emit_hardtanh,
    ),
    unary_row(
        "clamp",
        [aten.clamp.default],
        "CLAMP",
        "clamp (number bounds, either optional, min < max)",
        _clamp_ok,
        _emit_clamp,
    ),
    unary_row("sigmoid", [aten.sigmoid.default], "SIGMOID", "sigmoid"),
    unary_row("silu", [aten.silu.default], "SILU", "silu (to_edge decomposes it into sigmoid * x)"),
    unary_row("softmax", [aten._softmax.default], "SOFTMAX", "softmax over the last dim (an exact one)", _softmax_ok),
    unary_row("hardswish", [aten.hardswish.default], "HARDSWISH", "hardswish (to_edge decomposes it)"),
    unary_row(
        "leaky_relu",
        [aten.leaky_relu.default],
        "LEAKY_RELU",
        "leaky_relu (finite slope)",
        lambda node: finite(node_arg(node, 1, "negative_slope", 0.01)),
        _emit_leaky_relu,
    ),
    unary_row(
        "elu",
        [aten.elu.default],
        "ELU",
        "elu (positive finite alpha, scale 1, input_scale 1)",
        _elu_ok,
        _emit_elu,
    ),
)
