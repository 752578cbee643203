"""Every op the XnnpackPartitioner accepts runs FULLY delegated through the real C++ runtime
(//tools:run) and matches torch eager; ops the delegate cannot run stay kernel calls (and the
portable kernels run them). The Python partitioner accepts exactly what the runtime runs: a node
it tags must never make a program fail to load.
"""

import dataclasses
import os
import tempfile
import zlib
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.backends.xnnpack.op_rows import supported_targets
from edgeshare.exir import to_edge
from edgeshare.exir._serialize import deserialize_pte
from edgeshare.exir.export import edge_decompositions
from edgeshare.schema import program_generated as fb
from edgeshare.testing.run_binary import run_programs
from torch import nn

TOLERANCE = 1e-4
aten = torch.ops.aten
K = xfb.OpKind

Fn = Callable[..., Any]


class _Module(nn.Module):
    """fn(module, *inputs); the module owns an optional Linear and an optional parameter."""

    def __init__(self, fn: Fn, linear: Optional[Tuple[int, int, bool]], param: Optional[Tuple[int, ...]]) -> None:
        super().__init__()
        self.fn = fn
        g = torch.Generator().manual_seed(7)
        self.fc = nn.Linear(*linear) if linear is not None else None
        self.p = nn.Parameter(torch.randn(*param, generator=g)) if param is not None else None

    def forward(self, *xs: torch.Tensor) -> Any:  # noqa: D102
        return self.fn(self, *xs)


@dataclasses.dataclass(frozen=True)
class Case:
    """One tiny model.

    Attributes:
      name: the test id.
      fn: fn(module, *inputs) -> tensor(s).
      shapes: input shapes (float32).
      kinds: XNNPACK op kinds the delegate's graph must use (delegated cases).
      linear: (in, out, bias) of module.fc.
      param: shape of module.p.
      positive: indices of inputs drawn from [0.5, 2) instead of [-2, 2).
      kernels: operator names that must stay kernel calls (non-delegated cases).
    """

    name: str
    fn: Fn
    shapes: Tuple[Tuple[int, ...], ...]
    kinds: FrozenSet[int] = frozenset()
    linear: Optional[Tuple[int, int, bool]] = None
    param: Optional[Tuple[int, ...]] = None
    positive: Tuple[int, ...] = ()
    kernels: FrozenSet[str] = frozenset()


def _c(
    name: str,
    fn: Fn,
    shapes: Sequence[Tuple[int, ...]],
    kinds: Sequence[int] = (),
    kernels: Sequence[str] = (),
    **kw: Any,
) -> Case:
    return Case(name, fn, tuple(tuple(s) for s in shapes), frozenset(kinds), kernels=frozenset(kernels), **kw)


