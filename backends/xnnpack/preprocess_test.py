"""XnnpackBackend.preprocess builds the graph blob; weights are named data with key and digest."""

import hashlib
import math

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackBackend, XnnpackPartitioner
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.exir import LoraDataPolicy, NamedDataError, to_edge
from edgeshare.exir.export import edge_decompositions
from edgeshare.exir.lower import LoweredBackendModule
from edgeshare.exir.tensor_layout import tensor_bytes
from torch import nn


class _Block(nn.Module):
    def __init__(self, scale=0.5):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.hardtanh(self.fc(x) * self.scale, -2.0, 2.0), torch.relu(x)


def _lowered(edge):
    lowered = edge.to_backend(XnnpackPartitioner())
    out = {}
    for method in lowered.methods:
        ep = lowered.exported_program(method)
        out[method] = [m for m in ep.graph_module.children() if isinstance(m, LoweredBackendModule)]
    return out


def _graph(blob):
    assert xfb.Graph.GraphBufferHasIdentifier(blob, 0)
    return xfb.GraphT.InitFromObj(xfb.Graph.GetRootAs(blob, 0))


def test_graph_has_io_constants_and_nodes():
    module = _Block()
    edge = to_edge(torch.export.export(module, (torch.randn(2, 4),)), data_policy=LoraDataPolicy())
    (lowered,) = _lowered(edge)["forward"]
    g = _graph(lowered.processed_bytes)
    assert (g.numInputs, g.numOutputs) == (1, 2)
    ops = [n.op for n in g.nodes]
    assert ops == [xfb.OpKind.FULLY_CONNECTED, xfb.OpKind.MULTIPLY, xfb.OpKind.CLAMP, xfb.OpKind.CLAMP]
    assert (g.nodes[2].outputMin, g.nodes[2].outputMax) == (-2.0, 2.0)
    assert (g.nodes[3].outputMin, g.nodes[3].outputMax) == (0.0, math.inf)
    weight = next(v for v in g.values if v.key == b"fc.weight")
    assert weight.kind == xfb.ValueKind.CONSTANT and list(weight.dims) == [3, 4]
    assert bytes(bytearray(weight.digest)) == hashlib.sha256(tensor_bytes(module.fc.weight)).digest()
    scalar = g.values[g.nodes[1].inputs[1]]
    assert scalar.inlineData is not None and len(scalar.inlineData) == 4
    outputs = sorted((v.ioIndex, list(v.dims)) for v in g.values if v.kind == xfb.ValueKind.OUTPUT)
    assert outputs == [(0, [2, 3]), (1, [2, 4])]
    store = lowered.data_store_output
    assert sorted(store.external_data["foundation"]) == ["fc.bias", "fc.weight"]


def test_key_shared_by_two_methods_is_stored_once():
    ep = torch.export.export(_Block(), (torch.randn(2, 4),))
    edge = to_edge({"a": ep, "b": ep}, data_policy=LoraDataPolicy())
    et = edge.to_backend(XnnpackPartitioner()).to_executorch()
    data = et.data_files["foundation"]
    weight = tensor_bytes(ep.state_dict["fc.weight"])
    assert data.count(weight) == 1
    assert weight not in et.buffer


def test_same_key_different_bytes_across_methods_names_the_key():
    a = torch.export.export(_Block(), (torch.randn(2, 4),))
    b = torch.export.export(_Block(), (torch.randn(2, 4),))
    edge = to_edge({"a": a, "b": b}, data_policy=LoraDataPolicy())
    with pytest.raises(NamedDataError, match="'fc.(weight|bias)'"):
        edge.to_backend(XnnpackPartitioner())


