"""Building blocks of single-input rows: the float32 input check and one-node emission."""

from typing import Callable, Optional, Sequence

import torch
from edgeshare.backends.xnnpack.op_rows._checks import float_tensor
from edgeshare.backends.xnnpack.op_rows._row import CheckContext, CheckFn, EmitFn, Emitter, OpRow

__all__ = ["unary_row"]

Condition = Callable[[torch.fx.Node], bool]


def _check(condition: Optional[Condition]) -> CheckFn:
    def check(ctx: CheckContext, node: torch.fx.Node) -> bool:
        if not float_tensor(node.args[0]):
            return False
        return condition is None or condition(node)

    return check


def _one_node(kind: str) -> EmitFn:
    def emit(e: Emitter, node: torch.fx.Node) -> None:
        e.node(kind, [e.tensor(node.args[0])], node)

    return emit


def unary_row(
    name: str,
    targets: Sequence[object],
    kind: str,
    summary: str,
    condition: Optional[Condition] = None,
    emit: Optional[EmitFn] = None,
) -> OpRow:
    """A row whose first argument is a float32 tensor and which emits one node of `kind`.

    Args:
      name: the row's name.
      targets: its OpOverloads.
      kind: the OpKind name it emits.
      summary: its line in the partitioner's docstring.
      condition: node -> whether its other arguments are ones XNNPACK runs (None: any).
      emit: a custom emission (default: one `kind` node reading the first argument).
    """
    return OpRow(
        name=name,
        targets=tuple(targets),
        kinds=(kind,),
        check=_check(condition),
        emit=emit if emit is not None else _one_node(kind),
        summary=summary,
    )