X = (4, 8)
DELEGATED: List[Case] = [
    _c("linear_bias", lambda m, x: m.fc(x), [X], [K.FULLY_CONNECTED], linear=(8, 16, True)),
    _c("linear_no_bias", lambda m, x: m.fc(x), [X], [K.FULLY_CONNECTED], linear=(8, 16, False)),
    _c("linear_3d", lambda m, x: m.fc(x), [(2, 3, 8)], [K.FULLY_CONNECTED], linear=(8, 5, True)),
    _c("linear_1d", lambda m, x: m.fc(x), [(8,)], [K.FULLY_CONNECTED], linear=(8, 5, True)),
    # tensor-tensor, same shape and broadcasting (up to rank 6)
    _c("add", lambda m, x, y: x + y, [X, X], [K.ADD]),
    _c("add_bcast_row", lambda m, x, y: x + y, [X, (8,)], [K.ADD]),
    _c("add_bcast_rank6", lambda m, x, y: x + y, [(1, 2, 1, 2, 1, 3), (2, 1, 2, 1, 3, 1)], [K.ADD]),
    _c("add_param", lambda m, x: x + m.p, [X], [K.ADD], param=(8,)),
    _c("sub_bcast", lambda m, x, y: x - y, [(1, 8), (4, 1)], [K.SUBTRACT]),
    _c("mul_bcast", lambda m, x, y: x * y, [(2, 1, 8), (3, 1)], [K.MULTIPLY]),
    _c("mul_param_first", lambda m, x: m.p * x, [X], [K.MULTIPLY], param=(4, 1)),
    _c("div_bcast", lambda m, x, y: x / y, [X, (4, 1)], [K.DIVIDE], positive=(1,)),
    _c("maximum_bcast", lambda m, x, y: torch.maximum(x, y), [X, (8,)], [K.MAXIMUM]),
    _c("minimum_bcast", lambda m, x, y: torch.minimum(x, y), [(2, 3, 4), (3, 1)], [K.MINIMUM]),
    _c("rank0_and_vector", lambda m, x, y: x * y, [(), (5,)], [K.MULTIPLY]),
    # tensor-scalar
    _c("add_scalar", lambda m, x: x + 2.5, [X], [K.ADD]),
    _c("sub_scalar", lambda m, x: x - 1.5, [X], [K.SUBTRACT]),
    _c("scalar_sub", lambda m, x: 2.0 - x, [X], [K.SUBTRACT]),
    _c("mul_scalar", lambda m, x: x * 3, [X], [K.MULTIPLY]),
    _c("div_scalar", lambda m, x: x / 4.0, [X], [K.DIVIDE]),
    # the .Scalar overloads, as a model that calls them directly keeps them
    _c("add_Scalar", lambda m, x: aten.add.Scalar(x, 2.5), [X], [K.ADD]),
    _c("sub_Scalar", lambda m, x: aten.sub.Scalar(x, 0.5), [X], [K.SUBTRACT]),
    _c("mul_Scalar", lambda m, x: aten.mul.Scalar(x, -3), [X], [K.MULTIPLY]),
    _c("div_Scalar", lambda m, x: aten.div.Scalar(x, 8.0), [X], [K.DIVIDE]),
    _c("rank0_scalar", lambda m, x: x * 2.0 + 1.0, [()], [K.MULTIPLY, K.ADD]),
    # activations
    _c("relu", lambda m, x: torch.relu(x), [X], [K.CLAMP]),
    _c("hardtanh", lambda m, x: F.hardtanh(x, -0.3, 0.7), [X], [K.CLAMP]),
    _c("relu6", lambda m, x: F.relu6(x * 4), [X], [K.CLAMP]),
    _c("clamp", lambda m, x: torch.clamp(x, -0.5, 0.25), [X], [K.CLAMP]),
    _c("clamp_min_only", lambda m, x: torch.clamp(x, min=-0.5), [X], [K.CLAMP]),
    _c("clamp_max_only", lambda m, x: torch.clamp(x, max=0.5), [X], [K.CLAMP]),
    _c("sigmoid", lambda m, x: torch.sigmoid(x), [X], [K.SIGMOID]),
    _c("silu", lambda m, x: F.silu(x), [X], [K.SIGMOID, K.MULTIPLY]),
    _c("softmax_last", lambda m, x: torch.softmax(x, dim=-1), [(2, 3, 8)], [K.SOFTMAX]),
    _c("softmax_last_positive_dim", lambda m, x: torch.softmax(x, dim=1), [X], [K.SOFTMAX]),
    _c("hardswish", lambda m, x: F.hardswish(x * 4), [X]),
    _c("leaky_relu", lambda m, x: F.leaky_relu(x, 0.2), [X], [K.LEAKY_RELU]),
    _c("leaky_relu_negative_slope", lambda m, x: F.leaky_relu(x, -0.3), [X], [K.LEAKY_RELU]),
    _c("elu", lambda m, x: F.elu(x), [X], [K.ELU]),
    _c("elu_alpha", lambda m, x: F.elu(x, alpha=0.5), [X], [K.ELU]),
    _c("abs", lambda m, x: torch.abs(x), [X], [K.ABS]),
    _c("neg", lambda m, x: -x, [X], [K.NEGATE]),
    _c("sqrt", lambda m, x: torch.sqrt(x), [X], [K.SQRT], positive=(0,)),
    _c("square_pow", lambda m, x: x**2, [X], [K.SQUARE]),
    _c("square_mul", lambda m, x: x * x, [X], [K.MULTIPLY]),
    _c("rsqrt", lambda m, x: torch.rsqrt(x), [X], [K.RSQRT], positive=(0,)),
    # rounding
    _c("floor", lambda m, x: torch.floor(x * 3), [X], [K.MULTIPLY, K.FLOOR]),
    _c("ceil", lambda m, x: torch.ceil(x * 3), [X], [K.MULTIPLY, K.CEILING]),
    # mean over the last dim
    _c("mean_last_keepdim", lambda m, x: x.mean(-1, keepdim=True), [(2, 3, 8)], [K.MEAN_LAST_DIM]),
    _c("mean_last_positive_dim", lambda m, x: x.mean(1) * 2, [X], [K.MEAN_LAST_DIM, K.MULTIPLY]),
    _c("mean_1d_to_rank0", lambda m, x: x.mean(0) + 1, [(8,)], [K.MEAN_LAST_DIM, K.ADD]),
    _c(
        "rms_norm",
        lambda m, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * m.p,
        [(2, 3, 8)],
        [K.SQUARE, K.MEAN_LAST_DIM, K.ADD, K.RSQRT, K.MULTIPLY],
        param=(8,),
    ),
    # reshapes are copies between ops of one partition
    _c("view", lambda m, x: (x + 1).view(8, 4) * 2, [X], [K.ADD, K.COPY, K.MULTIPLY]),
    _c("reshape_3d", lambda m, x: torch.relu(x.reshape(2, 2, 8)), [X], [K.COPY, K.CLAMP]),
    _c("clone", lambda m, x: (x + 1).clone() * 2, [X], [K.ADD, K.COPY, K.MULTIPLY]),
    _c("squeeze", lambda m, x: (x - 1).squeeze(1), [(4, 1, 8)], [K.SUBTRACT, K.COPY]),
    _c("unsqueeze_squeeze", lambda m, x: (x.unsqueeze(0) - 1).squeeze(0), [X], [K.COPY, K.SUBTRACT]),
    # a small graph: several ops in one partition, two outputs
    _c(
        "mlp_two_outputs",
        lambda m, x: (torch.sigmoid(m.fc(x)) * x.abs().sqrt() - 0.5, torch.relu(x)),
        [(4, 16)],
        linear=(16, 16, True),
    ),
]

