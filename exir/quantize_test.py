"""The int8-per-row foundation exporter (quantize="int8-row"; int8 in blocks: quantize_qb8w_test.py):
its weights equal a few-line torch reference bit
for bit, adapters stay float32, foundation.ptd is byte-identical across a bare-foundation export and
an adapter export, and the eager reference runs the same per-row activation quantization."""

import copy
import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.lora import export_lora
from edgeshare.exir.quantize import (
    dequantize_qc8w,
    int8_reference,
    qc8w_linear,
    quantize_activation_blocks,
    quantize_qb8w,
    quantize_qc4w,
    quantize_qc8w,
    quantized,
)
from edgeshare.exir.swappable import export_swappable
from edgeshare.exir.tensor_layout import digest_cache
from edgeshare.models import demo_lora
from edgeshare.models.lora import LoRALinear, shared_copy
from torch import nn

INT8, FLOAT = 1, 6


def _reference(w: torch.Tensor):
    # The scheme in a few lines: per output row, symmetric, round half to even, scale max|w| / 127.
    scale = w.abs().amax(dim=1) / 127
    q = torch.round(w / torch.where(scale == 0, torch.ones_like(scale), scale)[:, None]).to(torch.int8)
    return q, scale


def _ptd(path: str):
    with open(path, "rb") as f:
        return deserialize_ptd(f.read(), path)


def test_quantize_qc8w_equals_a_few_line_reference_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(37, 70, generator=g)
    w[5] = 0.0  # a zero row: scale 0, zero bytes
    w[7, 3] = 2.5 * w[7].abs().max()  # one large value: it alone reaches 127
    q, scale = quantize_qc8w(w)
    want_q, want_scale = _reference(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32
    assert torch.equal(q, want_q) and torch.equal(scale, want_scale)
    assert int(q.abs().max()) == 127 and not bool(q[5].any())
    assert float((dequantize_qc8w(q, scale) - w).abs().max()) <= float(scale.max()) / 2 * 1.0001


def test_quantize_qc8w_refuses_non_finite_weights():
    with pytest.raises(ValueError, match="NaN or an infinity"):
        quantize_qc8w(torch.tensor([[1.0, float("nan")]]))


def test_activations_are_quantized_per_block_of_32_each_row_on_its_own():
    x = torch.randn(3, 40)
    x[0, 5] = 50.0  # An outlier: it sets its own block's scale only.
    q, s = quantize_activation_blocks(x)
    assert q.shape == (3, 40) and s.shape == (3, 2)
    q2, s2 = quantize_activation_blocks(x[1:2])
    assert torch.equal(q[1:2], q2) and torch.equal(s[1:2], s2)
    assert torch.equal(s[:, 0], x[:, :32].abs().amax(dim=1) / 127)
    assert torch.equal(s[:, 1], x[:, 32:].abs().amax(dim=1) / 127)
    assert int(q[0, 32:].abs().max()) == 127
    w = torch.randn(9, 40)
    qw, sw = quantize_qc8w(w)
    y = qc8w_linear(x, qw, sw, None)
    # The exact integer dot of each block, fused into the accumulator block by block, then the
    # weight scale.
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    for r in range(3):
        for o in range(9):
            acc = 0.0
            for b in range(2):
                dot = int((q[r, b * 32 : (b + 1) * 32].to(torch.int64) * qw[o, b * 32 : (b + 1) * 32]).sum())
                acc = f32(dot * float(s[r, b]) + acc)
            assert float(y[r, o]) == f32(acc * float(sw[o]))


def test_export_writes_int8_foundation_weights_and_float_adapters(tmp_path):
    foundation, adapters, inputs = demo_lora()
    result = export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner(quantize="int8-row"))
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    keys = sorted(ptd.named_data)
    layers = ("fc1", "fc2", "fc3")
    assert keys == sorted(
        [f"{f}.{name}" for f in layers for name in ("bias", "weight.qc8w", "weight.qc8w.scales")]
    )
    for f in layers:
        w = getattr(foundation, f).weight.detach()
        want_q, want_scale = _reference(w)
        blob = ptd.named_data[f"{f}.weight.qc8w"]
        assert blob.tensor_layout.scalar_type == INT8 and list(blob.tensor_layout.sizes) == list(w.shape)
        assert blob.data == want_q.numpy().tobytes()
        scales = ptd.named_data[f"{f}.weight.qc8w.scales"]
        assert scales.tensor_layout.scalar_type == FLOAT and scales.data == want_scale.numpy().tobytes()
    # The adapters' own weights stay float32 in their programs.
    with open(result.program_paths["lora_a"], "rb") as fh:
        pte = deserialize_pte(fh.read())
    own = [k for k in result.adapter_keys["lora_a"]]
    assert own and all("lora" in k for k in own)
    assert pte is not None


def test_bare_and_adapter_exports_write_byte_identical_foundation_ptd(tmp_path):
    foundation, adapters, inputs = demo_lora()
    bare, with_adapters = tmp_path / "bare", tmp_path / "adapters"
    # The bare foundation's program decides foundation.ptd's entries in the first export.
    export_lora(
        foundation,
        {"lora_a": adapters["lora_a"]},
        inputs,
        str(bare),
        XnnpackPartitioner(quantize="int8-row"),
        foundation_program="foundation",
    )
    int8 = XnnpackPartitioner(quantize="int8-row")
    export_lora(foundation, {"lora_b": adapters["lora_b"]}, inputs, str(with_adapters), int8)
    with open(bare / "foundation.ptd", "rb") as a, open(with_adapters / "foundation.ptd", "rb") as b:
        assert a.read() == b.read()


