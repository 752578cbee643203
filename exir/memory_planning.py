"""Memory planning: offsets of non-constant tensors in one arena, greedy by lifetime.

Each tensor lives from the instruction that writes it to the last instruction that reads it
(inclusive; method inputs from before the first, method outputs past the last). Tensors are placed
largest first at the lowest aligned offset that does not overlap a placed tensor whose lifetime
intersects its own, so an instruction's inputs and outputs never alias.
"""

import dataclasses
from typing import Dict, List, Tuple

from edgeshare.exir._serialize._format import align_up

__all__ = ["PlannedTensor", "plan_memory"]

DEFAULT_MEMORY_ALIGNMENT = 16


@dataclasses.dataclass(frozen=True)
class PlannedTensor:
    """A tensor to place.

    Attributes:
      value_index: the tensor's index in the method's values (its identity here).
      nbytes: its size in bytes.
      first_use: index of the instruction that writes it (-1: a method input).
      last_use: index of the last instruction that reads it (number of instructions: an output).
    """

    value_index: int
    nbytes: int
    first_use: int
    last_use: int


def plan_memory(tensors: List[PlannedTensor], alignment: int = DEFAULT_MEMORY_ALIGNMENT) -> Tuple[Dict[int, int], int]:
    """Assigns each tensor an offset in one buffer.

    Args:
      tensors: the tensors with their lifetimes.
      alignment: every offset is a multiple of this.

    Returns:
      (value index -> offset, total buffer size in bytes).
    """
    order = sorted(tensors, key=lambda t: (-t.nbytes, t.first_use, t.value_index))
    placed: List[Tuple[int, int, PlannedTensor]] = []  # (offset, end, tensor)
    offsets: Dict[int, int] = {}
    total = 0
    for tensor in order:
        live = sorted(
            (start, end)
            for start, end, other in placed
            if not (other.last_use < tensor.first_use or tensor.last_use < other.first_use)
        )
        offset = 0
        for start, end in live:
            if offset + tensor.nbytes <= start:
                break
            offset = max(offset, align_up(end, alignment))
        offsets[tensor.value_index] = offset
        placed.append((offset, offset + tensor.nbytes, tensor))
        total = max(total, offset + tensor.nbytes)
    return offsets, align_up(total, alignment)
