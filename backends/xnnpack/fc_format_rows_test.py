"""The fully connected weight format rows (exir/fc_formats.py) agree with xnnpack_graph.fbs's
QuantScheme enum, and a delegated linear's constant carries its row's ScalarType, QuantScheme,
group size and key suffixes."""

import sys

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.exir import LoraDataPolicy, to_edge
from edgeshare.exir.fc_formats import FC_FORMATS, format_for_option
from edgeshare.exir.lower import LoweredBackendModule
from torch import nn


def _quant_schemes():
    return {name: value for name, value in vars(xfb.QuantScheme).items() if not name.startswith("_")}


def test_every_quant_scheme_of_the_graph_schema_has_one_quantized_row_and_none_the_others():
    schemes = _quant_schemes()
    quantized = [f.quant_scheme for f in FC_FORMATS if f.quantized]
    assert sorted(quantized) == sorted(n for n in schemes if n != "NONE")
    assert all(f.quant_scheme == "NONE" for f in FC_FORMATS if not f.quantized)


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 32)
        self.down = nn.Linear(32, 48)  # 32 inputs: not a multiple of a 64 group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _weights(partitioner: XnnpackPartitioner):
    ep = torch.export.export(_Mlp().eval(), (torch.randn(1, 64),))
    lowered = to_edge(ep, data_policy=LoraDataPolicy()).to_backend(partitioner).exported_program()
    (module,) = [m for m in lowered.graph_module.children() if isinstance(m, LoweredBackendModule)]
    graph = xfb.GraphT.InitFromObj(xfb.Graph.GetRootAs(module.processed_bytes, 0))
    return {v.key.decode(): v for v in graph.values if v.key and b"weight" in v.key}


@pytest.mark.parametrize(
    "kwargs, want",
    [
        ({}, {"up": "fp32", "down": "fp32"}),
        ({"fc_weight_dtype": "fp16"}, {"up": "fp16", "down": "fp16"}),
        ({"quantize": "int8"}, {"up": "int8", "down": "int8"}),
        ({"quantize": "int4", "group_size": 64}, {"up": "int4", "down": "int8"}),
    ],
)
def test_a_delegated_linear_weight_is_stored_as_its_row_says(kwargs, want):
    weights = _weights(XnnpackPartitioner(**kwargs))
    assert len(weights) == len(want)
    group = kwargs.get("group_size", 0)
    for layer, option in want.items():
        row = format_for_option(option)
        key = f"{layer}.weight{row.key_suffix}"
        value = weights[key]
        assert value.dtype == row.scalar_type
        assert value.quantScheme == _quant_schemes()[row.quant_scheme]
        assert value.groupSize == row.group(group)
        scales = None if value.scalesKey is None else value.scalesKey.decode()
        assert scales == (None if row.scales_suffix is None else f"{layer}.weight{row.scales_suffix}")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
