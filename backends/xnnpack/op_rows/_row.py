"""The row type: what one op (or op family) is for the XNNPACK backend, in one place."""

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, Tuple

import torch
from edgeshare.exir.graph import LiftedInput
from torch.export import ExportedProgram

__all__ = ["CheckContext", "Emitter", "OpRow"]


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """What a row's check may ask about the program beyond the node itself.

    Attributes:
      ep: the edge program being partitioned.
      lifted: exir.graph.lifted_inputs(ep), computed once per partitioning.
    """

    ep: ExportedProgram
    lifted: Mapping[str, LiftedInput]

    def is_weight(self, node: Any) -> bool:
        """Whether node is a placeholder for a parameter, buffer or lifted constant of ep."""
        return isinstance(node, torch.fx.Node) and node.op == "placeholder" and node.name in self.lifted


class Emitter(Protocol):
    """The delegate-graph builder as a row's emit sees it (preprocess's _GraphBuilder)."""

    what: str  # "method 'forward', partition 0": the prefix of every LoweringError

    def tensor(self, x: torch.fx.Node) -> int:
        """The value id of a node already in the graph (an input, weight or earlier output)."""

    def operand(self, x: Any) -> int:
        """tensor(x) for a node; for a number, a new rank-0 inline float32 constant."""

    def fc_param(self, x: torch.fx.Node) -> int:
        """A fully connected weight or bias: its HALF constant under fc_weight_dtype=fp16."""

    def node(
        self,
        kind: str,
        inputs: Sequence[int],
        out: torch.fx.Node,
        output_min: float = -math.inf,
        output_max: float = math.inf,
        alpha: float = 0.0,
    ) -> None:
        """Appends one delegate node of OpKind `kind` (a name the row lists) whose output is out."""


CheckFn = Callable[[CheckContext, torch.fx.Node], bool]
EmitFn = Callable[[Emitter, torch.fx.Node], None]


@dataclasses.dataclass(frozen=True)
class OpRow:
    """One op as the XNNPACK backend knows it: targets, check, op kinds, emission.

    The partitioner tags a call_function node when its output is a float32 tensor of rank <= 6
    with no empty dimension, a row lists its target, and the row's check says yes; preprocess
    then calls the row's emit for it. A check must accept only what the C++ delegate runs: a
    tagged node must never make a program fail to load.

    Attributes:
      name: the row's name (unique in the registry), e.g. "add".
      targets: the edge-dialect OpOverloads it handles (each in exactly one row).
      kinds: names of the OpKind enum (xnnpack_graph.fbs) emit may use, e.g. ("ADD",).
      check: (context, node) -> whether XNNPACK can run node.
      emit: (emitter, node) -> appends node's delegate nodes; raises LoweringError if it cannot.
      summary: one line for the partitioner's docstring: what is accepted and on which conditions.
      half_weights: for fully connected rows, node -> the arguments read as weight and bias, which
        fc_weight_dtype=fp16 stores as HALF constants; None for every other row.
      reads_open: (node, its open-data placeholders) -> whether the row runs node over those as
        delegate inputs read as stored (never packed); None: a node reading open data stays a
        kernel call.
    """

    name: str
    targets: Tuple[Any, ...]
    kinds: Tuple[str, ...]
    check: CheckFn
    emit: EmitFn
    summary: str
    half_weights: Optional[Callable[[torch.fx.Node], Tuple[Any, ...]]] = None
    reads_open: Optional[Callable[[torch.fx.Node, Sequence[torch.fx.Node]], bool]] = None