def test_swappable_export_writes_the_same_int8_foundation_and_float_adapter_files(tmp_path):
    foundation, adapters, inputs = demo_lora()
    int8 = XnnpackPartitioner(quantize="int8-row")
    result = export_swappable(foundation, adapters, inputs, str(tmp_path / "swap"), int8)
    export_lora(foundation, adapters, inputs, str(tmp_path / "own"), int8)
    with open(result.foundation_path, "rb") as a, open(tmp_path / "own" / "foundation.ptd", "rb") as b:
        assert a.read() == b.read()
    for path in result.adapter_files.values():
        ptd = _ptd(path)
        assert ptd.named_data and all(b.tensor_layout.scalar_type == FLOAT for b in ptd.named_data.values())


def test_int8_reference_swaps_only_foundation_linears():
    _, adapters, inputs = demo_lora()
    with torch.no_grad():
        want = adapters["lora_a"](*inputs)
        model = int8_reference(copy.deepcopy(adapters["lora_a"]), blocks=False)
        got = model(*inputs)
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert names and all("lora" in n for n in names)
    cosine = float(torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0))
    print(f"int8 reference vs fp32, demo LoRA MLP: cosine {cosine:.6f}")
    assert 0.999 <= cosine < 1.0


class _TinyLM(nn.Module):
    """Token embedding, one hidden Linear, and an lm_head tied to the embedding or not."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.embed = nn.Embedding(64, 32)
        self.fc = nn.Linear(32, 32)
        self.head = nn.Linear(32, 64, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(torch.relu(self.fc(self.embed(ids))))


def _tiny_lm(tied: bool):
    foundation = _TinyLM(tied).eval()
    adapted = shared_copy(foundation)
    adapted.fc = LoRALinear(adapted.fc, rank=4, alpha=8.0)
    torch.nn.init.normal_(adapted.fc.lora_b.weight, std=0.05)
    return foundation, {"lora_a": adapted.eval()}, (torch.tensor([[3, 60, 0, 17, 3]]),)


@pytest.mark.parametrize("tied", [False, True])
def test_token_embedding_is_one_int8_entry_gathered_as_the_reference(tmp_path, tied):
    foundation, adapters, inputs = _tiny_lm(tied)
    export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner(quantize="int8-row"))
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    want_q, want_scale = _reference(foundation.embed.weight.detach())
    tables = [k for k, b in ptd.named_data.items() if list(b.tensor_layout.sizes) == [64, 32]]
    # No float copy of the table: untied, the embedding and the lm_head are an int8 entry each;
    # tied, one int8 entry serves the gather and the matmul.
    assert len(tables) == (1 if tied else 2), tables
    assert all(k.endswith(".qc8w") and ptd.named_data[k].tensor_layout.scalar_type == INT8 for k in tables)
    embed = [k for k in tables if ptd.named_data[k].data == want_q.numpy().tobytes()]
    assert len(embed) == 1
    assert ptd.named_data[embed[0] + ".scales"].data == want_scale.numpy().tobytes()
    # The eager reference gathers the same int8 rows, written as q * scale.
    model = int8_reference(copy.deepcopy(foundation), blocks=False)
    with torch.no_grad():
        rows = model.embed(inputs[0])
    assert torch.equal(rows, want_q[inputs[0]].to(torch.float32) * want_scale[inputs[0]][..., None])


def test_bare_and_adapter_exports_of_a_tied_model_write_byte_identical_foundation_ptd(tmp_path):
    foundation, adapters, inputs = _tiny_lm(tied=True)
    int8 = XnnpackPartitioner(quantize="int8-row")
    export_lora(foundation, adapters, inputs, str(tmp_path / "bare"), int8, foundation_program="foundation")
    export_lora(foundation, adapters, inputs, str(tmp_path / "own"), int8)
    with open(tmp_path / "bare" / "foundation.ptd", "rb") as a, open(tmp_path / "own" / "foundation.ptd", "rb") as b:
        assert a.read() == b.read()


def test_quantize_and_fp16_cannot_both_change_the_weights():
    with pytest.raises(ValueError, match="cannot both"):
        XnnpackPartitioner(fc_weight_dtype="fp16", quantize="int8")
    with pytest.raises(ValueError, match="quantize must be one of"):
        XnnpackPartitioner(quantize="int2")
    with pytest.raises(ValueError, match="cannot both"):
        XnnpackPartitioner(fc_weight_dtype="fp16", quantize="int4")
    with pytest.raises(ValueError, match="group_size must be one of"):
        XnnpackPartitioner(quantize="int4", group_size=48)


@pytest.mark.parametrize("scheme", ["int8-row", "int8", "int4"])
def test_a_foundation_weight_is_quantized_once_per_export_in_blocks_with_the_same_result(scheme):
    weight = torch.randn(300, 64, generator=torch.Generator().manual_seed(3)) * 0.1
    quantizers = {"int8-row": quantize_qc8w, "int8": quantize_qb8w, "int4": lambda w: quantize_qc4w(w, 32)}
    whole = quantizers[scheme](weight)
    with digest_cache():
        first = quantized(weight, scheme, 32, block_rows=128)
        assert quantized(weight.clone(), scheme, 32) is first  # equal bytes: the same tensors
        assert quantized(weight, "int4" if scheme != "int4" else "int8", 32) is not first
    for got, want in zip(first, whole):
        assert got.dtype == want.dtype and torch.equal(got, want)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
