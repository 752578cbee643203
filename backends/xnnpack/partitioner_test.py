"""XnnpackPartitioner tags what the delegate runs and leaves the rest."""

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import to_edge
from edgeshare.exir.export import edge_decompositions
from edgeshare.exir.partition import DELEGATION_TAG
from edgeshare.models import demo_lora
from torch import nn


def _tags(module, *inputs):
    edge = to_edge(torch.export.export(module, inputs))
    ep = edge.exported_program()
    result = XnnpackPartitioner().partition(ep)
    return ep, result


def test_whole_demo_graph_is_one_partition():
    _, adapters, inputs = demo_lora()
    ep, result = _tags(adapters["lora_a"], *inputs)
    assert list(result.partition_tags) == ["xnnpack_0"]
    assert result.partition_tags["xnnpack_0"].backend_id == "XnnpackBackend"
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert calls and all(n.meta.get(DELEGATION_TAG) == "xnnpack_0" for n in calls)


class _Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        y = torch.sigmoid(self.fc(x))
        z = self.ln(y)
        return torch.softmax(z, dim=0) + torch.softmax(z, dim=-1), x.to(torch.int32) + 1


def test_unsupported_nodes_are_left_untagged():
    ep, _ = _tags(_Mixed(), torch.randn(2, 8))
    tagged = {n.target for n in ep.graph.nodes if DELEGATION_TAG in n.meta}
    untagged = {n.target for n in ep.graph.nodes if n.op == "call_function" and DELEGATION_TAG not in n.meta}
    aten = torch.ops.aten
    assert aten.linear.default in tagged and aten.sigmoid.default in tagged
    assert aten.native_layer_norm.default in untagged
    softmaxes = [n for n in ep.graph.nodes if n.target == aten._softmax.default]
    assert {n.args[1]: DELEGATION_TAG in n.meta for n in softmaxes} == {0: False, -1: True}
    int_adds = [n for n in ep.graph.nodes if n.target == aten.add.Tensor and n.meta["val"].dtype == torch.int32]
    assert int_adds and all(DELEGATION_TAG not in n.meta for n in int_adds)


def test_linear_with_activation_input_as_weight_is_not_tagged():
    class M(nn.Module):
        def forward(self, x, w):
            return torch.nn.functional.linear(x, w)

    ep, result = _tags(M(), torch.randn(2, 4), torch.randn(3, 4))
    assert not result.partition_tags


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize(
    "fn, target",
    [
        (torch.floor, torch.ops.aten.floor.default),
        (torch.ceil, torch.ops.aten.ceil.default),
        (torch.rsqrt, torch.ops.aten.rsqrt.default),
        (lambda x: x.mean(-1), torch.ops.aten.mean.dim),
        (lambda x: x.mean(-1, keepdim=True), torch.ops.aten.mean.dim),
        (lambda x: x.mean(dim=2), torch.ops.aten.mean.dim),
        (lambda x: x.mean(dim=[2], keepdim=True), torch.ops.aten.mean.dim),
    ],
    ids=["floor", "ceil", "rsqrt", "mean_last", "mean_last_keepdim", "mean_rank_minus_1", "mean_list_keepdim"],
)
def test_rounding_rsqrt_and_mean_over_the_last_dim_are_tagged(fn, target):
    ep, result = _tags(_Fn(fn), torch.rand(2, 3, 4) + 0.5)
    (node,) = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert node.target == target
    assert node.meta.get(DELEGATION_TAG) == "xnnpack_0"


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda x: x.mean(0), torch.rand(2, 3, 4)),
        (lambda x: x.mean(1, keepdim=True), torch.rand(2, 3, 4)),
        (lambda x: x.mean([-1, -2]), torch.rand(2, 3, 4)),
        (lambda x: x.mean(-1, dtype=torch.float32), torch.rand(2, 3, 4)),
        (lambda x: x.mean(), torch.rand(2, 3, 4)),
        (lambda x: torch.floor(x), torch.arange(6, dtype=torch.int32)),
        (lambda x: x.mean(-1), torch.rand(2, 0)),
    ],
    ids=["mean_dim0", "mean_middle_dim", "mean_two_dims", "mean_dtype", "mean_all", "floor_int", "mean_empty"],
)
def test_mean_not_over_the_last_dim_alone_and_non_float_rounding_are_left(fn, x):
    ep, result = _tags(_Fn(fn), x)
    assert [n for n in ep.graph.nodes if n.op == "call_function"]
    assert not result.partition_tags


