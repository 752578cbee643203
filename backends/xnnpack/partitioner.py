"""XnnpackPartitioner: tags the float32, static-shape nodes the XNNPACK delegate runs.

Supported: aten.linear (weight a parameter or constant, bias optional and likewise constant);
add/sub (alpha 1), mul, div, maximum, minimum with tensor or scalar operands (numpy broadcasting);
relu, hardtanh, clamp (number bounds, min < max), sigmoid, silu, softmax over the last dim,
hardswish, leaky_relu (finite slope), elu (positive alpha, scale 1), abs, neg, sqrt, pow with
exponent 2 (XNNPACK's square); view/clone/squeeze/unsqueeze (a copy: contiguous
tensors hold the same bytes in both shapes). Every tensor has at least one element.

The checks mirror what the C++ delegate (runtime/xnn_executor.cc) accepts at init: a node tagged
here must never make a program fail to load. One known difference from torch remains: XNNPACK's
clamp (relu, hardtanh, clamp), maximum and minimum do not propagate NaN inputs as torch does.
"""

import math
import operator
from typing import Any, Callable, Dict, Optional

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgeshare.exir.partition import (
    DelegationSpec,
    PartitionResult,
    Partitioner,
    tag_supported_nodes,
)

__all__ = ["XnnpackPartitioner", "is_lifted_weight"]

BACKEND_ID = "XnnpackBackend"
MAX_RANK = 6

aten = torch.ops.aten

BINARY_OPS = {
    aten.add.Tensor,
    aten.add.Scalar,
    aten.sub.Tensor,
    aten.sub.Scalar,
    aten.mul.Tensor,
    aten.mul.Scalar,
    aten.div.Tensor,
    aten.div.Scalar,
    aten.maximum.default,
    aten.minimum.default,
}
UNARY_OPS = {
    aten.relu.default,
    aten.hardtanh.default,
    aten.clamp.default,
    aten.sigmoid.default,
    aten.silu.default,
    aten._softmax.default,
    aten.hardswish.default,
    aten.leaky_relu.default,
    aten.elu.default,
    aten.abs.default,
    aten.neg.default,
    aten.sqrt.default,
}
# Ops that only change the shape of a contiguous tensor: a COPY in the delegate.
# (to_edge turns _unsafe_view into view and every squeeze into squeeze.dims.)
RESHAPE_OPS = {
    aten.view.default,
    aten.clone.default,
    aten.squeeze.dims,
    aten.unsqueeze.default,
}


def is_lifted_weight(ep: ExportedProgram, node: Any) -> bool:
    """Whether node is a placeholder for a parameter, buffer or lifted constant of ep."""
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return False
    sig = ep.graph_signature
    return (
        node.name in sig.inputs_to_parameters
        or node.name in sig.inputs_to_buffers
        or node.name in sig.inputs_to_lifted_tensor_constants
    )


def _float_tensor(node: Any) -> bool:
    if not isinstance(node, torch.fx.Node):
        return False
    val = node.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and val.dtype == torch.float32
        and val.dim() <= MAX_RANK
        and all(isinstance(s, int) and s > 0 for s in val.shape)
    )


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def _finite(x: Any) -> bool:
    return _number(x) and math.isfinite(x)


def _kwarg(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


class _Checker:
    def __init__(self, ep: ExportedProgram) -> None:
        self.ep = ep

    def __call__(self, node: torch.fx.Node) -> bool:
        target = node.target
        if node.op != "call_function" or target is operator.getitem:
            return False
        if not _float_tensor(node):
            return False
        if target is aten.linear.default:
            x, w = node.args[0], node.args[1]
            b = _kwarg(node, 2, "bias", None)
            return (
                _float_tensor(x)
                and is_lifted_weight(self.ep, w)
                and _float_tensor(w)
                and w.meta["val"].dim() == 2
                and (b is None or (is_lifted_weight(self.ep, b) and _float_tensor(b)))
            )
        if target in BINARY_OPS:
            a, b = node.args[0], node.args[1]
            if _kwarg(node, 2, "alpha", 1) != 1:
                return False
            ok_a = _float_tensor(a) or _number(a)
            ok_b = _float_tensor(b) or _number(b)
            return ok_a and ok_b and (_float_tensor(a) or _float_tensor(b))
        if target in UNARY_OPS:
            x = node.args[0]
            if not _float_tensor(x):
                return False
            if target is aten.clamp.default:
                lo, hi = _kwarg(node, 1, "min", None), _kwarg(node, 2, "max", None)
                if (lo is not None and not _number(lo)) or (hi is not None and not _number(hi)):
                    return False
                # XNNPACK's clamp needs min < max (torch's clamp with min >= max is constant).
                return lo is None or hi is None or lo < hi
            if target is aten.hardtanh.default:
                lo, hi = _kwarg(node, 1, "min_val", -1.0), _kwarg(node, 2, "max_val", 1.0)
                return _number(lo) and _number(hi) and lo < hi
            if target is aten.leaky_relu.default:
                return _finite(_kwarg(node, 1, "negative_slope", 0.01))
            if target is aten._softmax.default:
                rank = x.meta["val"].dim()
                dim = node.args[1]
                return rank > 0 and dim in (-1, rank - 1) and not node.args[2]
            if target is aten.elu.default:
                alpha = _kwarg(node, 1, "alpha", 1.0)
                return (
                    _finite(alpha)
                    and alpha > 0
                    and _kwarg(node, 2, "scale", 1) == 1
                    and _kwarg(node, 3, "input_scale", 1) == 1
                )
            return True
        if target is aten.pow.Tensor_Scalar:
            return _float_tensor(node.args[0]) and _number(node.args[1]) and node.args[1] == 2
        if target in RESHAPE_OPS:
            x = node.args[0]
            if target is aten.clone.default:
                fmt = node.kwargs.get("memory_format")
                if fmt not in (None, torch.contiguous_format, torch.preserve_format):
                    return False
            return _float_tensor(x) and x.meta["val"].numel() == node.meta["val"].numel()
        return False


class XnnpackPartitioner(Partitioner):
    """Tags every node the XNNPACK delegate runs; partitions are "xnnpack_<i>".

    Args:
      is_supported_override: optional extra filter (node -> bool) applied after the built-in
        checks, e.g. to keep some layers out of the delegate.
    """

    def __init__(self, is_supported_override: Optional[Callable[[torch.fx.Node], bool]] = None) -> None:
        self._override = is_supported_override

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        """Tags supported nodes of exported_program in place.

        Args:
          exported_program: an edge program.

        Returns:
          The program and DelegationSpec("XnnpackBackend") for each tag.
        """
        checker = _Checker(exported_program)
        override = self._override

        def supported(node: torch.fx.Node) -> bool:
            return checker(node) and (override is None or bool(override(node)))

        tags = tag_supported_nodes(exported_program, supported, "xnnpack_")
        specs: Dict[str, DelegationSpec] = {t: DelegationSpec(BACKEND_ID, []) for t in tags}
        return PartitionResult(exported_program, specs)
