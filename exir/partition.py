"""Partitioners: decide which nodes of an edge program a backend runs.

A partitioner tags supported call_function nodes with node.meta[DELEGATION_TAG] = "<tag>" and says,
per tag, which backend runs it and with which compile specs. tag_supported_nodes() groups supported
nodes into cycle-free partitions as torch's CapabilityBasedPartitioner does (_greedy_partition.py).
"""

import dataclasses
from typing import Callable, Dict, List

import torch
from edgeshare.exir._greedy_partition import greedy_partitions
from edgeshare.exir.compile_spec import CompileSpec
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

__all__ = [
    "DELEGATION_TAG",
    "DelegationSpec",
    "PartitionResult",
    "Partitioner",
    "tag_supported_nodes",
]

DELEGATION_TAG = "delegation_tag"


@dataclasses.dataclass(frozen=True)
class DelegationSpec:
    """Which backend runs a partition, and how.

    Attributes:
      backend_id: the name of a BackendDetails subclass (e.g. "XnnpackBackend").
      compile_specs: options for that backend.
    """

    backend_id: str
    compile_specs: List[CompileSpec] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class PartitionResult:
    """What partition() returns.

    Attributes:
      tagged_exported_program: the program whose nodes carry node.meta[DELEGATION_TAG].
      partition_tags: tag -> DelegationSpec for every tag used.
      fallbacks: weight key -> why it is stored in its format's fallback (exir/fc_formats.py),
        for the weights a partitioner chose that for.
      gathered_formats: token embedding key -> the format option its gather outside the
        delegate reads, for the tables a partitioner rewrote.
    """

    tagged_exported_program: ExportedProgram
    partition_tags: Dict[str, DelegationSpec]
    fallbacks: Dict[str, str] = dataclasses.field(default_factory=dict)
    gathered_formats: Dict[str, str] = dataclasses.field(default_factory=dict)


class Partitioner:
    """Base class of partitioners. Subclasses implement partition()."""

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        """Tags the nodes a backend will run.

        Args:
          exported_program: an edge program (tag it in place or a copy).

        Returns:
          The tagged program and the delegation spec of each tag.
        """
        raise NotImplementedError


class _Support(OperatorSupportBase):
    def __init__(self, is_supported: Callable[[torch.fx.Node], bool]) -> None:
        super().__init__()
        self._is_supported = is_supported

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:  # noqa: D102
        return node.op == "call_function" and bool(self._is_supported(node))


def tag_supported_nodes(
    exported_program: ExportedProgram,
    is_supported: Callable[[torch.fx.Node], bool],
    tag_prefix: str,
    allows_single_node_partition: bool = True,
) -> List[str]:
    """Groups supported nodes into cycle-free partitions and tags them "<tag_prefix><i>".

    Partitions are numbered in graph order, so tags are deterministic.

    Args:
      exported_program: the program to tag in place.
      is_supported: whether a call_function node can run in the backend.
      tag_prefix: prefix of the tags.
      allows_single_node_partition: whether a lone supported node forms a partition.

    Returns:
      The tags used, in order.
    """
    gm = exported_program.graph_module
    for node in gm.graph.nodes:
        node.meta.pop(DELEGATION_TAG, None)
    support = _Support(is_supported)
    if allows_single_node_partition:
        # CapabilityBasedPartitioner's grouping without its quadratic dependency sets.
        partitions = greedy_partitions(gm.graph, lambda node: support.is_node_supported(None, node))
    else:
        partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=False)
        partitions = [set(p.nodes) for p in partitioner.propose_partitions() if p.nodes]
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    partitions.sort(key=lambda p: min(order[n] for n in p))
    tags = []
    for i, part in enumerate(partitions):
        tag = f"{tag_prefix}{i}"
        tags.append(tag)
        for node in part:
            node.meta[DELEGATION_TAG] = tag
    return tags
