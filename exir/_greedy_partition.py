"""The grouping torch's CapabilityBasedPartitioner proposes (with single-node partitions allowed and
horizontal fusion on), computed without its all-pairs dependency sets.

torch's partitioner keeps, for every node, the set of every node downstream of it: quadratic memory
and time in the graph's size (a 30-layer model's two methods hold thousands of nodes each). The same
greedy procedure is followed here step by step (so the partitions, and the programs made from them,
are the same), with reachability answered by walks over the users that stop at the last node a
cycle could involve, instead of stored sets:

- nodes are visited last to first; an unassigned supported node opens a partition, which records
  the partitions its users reach;
- after every node, every partition (a new one first, then oldest first) is merged into the first
  one when the merge creates no cycle: no user outside the pair reaches back into the pair, nor into a partition that
  reaches the pair;
- a merge keeps the larger partition's id; getitem nodes then follow their producer.
"""

import itertools
import operator
from typing import Callable, Dict, Iterable, List, Set

import torch

__all__ = ["greedy_partitions"]

Node = torch.fx.Node


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
    assign: Dict[Node, int] = {}
    members: Dict[int, Dict[Node, None]] = {}
    last: Dict[int, int] = {}  # the largest position of a member
    outside_users: Dict[int, Set[Node]] = {}
    reaches: Dict[int, Set[int]] = {}  # partitions reachable from the partition's users
    age: Dict[int, int] = {}  # the oldest id merged into the partition
    ids = itertools.count()

    def reached(starts: Iterable[Node], exclude: Iterable[int]) -> Set[int]:
        """The partitions of starts and of everything downstream of them, with what those reach."""
        found: Set[int] = set()
        seen: Set[Node] = set()
        stack = list(starts)
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            owner = assign.get(node)
            if owner is not None:
                found.add(owner)
                found.update(reaches[owner])
            stack.extend(node.users)
        found.difference_update(exclude)
        return found

    def creates_cycle(a: int, b: int, users: Set[Node]) -> bool:
        pair_a, pair_b = members[a], members[b]
        marked = {q for q, r in reaches.items() if a in r or b in r}
        # Users only lead forward: nothing past the last node of the pair or of a marked partition
        # can lead back into them.
        bound = max([last[a], last[b]] + [last[q] for q in marked])
        seen: Set[Node] = set()
        stack = [u for u in users if position[u] <= bound]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node in pair_a or node in pair_b or assign.get(node) in marked:
                return True
            stack.extend(u for u in node.users if position[u] <= bound)
        return False

    def merge(a: int, b: int) -> int:
        users = (outside_users[a] | outside_users[b]).difference(members[a], members[b])
        if creates_cycle(a, b, users):
            return a
        keep, gone = (b, a) if len(members[a]) < len(members[b]) else (a, b)
        members[keep].update(members[gone])
        for node in members[gone]:
            assign[node] = keep
        del members[gone]
        last[keep] = max(last[keep], last.pop(gone))
        age[keep] = min(age[keep], age.pop(gone))
        reaches[keep] = reaches[keep] | reaches.pop(gone)
        outside_users[keep] = users
        del outside_users[gone]
        reaches[keep].update(reached(users, (keep, gone)))
        reaches[keep].discard(keep)
        reaches[keep].discard(gone)
        return keep

    for node in reversed(nodes):
        candidates: Dict[int, None] = {}  # an ordered set: a new partition first, then oldest first
        if supported(node) and node not in assign:
            pid = next(ids)
            candidates[pid] = None
            assign[node] = pid
            members[pid] = {node: None}
            last[pid] = position[node]
            age[pid] = pid
            outside_users[pid] = set(node.users)
            reaches[pid] = reached(node.users, (pid,))
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
