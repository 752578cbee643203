"""The fully connected weight format rows (exir/fc_formats.py) agree with xnnpack_graph.fbs's
QuantScheme enum, and a delegated linear's constant carries its row's ScalarType, QuantScheme,
group size and key suffixes."""

import os
import subprocess
import sys

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.exir import LoraDataPolicy, to_edge
from edgeshare.exir.fc_formats import FC_FORMATS, format_for_option
from edgeshare.exir.lower import LoweredBackendModule
from edgeshare.exir.tensor_layout import scalar_type_of
from torch import nn


def _quant_schemes():
    return {name: value for name, value in vars(xfb.QuantScheme).items() if not name.startswith("_")}


def test_every_quant_scheme_of_the_graph_schema_has_one_quantized_row_and_none_the_others():
    schemes = _quant_schemes()
    quantized = [f.quant_scheme for f in FC_FORMATS if f.quantized]
    assert sorted(quantized) == sorted(n for n in schemes if n != "NONE")
    assert all(f.quant_scheme == "NONE" for f in FC_FORMATS if not f.quantized)


def test_the_python_rows_and_the_cpp_rows_are_one_table():
    # backends/xnnpack/runtime/fc_format.cc's rows, as its fc_formats binary prints them: name,
    # weight ScalarType, QuantScheme, scales ScalarType (-1: none), grouped scales, bits per stored value.
    listed = subprocess.run([os.environ["XNNPACK_FC_FORMATS"]], check=True, capture_output=True, text=True).stdout
    cpp = [line.split() for line in listed.splitlines()]
    python = [
        [
            row.scheme,
            str(row.scalar_type),
            str(_quant_schemes()[row.quant_scheme]),
            str(-1 if row.scales_dtype is None else scalar_type_of(row.scales_dtype)),
            str(int(row.grouped)),
            str(row.value_bits),
        ]
        for row in FC_FORMATS
    ]
    assert cpp == python


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
        ({"quantize": "int4", "group_size": 64}, {"up": "int4", "down": "int8-row"}),
        ({"quantize": "int8-row"}, {"up": "int8-row", "down": "int8-row"}),
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
