"""State: a buffer a method mutates (a KV cache) lives across executes in the C++ runtime, updated
in place when the exporter can, by a copy at the end otherwise, and equals torch's after N calls."""

import os
import tempfile

import numpy as np
import pytest
import torch
from edgeshare.exir import to_edge
from edgeshare.schema import program_generated as fb
from edgeshare.testing.run_binary import run_programs

CACHE_LEN = 8
DIM = 4


class _Cache(torch.nn.Module):
    """cache[:, pos:pos+T] = x (index_copy_, recorded as index_put), returns the cache's sums."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, CACHE_LEN, DIM))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # noqa: D102
        idx = torch.arange(x.shape[1]) + pos
        self.cache.index_copy_(1, idx, x)
        return self.cache.sum(dim=1) * 1.0


class _Total(torch.nn.Module):
    """total += x: its new value is an add, written back by a copy at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.full((DIM,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        self.total.add_(x)
        return self.total * 2.0


def _write(model: torch.nn.Module, args, dynamic_shapes=None) -> str:
    ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes, strict=False)
    out = tempfile.mkdtemp(prefix="state_test_")
    to_edge(ep).to_executorch().write_to_dir(out, "state")
    return os.path.join(out, "state.pte")


def _plan(path: str) -> "fb.ExecutionPlanT":
    with open(path, "rb") as f:
        buffer = f.read()
    offset = int.from_bytes(buffer[16:24], "little")
    return fb.ProgramT.InitFromObj(fb.Program.GetRootAs(buffer, offset)).executionPlans[0]


def _operators(plan: "fb.ExecutionPlanT"):
    return {o.name.decode() for o in plan.operators}


def test_a_cache_is_state_written_in_place_and_matches_torch() -> None:
    t = torch.export.Dim("T", min=1, max=CACHE_LEN)
    path = _write(_Cache(), (torch.randn(1, 3, DIM), torch.tensor(0)), dynamic_shapes=({1: t}, None))
    plan = _plan(path)
    assert len(plan.state) == 1 and plan.state[0].initialSegment == -1  # zeros: no bytes stored
    assert len(plan.inputs) == 2 and len(plan.outputs) == 1  # the cache is neither
    assert "aten::index_put" in _operators(plan) and "aten::copy" not in _operators(plan)
    x = torch.randn(1, 5, DIM)
    pos = torch.tensor(2)
    run = run_programs([path], inputs=[x.numpy(), pos.numpy()])
    np.testing.assert_allclose(run.outputs["state.forward"][0], _Cache()(x, pos).numpy(), atol=1e-6)


@pytest.mark.parametrize("executes", [1, 3])
def test_state_persists_across_executes(executes: int) -> None:
    path = _write(_Total(), (torch.randn(DIM),))
    plan = _plan(path)
    assert len(plan.state) == 1 and plan.state[0].initialSegment >= 0  # 0.5s are stored
    assert "aten::copy" in _operators(plan)
    x = torch.randn(DIM)
    model = _Total()
    for _ in range(executes):
        want = model(x)
    run = run_programs([path], inputs=[x.numpy()], extra_args=["--iterations", str(executes)])
    np.testing.assert_allclose(run.outputs["state.forward"][0], want.numpy(), atol=1e-6)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
