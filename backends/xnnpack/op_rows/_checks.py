"""Predicates the rows' checks share: float32 tensors whose dims are exact or plain symbols,
numbers.

A program exported with dynamic shapes (torch.export's dynamic_shapes) has SymInt dims. The
delegate runs a value whose every dim is an exact size or one plain symbol with a finite bound
(s70, the token count, at most 128): it binds the symbol from its inputs' real sizes at each
execute and plans memory for the bound. A compound size (s0*4, s0 + 1) is refused, and so is the
node that computes or reads such a value: it stays a kernel call.
"""

import collections
import dataclasses
import math
from typing import Any, Optional, Sequence, Tuple, Union

import sympy
import torch

__all__ = [
    "MAX_RANK",
    "SymDim",
    "broadcast_dims",
    "dims_of",
    "finite",
    "float_tensor",
    "number",
    "same_numel",
    "sym_dim",
]

# XNNPACK's subgraph API takes tensors of rank <= 6 (XNN_MAX_TENSOR_DIMS).
MAX_RANK = 6
# Tensor sizes are int32 in the runtime.
_MAX_SIZE = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class SymDim:
    """A dim that is one plain symbol.

    Attributes:
      name: the export's name of the symbol ("s70").
      bound: its largest value (the export's range); memory is planned for it.
    """

    name: str
    bound: int


Dim = Union[int, SymDim]


def sym_dim(size: Any) -> Optional[SymDim]:
    """size (a SymInt) as a SymDim, or None when it is compound or has no finite bound in
    [1, 2**31 - 1]."""
    if not isinstance(size, torch.SymInt):
        return None
    expr = size.node.expr
    if not isinstance(expr, sympy.Symbol):
        return None
    value_range = size.node.shape_env.var_to_range.get(expr)
    upper = None if value_range is None else value_range.upper
    if not isinstance(upper, sympy.Integer) or not 1 <= int(upper) <= _MAX_SIZE:
        return None
    return SymDim(str(expr), int(upper))


def dims_of(val: Any) -> Optional[Tuple[Dim, ...]]:
    """val's dims, each an int or a SymDim; None when val is no tensor or some dim is neither a
    positive int nor a plain bounded symbol."""
    if not isinstance(val, torch.Tensor):
        return None
    dims = []
    for size in val.shape:
        if isinstance(size, int):
            if not 0 < size <= _MAX_SIZE:
                return None
            dims.append(int(size))
            continue
        d = sym_dim(size)
        if d is None:
            return None
        dims.append(d)
    return tuple(dims)


def float_tensor(node: Any) -> bool:
    """Whether node computes a float32 tensor of rank <= MAX_RANK whose dims are non-zero exact
    sizes or plain bounded symbols."""
    if not isinstance(node, torch.fx.Node):
        return False
    val = node.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and val.dtype == torch.float32
        and val.dim() <= MAX_RANK
        and dims_of(val) is not None
    )


def same_numel(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """Whether two shapes hold the same element count at every size of their symbols: the same
    symbols (with repeats) and the same product of exact dims."""
    syms_a = collections.Counter(d for d in a if isinstance(d, SymDim))
    syms_b = collections.Counter(d for d in b if isinstance(d, SymDim))
    static_a = math.prod(d for d in a if isinstance(d, int))
    static_b = math.prod(d for d in b if isinstance(d, int))
    return syms_a == syms_b and static_a == static_b


def broadcast_dims(a: Sequence[Dim], b: Sequence[Dim]) -> Optional[Tuple[Dim, ...]]:
    """The numpy broadcast of two shapes, or None. A symbol broadcasts with 1 or itself only (as
    the delegate checks it): against another size, whether it broadcasts depends on the run."""
    rank = max(len(a), len(b))
    out = []
    for i in range(rank):
        da = a[len(a) - rank + i] if len(a) - rank + i >= 0 else 1
        db = b[len(b) - rank + i] if len(b) - rank + i >= 0 else 1
        if da != db and da != 1 and db != 1:
            return None
        out.append(db if da == 1 else da)
    return tuple(out)


def number(x: Any) -> bool:
    """Whether x is an int or float (not a bool) and not NaN."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def finite(x: Any) -> bool:
    """Whether x is a finite number."""
    return number(x) and math.isfinite(x)
