"""The int8 block foundation exporter (quantize="int8", scheme qb8w): its weights and float16 scales
equal a few-line torch reference bit for bit, a layer of another input size is int8 per row, a token
embedding (tied or not) is one qb8w entry gathered as the reference gathers it, and the eager
reference runs the delegate's arithmetic."""

import copy
import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir.lora import export_lora
from edgeshare.exir.quantize import (
    dequantize_qb8w,
    int8_reference,
    qb8w_linear,
    quantize_activation_blocks,
    quantize_qb8w,
)
from edgeshare.models import demo_lora
from edgeshare.models.lora import LoRALinear, shared_copy
from torch import nn

INT8, HALF, FLOAT = 1, 5, 6


def _reference(w: torch.Tensor):
    # Q8_0's rule in a few lines: per block of 32, scale = fp16(max|w| / 127), q = round(w / scale).
    blocks = w.reshape(w.shape[0], -1, 32)
    scale = (blocks.abs().amax(dim=2) / 127).half()
    s = scale.float()[..., None]
    q = torch.where(s > 0, torch.round(blocks / torch.where(s > 0, s, torch.ones_like(s))), torch.zeros_like(s))
    return q.clamp(-127, 127).to(torch.int8).reshape(w.shape), scale


def _ptd(path: str):
    with open(path, "rb") as f:
        return deserialize_ptd(f.read(), path)


def test_quantize_qb8w_equals_a_few_line_reference_bit_for_bit():
    w = torch.randn(37, 96, generator=torch.Generator().manual_seed(0)) * 0.05
    w[3, 40] = 4.0  # an outlier coarsens its own block only
    w[5, :32] = 0.0  # a zero block: scale 0, values 0
    q, scales = quantize_qb8w(w)
    want_q, want_scales = _reference(w)
    assert q.dtype == torch.int8 and scales.dtype == torch.float16 and list(scales.shape) == [37, 3]
    assert torch.equal(q, want_q) and torch.equal(scales, want_scales)
    assert int(q[5, :32].abs().sum()) == 0 and float(scales[5, 0]) == 0.0
    step = scales.float().repeat_interleave(32, dim=1)
    assert bool(((dequantize_qb8w(q, scales) - w).abs() <= step / 2 * 1.001 + 1e-12).all())
    # The outlier's block has a coarse step, the rest of its row keeps a fine one.
    assert float(scales[3, 1]) > 10 * float(scales[3, 0])


@pytest.mark.parametrize(
    "weight, message",
    [
        (torch.zeros(2, 48), "input size 48 is not a multiple of the block 32"),
        (torch.tensor([[float("nan")] * 32]), "NaN or an infinity"),
        (torch.full((1, 32), 1e9), "too large for a float16 scale"),
        (torch.zeros(2, 32, dtype=torch.float16), "takes a float32 matrix"),
    ],
)
def test_quantize_qb8w_refuses_what_it_cannot_hold_in_one_line(weight, message):
    with pytest.raises(ValueError, match=message):
        quantize_qb8w(weight)


def test_qb8w_linear_is_the_delegates_arithmetic():
    gen = torch.Generator().manual_seed(1)
    w, x, bias = torch.randn(24, 64, generator=gen), torch.randn(3, 64, generator=gen), torch.randn(24, generator=gen)
    q, scales = quantize_qb8w(w)
    y = qb8w_linear(x, q, scales, bias)
    # Per block: the exact integer dot times x_scale * w_scale (rounded to float first), in order.
    qx, xs = quantize_activation_blocks(x)
    acc = torch.zeros(3, 24, dtype=torch.float32)
    for b in range(2):
        dot = qx[:, b * 32 : (b + 1) * 32].double() @ q[:, b * 32 : (b + 1) * 32].double().T
        acc = (dot * (xs[:, b, None] * scales[:, b].float()).double() + acc.double()).float()
    assert torch.equal(y, acc + bias)
    cosine = float(nn.functional.cosine_similarity(y.flatten(), (x @ w.T + bias).flatten(), dim=0))
    assert cosine > 0.9999


def test_export_writes_qb8w_foundation_weights_equal_to_the_reference(tmp_path):
    foundation, adapters, inputs = demo_lora()
    export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner(quantize="int8"))
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    layers = ("fc1", "fc2", "fc3")
    assert sorted(ptd.named_data) == sorted(
        f"{f}.{name}" for f in layers for name in ("bias", "weight.qb8w", "weight.qb8w.scales")
    )
    for f in layers:
        want_q, want_scales = _reference(getattr(foundation, f).weight.detach())
        blob, scales = ptd.named_data[f"{f}.weight.qb8w"], ptd.named_data[f"{f}.weight.qb8w.scales"]
        assert blob.tensor_layout.scalar_type == INT8 and blob.data == want_q.numpy().tobytes()
        assert scales.tensor_layout.scalar_type == HALF and scales.data == want_scales.numpy().tobytes()


class _TinyLM(nn.Module):
    """Token embedding, a Linear of 48 inputs (no whole blocks), and an lm_head tied or not."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.embed = nn.Embedding(64, 32)
        self.up = nn.Linear(32, 48)
        self.down = nn.Linear(48, 32)
        self.head = nn.Linear(32, 64, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(self.down(torch.relu(self.up(self.embed(ids)))))


@pytest.mark.parametrize("tied", [False, True])
def test_token_embedding_is_one_qb8w_entry_and_odd_inputs_are_int8_per_row(tmp_path, tied):
    foundation = _TinyLM(tied).eval()
    adapted = shared_copy(foundation)
    adapted.up = LoRALinear(adapted.up, rank=4, alpha=8.0)
    inputs = (torch.tensor([[3, 60, 0, 17, 3]]),)
    export_lora(foundation, {"a": adapted.eval()}, inputs, str(tmp_path), XnnpackPartitioner(quantize="int8"))
    ptd = _ptd(os.path.join(tmp_path, "foundation.ptd"))
    tables = sorted(k for k, b in ptd.named_data.items() if list(b.tensor_layout.sizes) == [64, 32])
    # No float copy of the table: tied, one qb8w entry serves the gather and the lm_head's matmul.
    assert tables == (["embed.weight.qb8w"] if tied else ["embed.weight.qb8w", "head.weight.qb8w"])
    want_q, want_scales = _reference(foundation.embed.weight.detach())
    assert ptd.named_data["embed.weight.qb8w"].data == want_q.numpy().tobytes()
    assert "down.weight.qc8w" in ptd.named_data and "up.weight.qb8w" in ptd.named_data
    model = int8_reference(copy.deepcopy(foundation))
    with torch.no_grad():
        rows = model.embed(inputs[0])
    assert torch.equal(rows, dequantize_qb8w(want_q, want_scales)[inputs[0]])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
