"""The int4 foundation exporter (quantize="int4"): its weights, scales and untied token embedding
are the scales llama.cpp's make_qx_quants would search (no worse than Q4_0's rule, exact on a
4-bit grid, each value at its nearest level), the output layer,
a tied embedding and a layer or table whose width is not a multiple of the group stay int8 (and say
so), foundation.ptd is byte-identical across exports, and the eager reference runs exact integer
sums per group and gathers the int4 table's rows."""

import copy
import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.lora import export_lora
from edgeshare.exir.quantize import (
    dequantize_qc4w,
    int4_reference,
    pack_int4,
    qc4w_linear,
    quantize_activation_blocks,
    quantize_qc4w,
    quantize_qc8w,
    unpack_int4,
)
from edgeshare.models import demo_lora
from edgeshare.models.lora import LoRALinear, shared_copy
from torch import nn

BYTE, INT8, HALF = 0, 1, 5


def _want(w: torch.Tensor, group: int):
    """What an export must store for w: the quantizer's levels and scales."""
    packed, scales = quantize_qc4w(w, group)
    return unpack_int4(packed), scales


def _weighted_errors(w: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """Each group's error under the quantizer's own weighting, sqrt(mean(row^2) + w^2)."""
    groups = w.to(torch.float64).reshape(w.shape[0], -1, group)
    weight = torch.sqrt((groups * groups).mean(dim=(1, 2), keepdim=True) + groups * groups)
    values = q.to(torch.float64).reshape(groups.shape) * scales.to(torch.float64)[..., None]
    return (weight * (groups - values) ** 2).sum(dim=-1)


def _q4_0(w: torch.Tensor, group: int):
    # ggml's quantize_row_q4_0_ref: the largest-magnitude value (with its sign) is level -8.
    groups = w.reshape(w.shape[0], -1, group)
    extreme = torch.gather(groups, -1, groups.abs().argmax(dim=-1, keepdim=True))
    scales = (extreme / -8.0).to(torch.float16).squeeze(-1)
    s = scales.to(torch.float32)[..., None]
    q = torch.clamp(torch.round(groups / torch.where(s == 0, torch.ones_like(s), s)), -8, 7)
    return q.reshape(w.shape).to(torch.int8), scales


def _ptd(path: str):
    with open(path, "rb") as f:
        return deserialize_ptd(f.read(), path)


@pytest.mark.parametrize("group", [32, 64, 128])
def test_quantize_qc4w_searches_scales_no_worse_than_q4_0(group):
    g = torch.Generator().manual_seed(group)
    # Rows of very different magnitudes, one value alone at a group's max.
    w = torch.randn(67, 384, generator=g) * torch.rand(67, 1, generator=g) * 4
    w[9, 5] = 3.0 * w[9].abs().max()
    packed, scales = quantize_qc4w(w, group)
    q = unpack_int4(packed)
    assert packed.dtype == torch.uint8 and list(packed.shape) == [67, 192]
    assert scales.dtype == torch.float16 and list(scales.shape) == [67, 384 // group]
    # Each value is at its nearest level of the stored scale.
    s = scales.to(torch.float32).repeat_interleave(group, dim=1)
    assert torch.equal(q.to(torch.float32), torch.clamp(torch.round(w / s), -8, 7))
    # The search's measure: better than Q4_0's rule over the whole matrix, and no group measurably
    # worse (float16's rounding of either scale is all that could make one so).
    ours = _weighted_errors(w, q, scales, group)
    theirs = _weighted_errors(w, *_q4_0(w, group), group)
    assert float(ours.sum()) < 0.95 * float(theirs.sum())
    assert bool((ours <= theirs * 1.01 + 1e-9).all())


def test_quantize_qc4w_is_exact_on_a_4_bit_grid():
    g = torch.Generator().manual_seed(7)
    levels = torch.randint(-8, 8, (16, 128), generator=g, dtype=torch.int8)
    levels[:, ::32] = -8  # every group uses its lowest level
    steps = torch.rand(16, 4, generator=g).add_(0.5).to(torch.float16)
    w = levels.to(torch.float32) * steps.to(torch.float32).repeat_interleave(32, dim=1)
    packed, scales = quantize_qc4w(w, 32)
    assert torch.equal(scales, steps)
    assert torch.equal(unpack_int4(packed), levels)


def test_packing_puts_even_elements_in_low_nibbles():
    q = torch.tensor([[-8, 7, 1, -1]], dtype=torch.int8)
    assert pack_int4(q).tolist() == [[0x78, 0xF1]]
    assert torch.equal(unpack_int4(pack_int4(q)), q)


def test_zero_and_tiny_groups_quantize_to_finite_values():
    w = torch.randn(2, 64)
    w[0, :32] = 0.0  # scale 0: zeros
    w[1, 32:] = torch.linspace(-5e-5, 5e-5, 32)  # a scale whose float16 reciprocal overflows
    packed, scales = quantize_qc4w(w, 32)
    q = unpack_int4(packed)
    assert float(scales[0, 0]) == 0.0 and not bool(q[0, :32].any())
    assert 0 < float(scales[1, 1]) and int(q[1, 32:].abs().max()) >= 7
    assert float((dequantize_qc4w(packed, scales)[1, 32:] - w[1, 32:]).abs().max()) <= float(scales[1, 1])


def test_quantize_qc4w_refuses_bad_weights():
    with pytest.raises(ValueError, match="not a multiple of the group size 32"):
        quantize_qc4w(torch.randn(4, 40), 32)
    with pytest.raises(ValueError, match="NaN or an infinity"):
        quantize_qc4w(torch.tensor([[float("inf")] * 32]), 32)
    with pytest.raises(ValueError, match="beyond float16's range"):
        quantize_qc4w(torch.full((1, 32), 1e6), 32)
    with pytest.raises(ValueError, match="group size must be one of"):
        quantize_qc4w(torch.randn(4, 48), 48)


def test_qc4w_linear_sums_each_block_exactly_then_fuses_each_multiply_add():
    x = torch.randn(3, 128)
    x[1, 70] = 40.0  # An outlier: it sets its own block's scale only.
    w = torch.randn(9, 128)
    bias = torch.randn(9)
    packed, scales = quantize_qc4w(w, 64)
    y = qc4w_linear(x, packed, scales, bias)
    qx, xs = quantize_activation_blocks(x)
    q = unpack_int4(packed).to(torch.int64)
    # The kernels' arithmetic in Python floats (float64), rounded to float32 after each fused step.
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    for r in range(3):
        for o in range(9):
            acc = 0.0
            for b in range(4):
                part = int((qx[r, b * 32 : (b + 1) * 32].to(torch.int64) * q[o, b * 32 : (b + 1) * 32]).sum())
                acc = f32(part * f32(float(xs[r, b]) * float(scales[o, b // 2])) + acc)
            assert float(y[r, o]) == f32(acc + float(bias[o]))
    # A row's result does not depend on its batch mates.
    assert torch.equal(qc4w_linear(x[1:2], packed, scales, bias), y[1:2])


def test_export_writes_the_quantizers_int4_foundation_weights(tmp_path):
    foundation, adapters, inputs = demo_lora()
    export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner(quantize="int4", group_size=64))
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    layers = ("fc1", "fc2", "fc3")
    assert sorted(ptd.named_data) == sorted(
        f"{f}.{name}" for f in layers for name in ("bias", "weight.qc4w", "weight.qc4w.scales")
    )
    for f in layers:
        w = getattr(foundation, f).weight.detach()
        want_q, want_scales = _want(w, 64)
        blob = ptd.named_data[f"{f}.weight.qc4w"]
        assert blob.tensor_layout.scalar_type == BYTE
        assert list(blob.tensor_layout.sizes) == [w.shape[0], w.shape[1] // 2]
        assert blob.data == pack_int4(want_q).numpy().tobytes()
        scales = ptd.named_data[f"{f}.weight.qc4w.scales"]
        assert scales.tensor_layout.scalar_type == HALF and scales.data == want_scales.numpy().tobytes()


def test_bare_and_adapter_exports_write_byte_identical_int4_foundation_ptd(tmp_path):
    foundation, adapters, inputs = demo_lora()
    int4 = XnnpackPartitioner(quantize="int4")
    export_lora(
        foundation, {"lora_a": adapters["lora_a"]}, inputs, str(tmp_path / "bare"), int4,
        foundation_program="foundation",
    )  # fmt: skip
    export_lora(foundation, {"lora_b": adapters["lora_b"]}, inputs, str(tmp_path / "own"), XnnpackPartitioner(quantize="int4"))
    with open(tmp_path / "bare" / "foundation.ptd", "rb") as a, open(tmp_path / "own" / "foundation.ptd", "rb") as b:
        assert a.read() == b.read()
    # Another group size is another file.
    export_lora(foundation, adapters, inputs, str(tmp_path / "g128"), XnnpackPartitioner(quantize="int4", group_size=128))
    with open(tmp_path / "own" / "foundation.ptd", "rb") as a, open(tmp_path / "g128" / "foundation.ptd", "rb") as b:
        assert a.read() != b.read()


class _TinyLM(nn.Module):
    """Token embedding, a Linear of input 32, one of input 64, and an lm_head."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.embed = nn.Embedding(64, 32)
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)
        self.lm_head = nn.Linear(32, 64, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.lm_head(self.down(torch.relu(self.up(self.embed(ids)))))


def _adapted(foundation: nn.Module) -> nn.Module:
    adapted = shared_copy(foundation)
    adapted.down = LoRALinear(adapted.down, rank=4, alpha=8.0)
    torch.nn.init.normal_(adapted.down.lora_b.weight, std=0.05)
    return adapted.eval()


@pytest.mark.parametrize("tied", [False, True])
def test_output_layer_tied_table_and_short_inputs_stay_int8_and_say_why(tmp_path, tied):
    foundation = _TinyLM(tied).eval()
    inputs = (torch.tensor([[3, 60, 0, 17, 3]]),)
    partitioner = XnnpackPartitioner(quantize="int4", group_size=64)
    result = export_lora(foundation, {"lora_a": _adapted(foundation)}, inputs, str(tmp_path), partitioner)
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    assert [k for k in ptd.named_data if k.endswith(".qc4w")] == ["down.weight.qc4w"]
    assert "up.weight.qc8w" in ptd.named_data and "embed.weight.qc8w" in ptd.named_data
    assert ("lm_head.weight.qc8w" in ptd.named_data) == (not tied)
    want = {"up.weight": "input size 32 is not a multiple of the group size 64"}
    if tied:
        want["embed.weight"] = "tied to the token embedding"
    else:
        want["lm_head.weight"] = "output layer"
        want["embed.weight"] = "embedding width 32 is not a multiple of the group size 64"
    assert result.fallbacks == want
    assert result.gathered_formats == {"embed.weight": "int8-row"}
    # The int8 entries are the int8 scheme's bytes; the eager reference makes the same choices.
    q, _ = quantize_qc8w(foundation.up.weight.detach())
    assert ptd.named_data["up.weight.qc8w"].data == q.numpy().tobytes()
    model = int4_reference(copy.deepcopy(foundation), group_size=64)
    kinds = {n: type(m).__name__ for n, m in model.named_children()}
    assert kinds == {"embed": "_Int8Embedding", "up": "_Int8Linear", "down": "_Int4Linear", "lm_head": "_Int8Linear"}
    with torch.no_grad():
        cosine = float(nn.functional.cosine_similarity(model(*inputs).flatten(), foundation(*inputs).flatten(), dim=0))
    assert cosine > 0.98


def test_lm_head_int4_on_request(tmp_path):
    foundation = _TinyLM(tied=False).eval()
    partitioner = XnnpackPartitioner(quantize="int4", group_size=32, lm_head="int4")
    inputs = (torch.tensor([[1, 2, 3]]),)
    result = export_lora(foundation, {"lora_a": _adapted(foundation)}, inputs, str(tmp_path), partitioner)
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    assert sorted(k for k in ptd.named_data if k.endswith(".qc4w")) == [
        "down.weight.qc4w", "embed.weight.qc4w", "lm_head.weight.qc4w", "up.weight.qc4w",
    ]  # fmt: skip
    assert result.fallbacks == {}
    model = int4_reference(copy.deepcopy(foundation), group_size=32, lm_head="int4")
    assert type(model.lm_head).__name__ == "_Int4Linear"


def _operators(path: str):
    with open(path, "rb") as f:
        (plan,) = deserialize_pte(f.read(), path).program.executionPlans
    return {o.name.decode() for o in plan.operators}


def test_untied_embedding_is_int4_and_its_gather_reads_only_those_entries(tmp_path):
    foundation = _TinyLM(tied=False).eval()
    inputs = (torch.tensor([[3, 60, 0, 17, 3]]),)
    partitioner = XnnpackPartitioner(quantize="int4", group_size=32)
    result = export_lora(foundation, {"lora_a": _adapted(foundation)}, inputs, str(tmp_path / "own"), partitioner)
    ptd = _ptd(os.path.join(tmp_path, "own", "foundation.ptd"))
    table = foundation.embed.weight.detach()
    want_q, want_scales = _want(table, 32)
    q, scales = ptd.named_data["embed.weight.qc4w"], ptd.named_data["embed.weight.qc4w.scales"]
    assert q.tensor_layout.scalar_type == BYTE and list(q.tensor_layout.sizes) == [64, 16]
    assert q.data == pack_int4(want_q).numpy().tobytes()
    assert scales.tensor_layout.scalar_type == HALF and list(scales.tensor_layout.sizes) == [64, 1]
    assert scales.data == want_scales.numpy().tobytes()
    # No other copy of the table: neither float32 nor int8.
    assert not [k for k in ptd.named_data if k.startswith("embed.") and not k.startswith("embed.weight.qc4w")]
    assert result.gathered_formats == {"embed.weight": "int4"}
    assert result.fallbacks == {"lm_head.weight": "output layer"}
    ops = _operators(os.path.join(tmp_path, "own", "lora_a.pte"))
    assert "edgeshare::embedding_qc4w" in ops and "edgeshare::embedding_qc8w" not in ops
    # The eager reference gathers the same dequantized rows.
    model = int4_reference(copy.deepcopy(foundation), group_size=32)
    assert type(model.embed).__name__ == "_Int4Embedding"
    dequantized = want_q.to(torch.float32) * want_scales.to(torch.float32).repeat_interleave(32, dim=1)
    assert torch.equal(model.embed(inputs[0]), dequantized[inputs[0]])
    # A bare export writes the same foundation file.
    bare = XnnpackPartitioner(quantize="int4", group_size=32)
    adapters = {"lora_a": _adapted(foundation)}
    export_lora(foundation, adapters, inputs, str(tmp_path / "bare"), bare, foundation_program="foundation")
    assert "edgeshare::embedding_qc4w" in _operators(os.path.join(tmp_path, "bare", "foundation.pte"))
    with open(tmp_path / "own" / "foundation.ptd", "rb") as a, open(tmp_path / "bare" / "foundation.ptd", "rb") as b:
        assert a.read() == b.read()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
