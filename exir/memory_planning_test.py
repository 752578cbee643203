"""Greedy memory planning: no overlap between live tensors, reuse of dead ones, alignment."""

import pytest
from edgeshare.exir.memory_planning import PlannedTensor, plan_memory


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_live_tensors_never_overlap_and_offsets_are_aligned():
    tensors = [
        PlannedTensor(0, 100, -1, 1),
        PlannedTensor(1, 40, 0, 2),
        PlannedTensor(2, 200, 1, 3),
        PlannedTensor(3, 8, 2, 3),
    ]
    offsets, total = plan_memory(tensors, 16)
    assert all(o % 16 == 0 for o in offsets.values())
    for a in tensors:
        for b in tensors:
            if a.value_index < b.value_index and not (a.last_use < b.first_use or b.last_use < a.first_use):
                ra = (offsets[a.value_index], offsets[a.value_index] + a.nbytes)
                rb = (offsets[b.value_index], offsets[b.value_index] + b.nbytes)
                assert not _overlap(ra, rb), (a, b)
    assert total >= max(offsets[t.value_index] + t.nbytes for t in tensors)
    assert total % 16 == 0


def test_tensors_with_disjoint_lifetimes_share_memory():
    offsets, total = plan_memory([PlannedTensor(0, 64, 0, 1), PlannedTensor(1, 64, 2, 3)], 16)
    assert offsets == {0: 0, 1: 0}
    assert total == 64


def test_input_and_output_of_one_instruction_do_not_alias():
    offsets, _ = plan_memory([PlannedTensor(0, 64, -1, 0), PlannedTensor(1, 64, 0, 1)], 16)
    assert offsets[0] != offsets[1]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