def test_preprocess_alone_works_through_the_default_path():
    edge = to_edge(torch.export.export(_Block(), (torch.randn(2, 4),)))
    (lowered,) = _lowered(edge)["forward"]
    result = XnnpackBackend.preprocess(lowered.original_module, [])
    assert result.processed_bytes == lowered.processed_bytes


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize(
    "fn, kind, out_dims",
    [
        (torch.floor, xfb.OpKind.FLOOR, [2, 3, 5]),
        (torch.ceil, xfb.OpKind.CEILING, [2, 3, 5]),
        (torch.rsqrt, xfb.OpKind.RSQRT, [2, 3, 5]),
        (lambda x: x.mean(-1, keepdim=True), xfb.OpKind.MEAN_LAST_DIM, [2, 3, 1]),
        (lambda x: x.mean(2), xfb.OpKind.MEAN_LAST_DIM, [2, 3]),
    ],
    ids=["floor", "ceil", "rsqrt", "mean_last_keepdim", "mean_last"],
)
def test_rounding_rsqrt_and_mean_are_one_node_from_input_to_output(fn, kind, out_dims):
    edge = to_edge(torch.export.export(_Fn(fn), (torch.rand(2, 3, 5) + 0.5,)))
    (lowered,) = _lowered(edge)["forward"]
    g = _graph(lowered.processed_bytes)
    assert (g.numInputs, g.numOutputs) == (1, 1)
    (node,) = g.nodes
    assert node.op == kind
    (x,) = node.inputs
    (y,) = node.outputs
    assert (g.values[x].kind, g.values[x].ioIndex, list(g.values[x].dims)) == (xfb.ValueKind.INPUT, 0, [2, 3, 5])
    assert (g.values[y].kind, g.values[y].ioIndex, list(g.values[y].dims)) == (xfb.ValueKind.OUTPUT, 0, out_dims)
    assert (node.outputMin, node.outputMax) == (-math.inf, math.inf)


def test_a_static_graph_keeps_version_1_and_no_symbols():
    edge = to_edge(torch.export.export(_Block(), (torch.randn(2, 4),)))
    (lowered,) = _lowered(edge)["forward"]
    g = _graph(lowered.processed_bytes)
    assert g.version == 1 and g.symbols is None
    assert all(v.dimSymbols is None for v in g.values)


class _DynamicBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = -torch.sigmoid(self.fc(x)) * x.mean(-1, keepdim=True)
        return torch.softmax(h, -1), x


def test_symbolic_dims_are_written_at_their_bound_with_the_symbol():
    t = torch.export.Dim("T", min=1, max=48)
    ep = torch.export.export(_DynamicBlock(), (torch.randn(1, 5, 8),), dynamic_shapes=({1: t},))
    ep = ep.run_decompositions(edge_decompositions())
    (name,) = {str(n.meta["val"].shape[1]) for n in ep.graph.nodes if n.name == "x"}
    # Every node of this program is delegated: preprocess it whole, as one partition.
    g = _graph(XnnpackBackend.preprocess(ep, []).processed_bytes)
    assert g.version == 2
    assert [(s.name, s.max) for s in g.symbols] == [(name.encode(), 48)]
    by_kind = {}
    for v in g.values:
        by_kind.setdefault(v.kind, []).append((list(v.dims), None if v.dimSymbols is None else list(v.dimSymbols)))
    assert by_kind[xfb.ValueKind.INPUT] == [([1, 48, 8], [0, 1, 0])]
    # The weights are exact; the output x is a copy of the input, with the input's symbol.
    assert all(syms is None for _, syms in by_kind[xfb.ValueKind.CONSTANT])
    assert sorted(by_kind[xfb.ValueKind.OUTPUT]) == [([1, 48, 4], [0, 1, 0]), ([1, 48, 8], [0, 1, 0])]
    assert ([1, 48, 1], [0, 1, 0]) in by_kind[xfb.ValueKind.INTERMEDIATE]
    ops = [n.op for n in g.nodes]
    for kind in (xfb.OpKind.FULLY_CONNECTED, xfb.OpKind.SIGMOID, xfb.OpKind.NEGATE, xfb.OpKind.SOFTMAX):
        assert kind in ops


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