# The case that exercises each accepted edge op (checked against that case's edge graph).
COVERAGE: Dict[Any, str] = {
    aten.linear.default: "linear_bias",
    aten.add.Tensor: "add",
    aten.add.Scalar: "add_Scalar",
    aten.sub.Tensor: "sub_bcast",
    aten.sub.Scalar: "sub_Scalar",
    aten.mul.Tensor: "mul_bcast",
    aten.mul.Scalar: "mul_Scalar",
    aten.div.Tensor: "div_bcast",
    aten.div.Scalar: "div_Scalar",
    aten.maximum.default: "maximum_bcast",
    aten.minimum.default: "minimum_bcast",
    aten.relu.default: "relu",
    aten.hardtanh.default: "hardtanh",
    aten.clamp.default: "clamp",
    aten.sigmoid.default: "sigmoid",
    aten._softmax.default: "softmax_last",
    aten.leaky_relu.default: "leaky_relu",
    aten.elu.default: "elu",
    aten.abs.default: "abs",
    aten.neg.default: "neg",
    aten.sqrt.default: "sqrt",
    aten.pow.Tensor_Scalar: "square_pow",
    aten.rsqrt.default: "rsqrt",
    aten.floor.default: "floor",
    aten.ceil.default: "ceil",
    aten.mean.dim: "mean_last_keepdim",
    aten.view.default: "view",
    aten.clone.default: "clone",
    aten.squeeze.dims: "squeeze",
    aten.unsqueeze.default: "unsqueeze_squeeze",
}

# Ops that only the partitioner writes, over open (swappable) data this harness does not build:
# where their delegated cases run.
ELSEWHERE: Dict[Any, str] = {
    torch.ops.edgeshare.linear_stored.default: "tools/export_lora_adapter_dtype_run_test.py",
}

