"""The fully connected weight format rows: enumerable, one per scheme, and what the exporter reads."""

import dataclasses
import os
import sys

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import fc_formats
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir.fc_formats import (
    F16W,
    F32,
    FC_FORMATS,
    FC_MIXES,
    INT4K,
    INT5K,
    QB5W,
    QB8W,
    QC4W,
    QC8W,
    UnknownFormatError,
    adapter_formats,
    fc_format,
    format_for_option,
    foundation_format,
    mix_for_option,
)
from edgeshare.exir.lora import export_lora
from edgeshare.exir.quantize import quantize_qc8w
from edgeshare.models import demo_lora


def test_rows_are_one_per_scheme_with_distinct_ids_options_and_suffixes():
    assert [f.scheme for f in FC_FORMATS] == ["f32", "f16w", "qc8w", "qb8w", "qc4w", "qb5w"]
    for field in ("scheme", "option", "key_suffix"):
        values = [getattr(f, field) for f in FC_FORMATS]
        assert len(set(values)) == len(values), field
    # Two int8 rows: the graph tells them apart by QuantScheme.
    kinds = [(f.scalar_type, f.quant_scheme) for f in FC_FORMATS]
    assert len(set(kinds)) == len(kinds)
    for f in FC_FORMATS:
        assert fc_format(f.scheme) is f and format_for_option(f.option) is f
        assert (f.scales_suffix is None) == (not f.quantized) == (f.quant_scheme == "NONE")
        assert f.fallback is None or fc_format(f.fallback).quantized
    with pytest.raises(UnknownFormatError, match="got 'q2'"):
        fc_format("q2")


def test_qc4w_and_qb8w_fall_back_to_qc8w_for_a_layer_they_cannot_group():
    assert QC4W.holding(64, 32) is QC4W
    assert QC4W.holding(96, 64) is QC8W and QB8W.holding(96, 64) is QB8W
    assert QC4W.holding(48, 32) is QC8W and QB8W.holding(48, 32) is QC8W
    assert QC4W.why_not(48, 32) == "input size 48 is not a multiple of the group size 32"
    # qb8w has one block size whatever the export's group.
    assert QB8W.why_not(96, 64) is None and QB8W.why_not(48, 128) is not None
    assert QC8W.holding(48, 32) is QC8W and F16W.holding(3, 32) is F16W
    assert QC8W.group(32) == 0 and QC4W.group(64) == 64 and QB8W.group(128) == 32
    with pytest.raises(ValueError, match="no quantizer"):
        F32.quantize(torch.zeros(2, 2), 32)


@pytest.mark.parametrize(
    "key, in_size, gathered, other, want",
    [
        ("layers.0.w.weight", 64, False, True, ("qc4w", "")),
        ("layers.0.w.weight", 48, False, True, ("qc8w", "input size 48 is not a multiple of the group size 32")),
        ("lm_head.weight", 64, False, True, ("qc8w", "output layer")),
        ("embed.weight", 64, True, True, ("qc8w", "tied to the token embedding")),
        ("embed.weight", 48, True, False, ("qc8w", "embedding width 48 is not a multiple of the group size 32")),
        ("embed.weight", 64, True, False, ("qc4w", "")),
    ],
)
def test_foundation_format_decides_each_weight_once(key, in_size, gathered, other, want):
    fmt, why = foundation_format(QC4W, key, in_size, 32, QC8W, gathered, other)
    assert (fmt.scheme, why) == want
    assert foundation_format(QC4W, "lm_head.weight", 64, 32, QC4W, False, True) == (QC4W, "")
    assert foundation_format(QC8W, key, in_size, 32, QC8W, gathered, other) == (QC8W, "")
    # int8: every weight it can hold in blocks is qb8w, the output layer and a tied table too.
    held = in_size % 32 == 0
    assert foundation_format(QB8W, key, in_size, 32, QB8W, gathered, other)[0] is (QB8W if held else QC8W)


_NOT_48 = "input size 48 is not a multiple of the group size 32"
_TABLE_48 = "embedding width 48 is not a multiple of the group size 32"


@pytest.mark.parametrize(
    "key, in_size, gathered, other, want",
    [
        ("model.layers.0.self_attn.v_proj.weight", 64, False, True, ("qb8w", "")),
        ("model.layers.7.mlp.down_proj.weight", 96, False, True, ("qb8w", "")),
        ("model.layers.0.mlp.down_proj.weight", 48, False, True, ("qc8w", _NOT_48)),
        ("model.layers.0.self_attn.v_proj.base_layer.weight", 64, False, True, ("qb8w", "")),
        ("down_proj.base.weight", 64, False, True, ("qb8w", "")),
        ("model.layers.0.self_attn.q_proj.weight", 64, False, True, ("qc4w", "")),
        ("model.layers.0.self_attn.q_proj.base_layer.weight", 64, False, True, ("qc4w", "")),
        ("model.layers.0.mlp.gate_proj.weight", 48, False, True, ("qc8w", _NOT_48)),
        ("lm_head.weight", 64, False, True, ("qc8w", "output layer")),
        ("model.embed_tokens.weight", 64, True, False, ("qc4w", "")),
        # A table gathered under a projection's name is still a table: the mix names linears.
        ("v_proj.weight", 64, True, False, ("qc4w", "")),
    ],
)  # fmt: skip
def test_int4k_stores_its_projections_in_qb8w_and_everything_else_as_int4(key, in_size, gathered, other, want):
    fmt, why = foundation_format(QC4W, key, in_size, 32, QC8W, gathered, other, INT4K)
    assert (fmt.scheme, why) == want
    assert [m.option for m in FC_MIXES] == ["int4k", "int5k"] and mix_for_option("int4k") is INT4K
    assert mix_for_option("int4") is None and mix_for_option("none") is None
    # Every mix's option is free among the rows' and names rows that exist.
    for mix in FC_MIXES:
        assert mix.option not in {f.option for f in FC_FORMATS}
        assert mix.base_format.quantized and mix.sensitive_format.quantized


