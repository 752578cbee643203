"""Dynamic dims: one export serves every size up to the bound. The emitted program carries the
symbolic sizes (bounds, dynamic dims, size kernels, int lists computed at run time, tensor lists),
and the C++ runtime runs it at several lengths equal to torch, refusing one past the bound."""

import os
import tempfile
from typing import List

import numpy as np
import pytest
import torch
from edgeshare.exir import to_edge
from edgeshare.exir.errors import UnsupportedModelError
from edgeshare.schema import program_generated as fb
from edgeshare.testing.run_binary import RunError, run_programs

MAX_LEN = 16
DIM = 8


class _Mixer(torch.nn.Module):
    """Sizes computed from the token count (view to [T, 2, 4], arange(T)), a tensor list (cat)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(DIM, DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        t = x.shape[0]
        y = torch.relu(x @ self.w).view(t, 2, DIM // 2)
        pos = torch.arange(t, dtype=torch.float32).view(t, 1, 1)
        return torch.cat([y + pos, y * 2.0], dim=1).view(t * 4, DIM // 2)


def _export(max_len: int = MAX_LEN) -> torch.export.ExportedProgram:
    t = torch.export.Dim("T", min=1, max=max_len)
    return torch.export.export(_Mixer(), (torch.randn(5, DIM),), dynamic_shapes=({0: t},))


def _plan(buffer: bytes) -> "fb.ExecutionPlanT":
    offset = int.from_bytes(buffer[16:24], "little")
    program = fb.ProgramT.InitFromObj(fb.Program.GetRootAs(buffer, offset))
    return program.executionPlans[0]


@pytest.fixture(scope="module")
def program() -> str:
    out = tempfile.mkdtemp(prefix="dynamic_shapes_test_")
    to_edge(_export()).to_executorch().write_to_dir(out, "mixer")
    return os.path.join(out, "mixer.pte")


def test_the_program_carries_bounds_dynamic_dims_and_size_kernels(program: str) -> None:
    with open(program, "rb") as f:
        plan = _plan(f.read())
    x = plan.values[plan.inputs[0]].val
    assert list(x.sizes) == [MAX_LEN, DIM]
    assert list(x.dynamicDims) == [0]
    out = plan.values[plan.outputs[0]].val
    assert list(out.sizes) == [MAX_LEN * 4, DIM // 2] and list(out.dynamicDims) == [0]
    ops = {(o.name.decode(), o.overload.decode() if o.overload else "") for o in plan.operators}
    assert ("aten::sym_size", "int") in ops
    assert ("sym::mul", "") in ops
    kinds = [v.valType for v in plan.values]
    assert fb.KernelTypes.SymIntList in kinds and fb.KernelTypes.ValueList in kinds
    # Planned for the bound: at least the input, the output and one intermediate at MAX_LEN.
    assert plan.nonConstBufferSizes[1] >= 4 * (MAX_LEN * DIM * 3)


@pytest.mark.parametrize("length", [1, 7, MAX_LEN])
def test_runs_equal_to_torch_at_any_length_within_the_bound(program: str, length: int) -> None:
    torch.manual_seed(length)
    x = torch.randn(length, DIM)
    run = run_programs([program], inputs=[x.numpy()])
    got: List[np.ndarray] = run.outputs["mixer.forward"]
    want = _Mixer()(x).detach().numpy()
    assert got[0].shape == want.shape
    np.testing.assert_allclose(got[0], want, atol=1e-5, rtol=1e-5)


def test_a_length_past_the_bound_is_a_clear_error(program: str) -> None:
    with pytest.raises(RunError, match=r"input 0 of method 'forward': dim 0 is 17, outside the 1\.\.16"):
        run_programs([program], inputs=[np.zeros((MAX_LEN + 1, DIM), np.float32)])


def test_a_dynamic_dim_without_a_max_is_refused_naming_the_node() -> None:
    t = torch.export.Dim("T", min=1)
    ep = torch.export.export(_Mixer(), (torch.randn(5, DIM),), dynamic_shapes=({0: t},))
    with pytest.raises(UnsupportedModelError, match="method 'forward'.*no upper bound.*max="):
        to_edge(ep).to_executorch()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