LEFT_OUT: List[Case] = [
    _c("layer_norm", lambda m, x: F.layer_norm(x, (8,)), [X], kernels=["aten::native_layer_norm"]),
    _c("bmm", lambda m, a, b: torch.bmm(a, b), [(2, 3, 4), (2, 4, 5)], kernels=["aten::bmm"]),
    _c("permute", lambda m, x: x.permute(1, 0) * 2, [X], kernels=["aten::permute"]),
    _c("softmax_not_last", lambda m, x: torch.softmax(x, dim=0), [X], kernels=["aten::_softmax"]),
    _c("gelu", lambda m, x: F.gelu(x), [X], kernels=["aten::gelu"]),
    _c("tanh", lambda m, x: torch.tanh(x), [X], kernels=["aten::tanh"]),
    _c("sub_alpha", lambda m, x, y: torch.sub(x, y, alpha=2), [X, X], kernels=["aten::sub"]),
    _c("pow_3", lambda m, x: x**3, [X], kernels=["aten::pow"]),
    _c("mean_dim0", lambda m, x: x.mean(0), [X], kernels=["aten::mean"]),
    _c("mean_two_dims", lambda m, x: x.mean([-1, -2]), [(2, 3, 8)], kernels=["aten::mean"]),
    _c("linear_activation_weight", lambda m, x, w: F.linear(x, w), [X, (3, 8)], kernels=["aten::linear"]),
    # the delegate refuses these at init, so the partitioner must not tag them
    _c("elu_zero_alpha", lambda m, x: F.elu(x, alpha=0.0), [X], kernels=["aten::elu"]),
    _c("elu_negative_alpha", lambda m, x: F.elu(x, alpha=-0.5), [X], kernels=["aten::elu"]),
    _c("clamp_min_equals_max", lambda m, x: torch.clamp(x, 0.5, 0.5), [X], kernels=["aten::clamp"]),
    _c("clamp_min_above_max", lambda m, x: torch.clamp(x, 0.5, -0.5), [X], kernels=["aten::clamp"]),
    _c("zero_size", lambda m, x: x * 2, [(0, 4)], kernels=["aten::mul"]),
]


@dataclasses.dataclass
class Outcome:
    """What one case produced: edge targets, the lowered plan, runtime and torch outputs."""

    targets: List[Any]
    kernel_names: List[str]
    num_delegate_calls: int
    xnn_kinds: List[int]
    got: List[np.ndarray]
    expected: List[torch.Tensor]


def _inputs(case: Case) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    out = []
    for i, shape in enumerate(case.shapes):
        u = torch.rand(shape, generator=g)
        out.append(0.5 + 1.5 * u if i in case.positive else 4.0 * u - 2.0)
    return out


def _graph(blob: bytes) -> "xfb.GraphT":
    assert xfb.Graph.GraphBufferHasIdentifier(blob, 0)
    return xfb.GraphT.InitFromObj(xfb.Graph.GetRootAs(blob, 0))