@pytest.mark.parametrize(
    "key, in_size, gathered, other, want",
    [
        ("model.layers.0.self_attn.v_proj.weight", 64, False, True, ("qb8w", "")),
        ("model.layers.0.mlp.down_proj.base_layer.weight", 96, False, True, ("qb8w", "")),
        ("model.layers.0.self_attn.q_proj.weight", 64, False, True, ("qb5w", "")),
        ("model.layers.0.mlp.gate_proj.weight", 48, False, True, ("qc8w", _NOT_48)),
        ("lm_head.weight", 64, False, True, ("qc8w", "output layer")),
        # An untied table is 5-bit (gathered by embedding_qb5w); a tied one serves the output layer.
        ("model.embed_tokens.weight", 64, True, False, ("qb5w", "")),
        ("model.embed_tokens.weight", 48, True, False, ("qc8w", _TABLE_48)),
        ("model.embed_tokens.weight", 64, True, True, ("qc8w", "tied to the token embedding")),
    ],
)  # fmt: skip
def test_int5k_stores_its_projections_in_qb8w_and_everything_else_as_int5(
    key, in_size, gathered, other, want
):
    fmt, why = foundation_format(QB5W, key, in_size, 32, QC8W, gathered, other, INT5K)
    assert (fmt.scheme, why) == want
    assert mix_for_option("int5k") is INT5K and INT5K.base_format is QB5W and INT5K.sensitive_format is QB8W
    # Without the mix the projections are 5-bit too; an output layer asked for int5 is, with its table.
    if "proj" in key and in_size % 32 == 0:
        assert foundation_format(QB5W, key, in_size, 32, QC8W, gathered, other) == (QB5W, "")
    assert foundation_format(QB5W, "lm_head.weight", 64, 32, QB5W, False, True) == (QB5W, "")
    assert foundation_format(QB5W, "embed.weight", 64, 32, QB5W, True, True) == (QB5W, "")


def test_the_stored_bits_of_a_value_are_the_cpp_rows():
    assert [f.value_bits for f in FC_FORMATS] == [32, 16, 8, 8, 4, 5]
    assert QB5W.holding(96, 32) is QB5W and QB5W.holding(48, 32) is QC8W and QB5W.group(64) == 32
    assert QB5W.weighs_importance and QB5W.output_layer_fallback


def test_the_partitioner_and_preprocess_store_what_the_row_says(tmp_path, monkeypatch):
    # A row with another key suffix and a quantizer that counts its calls, in place of qc8w's:
    # the exported file follows it, so nothing else decides the int8 entries.
    calls = []

    def quantizer(weight, group_size, importance):
        assert importance is None  # int8 weighs none
        calls.append(tuple(weight.shape))
        return quantize_qc8w(weight)

    row = dataclasses.replace(QC8W, key_suffix=".q8row", scales_suffix=".q8row.scales", quantizer=quantizer)
    monkeypatch.setitem(fc_formats._BY_OPTION, QC8W.option, row)
    foundation, adapters, inputs = demo_lora()
    export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner(quantize=QC8W.option))
    path = os.path.join(tmp_path, "foundation.ptd")
    with open(path, "rb") as f:
        keys = set(deserialize_ptd(f.read(), path).named_data)
    rowed = sorted(k for k in keys if k.endswith(".q8row"))
    assert rowed and all(k[: -len(".q8row")] + ".q8row.scales" in keys for k in rowed)
    assert not [k for k in keys if ".qc8w" in k]
    assert len(calls) == len(rowed)  # once per foundation weight, however many programs read it


def test_the_ungrouped_rows_store_adapters_and_round_as_they_store():
    assert [f.scheme for f in adapter_formats()] == ["f32", "f16w", "qc8w"]
    w = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(F32.rounded(w), w)
    assert torch.equal(F16W.rounded(w), w.half().float())
    q, scales = QC8W.quantize(w, 0)
    assert torch.equal(QC8W.rounded(w), q.float() * scales[:, None])
    assert float((QC8W.rounded(w) - w).abs().max()) <= float(scales.max()) / 2 + 1e-7
    with pytest.raises(ValueError, match="grouped"):
        QC4W.rounded(w.repeat(1, 2))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
