"""The XNNPACK backend's op rows: what each op is, in one registry.

A row (OpRow) holds the aten targets it handles, the check that says whether XNNPACK can run a
node, the OpKind names it emits into the delegate graph, and how it emits them. The partitioner
asks `row_for(target).check`, preprocess asks `row_for(target).emit`; nothing else spells an op.
One module per op family holds its rows (ROWS):

    fully_connected.py  aten.linear -> FULLY_CONNECTED
    binary.py           add, sub, mul, div, maximum, minimum
    activation.py       relu, hardtanh, clamp, sigmoid, silu, softmax, hardswish, leaky_relu, elu
    unary.py            abs, neg, sqrt, rsqrt, pow 2
    rounding.py         floor, ceil
    reduction.py        mean over the last dim
    reshape.py          view, clone, squeeze, unsqueeze -> COPY

Usage:

    row = row_for(node.target)
    if row is not None and row.check(CheckContext(ep, lifted_inputs(ep)), node):
        ...

The registry is built once at import and read-only after: safe from any thread.
"""

from typing import Any, Dict, FrozenSet, Iterable, Optional, Tuple

from edgeshare.backends.xnnpack import xnnpack_graph_generated as _xfb
from edgeshare.backends.xnnpack.op_rows import (
    activation,
    binary,
    fully_connected,
    reduction,
    reshape,
    rounding,
    unary,
)
from edgeshare.backends.xnnpack.op_rows._checks import MAX_RANK, SymDim, dims_of, float_tensor, sym_dim
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, Emitter, OpRow

__all__ = [
    "CheckContext",
    "Emitter",
    "MAX_RANK",
    "OpRow",
    "REGISTRY",
    "Registry",
    "RegistryError",
    "SymDim",
    "dims_of",
    "emitted_op_kinds",
    "float_tensor",
    "op_kind_names",
    "row_for",
    "summary",
    "supported_targets",
    "sym_dim",
]


class RegistryError(ValueError):
    """Two rows claim one target or one name, or a row names an OpKind the schema lacks."""


def op_kind_names() -> Dict[str, int]:
    """Every OpKind of xnnpack_graph.fbs (the generated Python enum): name -> value."""
    return {k: v for k, v in vars(_xfb.OpKind).items() if not k.startswith("_") and isinstance(v, int)}


class Registry:
    """Rows by target.

    Args:
      rows: the rows, in the order the partitioner's docstring lists them.

    Raises:
      RegistryError: two rows share a name or a target, or a row names an unknown OpKind.
    """

    def __init__(self, rows: Iterable[OpRow]) -> None:
        self.rows: Tuple[OpRow, ...] = tuple(rows)
        self._by_target: Dict[Any, OpRow] = {}
        kinds = op_kind_names()
        names: Dict[str, OpRow] = {}
        for row in self.rows:
            if row.name in names:
                raise RegistryError(f"op rows: two rows are named '{row.name}'")
            names[row.name] = row
            unknown = [k for k in row.kinds if k not in kinds]
            if unknown or not row.kinds:
                raise RegistryError(f"op row '{row.name}': op kinds {unknown or '()'} are not in xnnpack_graph.fbs")
            for target in row.targets:
                other = self._by_target.get(target)
                if other is not None:
                    raise RegistryError(f"op rows '{other.name}' and '{row.name}' both handle {target}")
                self._by_target[target] = row

    def row_for(self, target: Any) -> Optional[OpRow]:
        """The row handling target (an OpOverload), or None."""
        try:
            return self._by_target.get(target)
        except TypeError:  # an unhashable target is no op of ours
            return None

    def targets(self) -> FrozenSet[Any]:
        """Every target some row handles."""
        return frozenset(self._by_target)

    def op_kinds(self) -> FrozenSet[str]:
        """The OpKind names the rows emit."""
        return frozenset(k for row in self.rows for k in row.kinds)

    def summary(self) -> str:
        """One line per row: what the partitioner accepts, on which conditions, and its OpKinds."""
        return "\n".join(f"- {row.summary} -> {', '.join(row.kinds)}" for row in self.rows)


REGISTRY = Registry(
    row for family in (fully_connected, binary, activation, unary, rounding, reduction, reshape) for row in family.ROWS
)


def row_for(target: Any) -> Optional[OpRow]:
    """REGISTRY's row for target (an OpOverload), or None."""
    return REGISTRY.row_for(target)


def supported_targets() -> FrozenSet[Any]:
    """Every aten target the XNNPACK partitioner may accept (subject to each row's check)."""
    return REGISTRY.targets()


def emitted_op_kinds() -> FrozenSet[str]:
    """The OpKind names (xnnpack_graph.fbs) the Python rows emit; COPY also copies outputs."""
    return REGISTRY.op_kinds()


def summary() -> str:
    """REGISTRY's one line per row (the partitioner's docstring includes it)."""
    return REGISTRY.summary()