def _run(case: Case, folder: str) -> Outcome:
    module = _Module(case.fn, case.linear, case.param).eval()
    inputs = _inputs(case)
    edge = to_edge(torch.export.export(module, tuple(inputs)))
    targets = [n.target for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    et = edge.to_backend(XnnpackPartitioner()).to_executorch()
    paths = et.write_to_dir(os.path.join(folder, case.name), "m")
    pte = deserialize_pte(et.buffer, paths[0])
    (plan,) = pte.program.executionPlans
    kernel_names, delegate_calls = [], 0
    for ins in plan.instructions:
        if ins.instrArgsType == fb.InstructionArguments.KernelCall:
            op = plan.operators[ins.instrArgs.opIndex]
            overload = op.overload.decode() if op.overload else ""
            kernel_names.append(op.name.decode() + (f".{overload}" if overload else ""))
        else:
            delegate_calls += 1
    kinds = []
    for delegate in plan.delegates or []:
        kinds += [n.op for n in _graph(pte.segments[delegate.segmentIndex]).nodes]
    run = run_programs([paths[0]], paths[1:], [x.numpy() for x in inputs], work_dir=os.path.dirname(paths[0]))
    with torch.no_grad():
        expected = module(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    return Outcome(targets, kernel_names, delegate_calls, kinds, run.outputs["m.forward"], expected)


def _shard(cases: List[Case]) -> List[Case]:
    """This Bazel test shard's share of cases (every case when not sharded)."""
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    index = int(os.environ.get("TEST_SHARD_INDEX", "0"))
    status = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status:
        open(status, "a").close()
    return [case for i, case in enumerate(cases) if i % total == index]


MY_DELEGATED = _shard(DELEGATED)
MY_LEFT_OUT = _shard(LEFT_OUT)


@pytest.fixture(scope="module")
def outcomes() -> Dict[str, Any]:
    """Exports and runs this shard's cases once (an exception is kept and re-raised by its test)."""
    folder = tempfile.mkdtemp(prefix="xnnpack_ops_test_")
    results: Dict[str, Any] = {}
    for case in MY_DELEGATED + MY_LEFT_OUT:
        try:
            results[case.name] = _run(case, folder)
        except Exception as e:  # re-raised by the case's own test
            results[case.name] = e
    return results


def _outcome(outcomes: Dict[str, Any], case: Case) -> Outcome:
    result = outcomes[case.name]
    if isinstance(result, Exception):
        raise result
    return result


def _assert_matches(case: Case, outcome: Outcome) -> None:
    assert len(outcome.got) == len(outcome.expected), case.name
    for got, want in zip(outcome.got, outcome.expected):
        # Shapes too: a rank-0 result must stay rank 0 (scalars once were [1] constants).
        assert got.shape == tuple(want.shape), (case.name, got.shape, tuple(want.shape))
        np.testing.assert_allclose(got, want.numpy(), atol=TOLERANCE, rtol=TOLERANCE, err_msg=case.name)


@pytest.mark.parametrize("case", MY_DELEGATED, ids=lambda c: c.name)
def test_fully_delegated_and_matches_torch(outcomes: Dict[str, Any], case: Case) -> None:
    outcome = _outcome(outcomes, case)
    assert outcome.kernel_names == [], f"{case.name}: left as kernel calls: {outcome.kernel_names}"
    assert outcome.num_delegate_calls == 1, case.name
    assert case.kinds <= set(outcome.xnn_kinds), (case.name, outcome.xnn_kinds)
    for op, name in COVERAGE.items():
        if name == case.name:
            assert op in outcome.targets, f"{case.name} was meant to run {op}: {outcome.targets}"
    _assert_matches(case, outcome)


@pytest.mark.parametrize("case", MY_LEFT_OUT, ids=lambda c: c.name)
def test_unsupported_ops_stay_kernel_calls_and_run_portably(outcomes: Dict[str, Any], case: Case) -> None:
    outcome = _outcome(outcomes, case)
    names = set(outcome.kernel_names) | {n.split(".")[0] for n in outcome.kernel_names}
    assert case.kernels <= names, (case.name, outcome.kernel_names)
    _assert_matches(case, outcome)


def test_every_op_the_partitioner_accepts_is_covered() -> None:
    """Adding an op to the partitioner without a delegated case here fails this test."""
    accepted = set(supported_targets())
    # to_edge decomposes these before any partitioner sees them (silu -> sigmoid * x, ...).
    decomposed = {op for op in accepted if op in edge_decompositions()}
    assert {aten.silu.default, aten.hardswish.default} <= decomposed
    missing = accepted - decomposed - set(COVERAGE) - set(ELSEWHERE)
    assert not missing, f"no delegated case runs {sorted(str(op) for op in missing)}"
    assert set(COVERAGE.values()) <= {case.name for case in DELEGATED}


class _TiedBias(nn.Module):
    """The linear's bias is added again (an elementwise read) and its weight too."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = nn.Parameter(torch.randn(8, 8, generator=g))
        self.b = nn.Parameter(torch.randn(8, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return F.linear(x, self.w, self.b) + self.b - self.w


def test_weight_read_by_linear_and_elementwise_is_fetched_once(tmp_path: Any) -> None:
    # Regression: the fully connected op fetched its bias and weight to pack them, freed them, and
    # the elementwise ops fetched them again.
    module = _TiedBias().eval()
    x = torch.rand(8, 8, generator=torch.Generator().manual_seed(4))
    et = to_edge(torch.export.export(module, (x,))).to_backend(XnnpackPartitioner()).to_executorch()
    paths = et.write_to_dir(str(tmp_path), "m")
    run = run_programs(paths[:1], inputs=[x.numpy()])
    assert run.stats["named_data_fetches"] == {"forward/w": 1, "forward/b": 1}
    assert run.stats["packs"] == 1
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(run.outputs["m.forward"][0], want, atol=TOLERANCE, rtol=TOLERANCE)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
