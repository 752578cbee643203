"""One export with a dynamic token count T, delegated to XNNPACK, runs through the real C++
runtime (//tools:run) at several T up to the bound, equal to torch: the delegate binds T from its
input, runs each step for T rows and gives its outputs their real shape."""

import os
import tempfile
from typing import List

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.backends.xnnpack.partitioner import FP16_TOLERANCE
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.exir import to_edge
from edgeshare.exir.lower import LoweredBackendModule
from edgeshare.testing.run_binary import RunError, run_programs
from torch import nn

MAX_LEN = 24
DIM = 16


class _Block(nn.Module):
    """An attention-free decoder block: RMSNorm, then a SiLU-gated MLP, residual; 2 layers."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.Parameter(torch.rand(DIM) + 0.5)
        self.gate = nn.ModuleList(nn.Linear(DIM, 2 * DIM, bias=False) for _ in range(2))
        self.up = nn.ModuleList(nn.Linear(DIM, 2 * DIM, bias=False) for _ in range(2))
        self.down = nn.ModuleList(nn.Linear(2 * DIM, DIM) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        for gate, up, down in zip(self.gate, self.up, self.down):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
            x = x + down(torch.nn.functional.silu(gate(h)) * up(h))
        return torch.softmax(x, -1)


def _write(fc_weight_dtype: str) -> str:
    t = torch.export.Dim("T", min=1, max=MAX_LEN)
    ep = torch.export.export(_Block(), (torch.randn(1, 5, DIM),), dynamic_shapes=({1: t},))
    lowered = to_edge(ep).to_backend(XnnpackPartitioner(fc_weight_dtype=fc_weight_dtype))
    forward = lowered.exported_program("forward")
    calls = [n for n in forward.graph.nodes if n.op == "call_function"]
    delegates = [m for m in forward.graph_module.children() if isinstance(m, LoweredBackendModule)]
    # Wholly delegated: one call (and its output's getitem).
    assert len(delegates) == 1 and len(calls) == 2, [n.target for n in calls]
    graph = xfb.GraphT.InitFromObj(xfb.Graph.GetRootAs(delegates[0].processed_bytes, 0))
    assert graph.version == 2 and [s.max for s in graph.symbols] == [MAX_LEN]
    half = 5  # ScalarType HALF: the fully connected weights under fc_weight_dtype="fp16"
    assert any(v.dtype == half for v in graph.values) == (fc_weight_dtype == "fp16")
    out = tempfile.mkdtemp(prefix="xnnpack_dynamic_test_")
    lowered.to_executorch().write_to_dir(out, "block")
    return os.path.join(out, "block.pte")


@pytest.fixture(scope="module")
def program() -> str:
    return _write("fp32")


@pytest.mark.parametrize("length", [1, 7, MAX_LEN])
def test_runs_equal_to_torch_at_any_length_within_the_bound(program: str, length: int) -> None:
    torch.manual_seed(length)
    x = torch.randn(1, length, DIM)
    run = run_programs([program], inputs=[x.numpy()])
    got: List[np.ndarray] = run.outputs["block.forward"]
    want = _Block()(x).detach().numpy()
    assert got[0].shape == want.shape
    np.testing.assert_allclose(got[0], want, atol=1e-5, rtol=1e-4)


def test_fp16_weights_run_at_two_lengths_within_the_documented_bound() -> None:
    program = _write("fp16")
    for length in (3, 17):
        torch.manual_seed(length)
        x = torch.randn(1, length, DIM)
        got = run_programs([program], inputs=[x.numpy()]).outputs["block.forward"][0]
        want = _Block()(x).detach().numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= FP16_TOLERANCE * max(1.0, float(np.abs(want).max()))


def test_a_length_past_the_bound_is_refused(program: str) -> None:
    with pytest.raises(RunError, match=str(MAX_LEN)):
        run_programs([program], inputs=[np.zeros((1, MAX_LEN + 1, DIM), np.float32)])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
