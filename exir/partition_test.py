"""greedy_partitions groups nodes exactly as torch's CapabilityBasedPartitioner does (so lowered
programs stay the same), on random graphs and on a causal LM's two methods under XNNPACK's rules."""

import operator
import random

import pytest
import torch
from edgeshare.backends.xnnpack.partitioner import _Checker
from edgeshare.exir import to_edge
from edgeshare.exir._greedy_partition import greedy_partitions
from edgeshare.exir.hf import CausalLMLogits, token_dynamic_shapes
from edgeshare.exir.hf_cache import kv_cache_method
from edgeshare.exir.lora import export_method
from edgeshare.models import hf_tiny
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase


class _Support(OperatorSupportBase):
    def __init__(self, supported):
        super().__init__()
        self.supported = supported

    def is_node_supported(self, submodules, node):
        return node.op == "call_function" and self.supported(node)


def _torch_partitions(gm, supported):
    partitioner = CapabilityBasedPartitioner(gm, _Support(supported), allows_single_node_partition=True)
    return {frozenset(p.nodes) for p in partitioner.propose_partitions() if p.nodes}


def _ours(gm, supported):
    return {frozenset(p) for p in greedy_partitions(gm.graph, lambda n: n.op == "call_function" and supported(n))}


def _random_graph(seed):
    """A DAG of adds, multi-output splits (getitems) and unsupported negs over a few inputs."""
    rng = random.Random(seed)
    graph = torch.fx.Graph()
    values = [graph.placeholder(f"x{i}") for i in range(3)]
    unsupported = set()
    for _ in range(rng.randint(10, 45)):
        kind = rng.random()
        if kind < 0.15:
            pair = graph.call_function(torch.ops.aten.split.Tensor, (rng.choice(values[-6:]), 1))
            values += [graph.call_function(operator.getitem, (pair, k)) for k in range(2)]
            continue
        a, b = rng.choice(values[-8:]), rng.choice(values)
        node = graph.call_function(torch.ops.aten.add.Tensor if kind < 0.75 else torch.ops.aten.mul.Tensor, (a, b))
        if rng.random() < 0.3:
            unsupported.add(node)
        values.append(node)
    graph.output(tuple(values[-3:]))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    return gm, lambda n: n not in unsupported


@pytest.mark.parametrize("seed", range(60))
def test_random_graphs_are_grouped_as_torch_groups_them(seed):
    gm, supported = _random_graph(seed)
    assert _ours(gm, supported) == _torch_partitions(gm, supported)


def test_a_causal_lms_methods_are_grouped_as_torch_groups_them():
    model = hf_tiny.make_tiny_model("llama")
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 5), generator=torch.Generator().manual_seed(0))
    cached = kv_cache_method(model, 16)
    programs = {
        "forward": export_method(CausalLMLogits(model), (ids,), "llama", token_dynamic_shapes(16)),
        "forward_cached": export_method(
            cached.wrap(CausalLMLogits(model)), cached.example_inputs, "llama", cached.dynamic_shapes
        ),
    }
    edge = to_edge(programs)
    for method in edge.methods:
        ep = edge.exported_program(method)
        checker = _Checker(ep)
        ours = _ours(ep.graph_module, checker)
        assert len(ours) > 1
        assert ours == _torch_partitions(ep.graph_module, checker), method


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
