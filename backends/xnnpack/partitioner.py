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

fp16 fully connected weights (`XnnpackPartitioner(fc_weight_dtype="fp16")`): every delegated
linear's weight and bias are stored as IEEE half under "<key>.fp16" (half the bytes, in the same
file the data policy sends the fp32 weight to) and run by XNNPACK's f16 fully connected operator,
whose input is converted to half and whose output back to float32. The numbers change: see
FP16_TOLERANCE.
"""

import math
import operator
from typing import Any, Callable, Dict, Optional

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgeshare.exir.compile_spec import CompileSpec
from edgeshare.exir.partition import (
    DelegationSpec,
    PartitionResult,
    Partitioner,
    tag_supported_nodes,
)

__all__ = ["FP16_TOLERANCE", "XnnpackPartitioner", "is_lifted_weight"]

BACKEND_ID = "XnnpackBackend"
MAX_RANK = 6

# The compile spec that carries the option to preprocess (absent: fp32, the default).
FC_WEIGHT_DTYPE_SPEC = "fc_weight_dtype"
FC_WEIGHT_DTYPES = ("fp32", "fp16")

# The documented error bound of fc_weight_dtype="fp16" against torch eager in float32:
#   |got - want| <= FP16_TOLERANCE * max(1, max|want|)   (elementwise; max over the output tensor)
# for models like the demo LoRA MLP (fully connected layers of up to 512 input channels, outputs of
# magnitude <= 1). Measured on the demo (256 -> 512 -> 512 -> 256, relu, LoRA rank 8 on every
# layer, input [4, 256]; backends/xnnpack/fp16_test.py prints it): max abs error 2.9e-3 (lora_a)
# and 2.6e-3 (lora_b) with max|want| 0.47 and 0.45, i.e. 0.6% of the output's range; the largest
# relative error over elements with |want| >= 0.1 max|want| is 3.2%. The bound leaves a 3.4x
# margin. XNNPACK's f16 kernels round the input, the weights and the accumulator (after every
# multiply-add) to half precision, so the error grows with the number of input channels and the
# size of the partial sums: check a model of your own against eager before relying on it.
FP16_TOLERANCE = 1e-2

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
      fc_weight_dtype: "fp32" (default; the program is exactly what it was without the option) or
        "fp16": every delegated linear's weight and bias are stored as IEEE half bytes under
        "<key>.fp16" (dtype HALF in the delegate graph, digest of the half bytes), placed like the
        fp32 weight would be (foundation weights still go to the foundation file, under their
        canonical name + ".fp16", so foundation.ptd holds half the bytes), and run by XNNPACK's f16
        fully connected operator between f32->f16 and f16->f32 converts. A weight also read
        elsewhere (an elementwise op in the delegate, or a kernel outside it) keeps its fp32 copy
        for that use. Documented error against torch eager: |got - want| <= FP16_TOLERANCE *
        max(1, max|want|) with FP16_TOLERANCE = 1e-2 (measured on the demo LoRA MLP: max abs error
        2.9e-3 with outputs up to 0.47; foundation.ptd 1,064,960 bytes instead of 2,113,536).
        Weights beyond half's range (|w| > 65504) are refused at export.

    Raises:
      ValueError: fc_weight_dtype is not "fp32" or "fp16".
    """

    def __init__(
        self,
        is_supported_override: Optional[Callable[[torch.fx.Node], bool]] = None,
        fc_weight_dtype: str = "fp32",
    ) -> None:
        if fc_weight_dtype not in FC_WEIGHT_DTYPES:
            raise ValueError(
                f"XnnpackPartitioner: fc_weight_dtype must be one of {FC_WEIGHT_DTYPES}, got {fc_weight_dtype!r}"
            )
        self._override = is_supported_override
        self._fc_weight_dtype = fc_weight_dtype

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
        compile_specs = []
        if self._fc_weight_dtype != "fp32":
            compile_specs.append(CompileSpec(FC_WEIGHT_DTYPE_SPEC, self._fc_weight_dtype.encode()))
        specs: Dict[str, DelegationSpec] = {t: DelegationSpec(BACKEND_ID, list(compile_specs)) for t in tags}
        return PartitionResult(exported_program, specs)
