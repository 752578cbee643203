"""The grouping torch's CapabilityBasedPartitioner proposes (with single-node partitions allowed and
horizontal fusion on), computed with bitsets instead of its per-node Python sets.

torch's partitioner keeps, for every node, a Python set of every node downstream of it and walks
them on every merge it tries: quadratic memory and time in Python objects (a 30-layer model's two
methods hold thousands of nodes each, and every supported node tries a merge with every partition).
The same greedy procedure is followed here step by step (so the partitions, and the programs made
from them, are the same):

- nodes are visited last to first; an unassigned supported node opens a partition, which records
  the partitions its users reach;
- after every node, every partition (a new one first, then oldest first) is merged into the first
  one when the merge creates no cycle: nothing downstream of a user outside the pair is in the pair
  or in a partition that reaches the pair;
- a merge keeps the larger partition's id; getitem nodes then follow their producer.

Reachability is one integer per node used as a bitset over node positions (the node and everything
downstream of it), and one per partition (its members), so a merge's test is a few big-integer ANDs
rather than a walk. The partitions that reach a given one are kept as an index, and a pair whose
merge failed is not tried again until some merge succeeds: a partition opened since cannot change
that pair's answer, as its node precedes every node of the pair and users only lead forward.
"""

import collections
import itertools
import operator
from typing import Callable, Dict, Iterable, List, Set, Tuple

import torch

__all__ = ["greedy_partitions"]

Node = torch.fx.Node


def _downstream(nodes: List[Node], position: Dict[Node, int]) -> Dict[Node, int]:
    """Each node -> a bitset (bit i: the node at position i) of itself and every node after it."""
    below: Dict[Node, int] = {}
    for node in reversed(nodes):
        bits = 1 << position[node]
        for user in node.users:
            bits |= below[user]
        below[node] = bits
    return below


def greedy_partitions(graph: torch.fx.Graph, supported: Callable[[Node], bool]) -> List[Set[Node]]:
    """Groups supported nodes into cycle-free partitions.

    Args:
      graph: the graph (its node order is a topological order).
      supported: whether a node can be in a partition.

    Returns:
      The non-empty partitions (in no particular order).
    """
    nodes = list(graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    below = _downstream(nodes, position)
    assign: Dict[Node, int] = {}
    members: Dict[int, Dict[Node, None]] = {}
    bits: Dict[int, int] = {}  # a partition's members as a bitset over positions
    outside_users: Dict[int, Set[Node]] = {}
    reaches: Dict[int, Set[int]] = {}  # partitions reachable from the partition's users
    reached_by: Dict[int, Set[int]] = collections.defaultdict(set)  # id -> live q with id in reaches[q]
    failed: Set[Tuple[int, int]] = set()  # pairs whose merge failed since the last merge
    age: Dict[int, int] = {}  # the oldest id merged into the partition
    ids = itertools.count()

    def downstream_of(starts: Iterable[Node]) -> int:
        found = 0
        for node in starts:
            found |= below[node]
        return found

    def reached(starts: Iterable[Node], exclude: Iterable[int]) -> Set[int]:
        """The partitions of starts and of everything downstream of them, with what those reach."""
        span = downstream_of(starts)
        found: Set[int] = set()
        for pid, member_bits in bits.items():
            if member_bits & span:
                found.add(pid)
                found.update(reaches[pid])
        found.difference_update(exclude)
        return found

    def set_reaches(pid: int, targets: Set[int]) -> None:
        for target in reaches.get(pid, ()):
            reached_by[target].discard(pid)
        reaches[pid] = targets
        for target in targets:
            reached_by[target].add(pid)

    def creates_cycle(a: int, b: int, users: Set[Node]) -> bool:
        span = downstream_of(users)
        if span & (bits[a] | bits[b]):
            return True
        return any(span & bits[q] for q in reached_by[a] | reached_by[b])

    def merge(a: int, b: int) -> int:
        if (a, b) in failed:
            return a
        users = (outside_users[a] | outside_users[b]).difference(members[a], members[b])
        if creates_cycle(a, b, users):
            failed.add((a, b))
            return a
        failed.clear()
        keep, gone = (b, a) if len(members[a]) < len(members[b]) else (a, b)
        members[keep].update(members[gone])
        for node in members[gone]:
            assign[node] = keep
        del members[gone]
        bits[keep] |= bits.pop(gone)
        age[keep] = min(age[keep], age.pop(gone))
        targets = reaches[keep] | reaches[gone]
        set_reaches(gone, set())
        del reaches[gone]
        outside_users[keep] = users
        del outside_users[gone]
        targets.update(reached(users, (keep, gone)))
        targets.discard(keep)
        targets.discard(gone)
        set_reaches(keep, targets)
        return keep

    for node in reversed(nodes):
        candidates: Dict[int, None] = {}  # an ordered set: a new partition first, then oldest first
        if supported(node) and node not in assign:
            pid = next(ids)
            candidates[pid] = None
            assign[node] = pid
            members[pid] = {node: None}
            bits[pid] = 1 << position[node]
            age[pid] = pid
            outside_users[pid] = set(node.users)
            set_reaches(pid, reached(node.users, (pid,)))
        candidates.update((pid, None) for pid, _ in sorted(age.items(), key=operator.itemgetter(1)))
        order = list(candidates)
        if len(order) > 1:
            current = order[0]
            for other in order[1:]:
                current = merge(current, other)

    # A node whose users are all getitems hands its partition (or none) to them.
    while True:
        moves: Dict[Node, object] = {}
        for node in nodes:
            if all(u.op == "call_function" and u.target is operator.getitem for u in node.users):
                owner = assign.get(node)
                for user in node.users:
                    if assign.get(user) != owner:
                        moves[user] = owner
        if not moves:
            break
        for node, owner in moves.items():
            if node in assign:
                del members[assign[node]][node]
            if owner is None:
                assign.pop(node, None)
            else:
                assign[node] = owner
                members[owner][node] = None
    return [set(m) for m in members.values() if m]