def _dynamic_tags(module, inputs, max_t=32):
    """Partitions module exported with dim 1 of every input dynamic (T in [1, max_t], or unbounded
    for None): the nodes tagged, by name."""
    t = torch.export.Dim("T", min=1, max=max_t) if max_t is not None else torch.export.Dim("T", min=1)
    ep = torch.export.export(module, inputs, dynamic_shapes=tuple({1: t} for _ in inputs))
    ep = ep.run_decompositions(edge_decompositions())
    XnnpackPartitioner().partition(ep)
    return ep, {n.name: n for n in ep.graph.nodes if n.op == "call_function"}


class _Dynamic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, ids):
        g = self.fc(x) * x.mean(-1, keepdim=True)  # [1, T, 8] * [1, T, 1]
        s = torch.softmax(g, -1)  # over an exact last dim
        over_t = torch.softmax(g.transpose(1, 2), -1)  # over T
        v = s.view(1, x.shape[1], 2, 4)  # a size computed at run time
        doubled = torch.cat([s, s], 1) * 2.0  # [1, 2 * T, 8]
        return v, doubled, over_t, ids + 1


def test_dynamic_nodes_with_plain_symbols_are_tagged():
    ep, calls = _dynamic_tags(_Dynamic(), (torch.randn(1, 5, 8), torch.arange(5).reshape(1, 5)))
    aten = torch.ops.aten

    def tagged(target):
        nodes = [n for n in calls.values() if n.target == target]
        assert nodes, target
        return {DELEGATION_TAG in n.meta for n in nodes}

    x = next(n for n in ep.graph.nodes if n.name == "x")
    assert isinstance(x.meta["val"].shape[1], torch.SymInt)
    assert tagged(aten.linear.default) == {True}
    assert tagged(aten.mean.dim) == {True}
    assert tagged(aten.view.default) == {False}


def _tagged_by(calls, target, key):
    """{key(node): whether it is tagged} over the calls of target."""
    return {key(n): DELEGATION_TAG in n.meta for n in calls.values() if n.target == target}


def test_dynamic_nodes_over_a_symbolic_softmax_dim_a_compound_size_or_ints_are_left():
    _, calls = _dynamic_tags(_Dynamic(), (torch.randn(1, 5, 8), torch.arange(5).reshape(1, 5)))
    aten = torch.ops.aten
    softmaxes = _tagged_by(calls, aten._softmax.default, lambda n: n.args[0].target)
    assert softmaxes == {aten.mul.Tensor: True, aten.permute.default: False}
    # By the size of dim 1: s27 (delegated) and 2*s27 (left).
    muls = _tagged_by(calls, aten.mul.Tensor, lambda n: "*" in str(n.meta["val"].shape[1]))
    assert muls == {False: True, True: False}
    int_adds = _tagged_by(calls, aten.add.Tensor, lambda n: n.meta["val"].dtype)
    assert int_adds == {torch.int64: False}


def test_a_symbol_without_a_finite_bound_is_left():
    ep, calls = _dynamic_tags(nn.Linear(8, 4), (torch.randn(1, 5, 8),), max_t=None)
    (linear,) = [n for n in calls.values() if n.target == torch.ops.aten.linear.default]
    assert DELEGATION_TAG not in linear.meta
    _, calls = _dynamic_tags(nn.Linear(8, 4), (torch.randn(1, 5, 8),), max_t=64)
    (linear,) = [n for n in calls.values() if n.target == torch.ops.aten.linear.default]
    assert linear.meta[DELEGATION_TAG] == "xnnpack_0"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
