"""Weight-only quantization of a foundation (schemes "qb8w", "qc8w", "qc4w", "qb5w") and its eager reference.

qb8w (--quantize int8): int8 in blocks of 32 inputs (ACT_BLOCK), llama.cpp Q8_0's rule: per block
scale = float16(max|w| / 127), q = clamp(round_half_even(w / scale), -127, 127). Entries:
"<key>.qb8w" (int8 [out, in]) and "<key>.qb8w.scales" (float16 [out, in / 32]). The delegate runs
it as qc4w below, one weight scale per activation block: acc = fma(float(dot_b),
float32(x_scale_b * w_scale_b), acc) in block order, then acc + bias (`qb8w_linear`). A layer whose
input size is not a multiple of 32 is qc8w. A token embedding (tied to the lm_head or not) is the
same entries, gathered by the runtime's edgeshare::embedding_qb8w (`gather_qb8w`: q * its block's
scale, exact in float32). `int8_reference` swaps a model's foundation layers for these.

qc8w (--quantize int8-row, and int8 adapters): int8 per output row, symmetric, round to nearest even
(torch.round), scale = max|w_row| / 127 in float32 (a zero row has scale 0 and zero bytes). It is a
pure function of the float weight's values, never of names or adapters, so foundation.ptd is
byte-identical across exports of one foundation. The weight and its scales are named-data entries of
their own: "<key>.qc8w" (int8 [out, in]) and "<key>.qc8w.scales" (float32 [out]), each with its
digest.

At run time the XNNPACK delegate quantizes activations to int8 in blocks of ACT_BLOCK (32) inputs
of each row, each block on its own (symmetric, scale = max|x_block| / 127, x * (127 / max|x_block|)
clamped to +-127 and rounded to nearest even), takes each block's integer dot exactly and fuses
it into a float accumulator, acc = fma(float(dot_b), x_scale_b, acc) in block order, then
y = fma(acc, w_scale, bias). `qc8w_linear` is that computation in torch, and
`int8_reference(..., blocks=False)` swaps a model's foundation linears for it, and its token
embeddings for `gather_qc8w` (the int8 rows written as q * scale, the runtime's
edgeshare::embedding_qc8w): the eager model the runtime's outputs are compared with.

qc4w: signed 4-bit values in groups of `group_size` (32, 64 or 128) along the input dim, round
half to even, float16 scales per group, with llama.cpp Q4_0's scale rule: the group's value of
largest magnitude m (with its sign; the first on a tie) is level -8, scale = fp16(m / -8) (signed),
and q = clamp(round(w / f32(scale)), -8, 7) (0 for a zero scale). Every one of the 16 levels is
used, where a symmetric max / 7.5 rule leaves -8 nearly empty. Entries:
"<key>.qc4w" (uint8 [out, in / 2], element 2j in the low nibble of byte j and 2j + 1 in the high
one, two's complement) and "<key>.qc4w.scales" (float16 [out, in / group]). The group size is the
scales' shape, and the delegate graph carries it beside the scheme. `qc4w_linear` is the
delegate's computation (activations in blocks of 32 as above, an exact integer sum per block,
acc = fma(float(dot_b), x_scale_b * w_scale_g, acc) in block order, then acc + bias), and
`int4_reference` swaps a model's foundation linears for it (and the layers int4 leaves at 8 bits
for qc8w). An untied
token embedding of a width that is a multiple of the group is the same entries, gathered by the
runtime's edgeshare::embedding_qc4w (`gather_qc4w`: only the looked-up rows, each q * scale per
group, which is exact in float32).

qb5w (--quantize int5, and int5k's other layers): signed 5-bit values in blocks of 32 inputs with a
float16 scale per block, the scale searched as qc4w's over the levels [-16, 15] (weighed by
--calibration's importance when given). Entries: "<key>.qb5w" (uint8 [out, in * 5 / 8], pack_int5)
and "<key>.qb5w.scales" (float16 [out, in / 32]). The delegate runs it as qb8w (`qb5w_linear`), and
`int5_reference` swaps a model's foundation linears for it; the output layer (unless --lm-head
int5), a table tied to it and a layer whose input size is not a multiple of 32 are qc8w. An untied
token embedding is the same entries, gathered by the runtime's edgeshare::embedding_qb5w
(`gather_qb5w`).
"""

from typing import Callable, Optional, Tuple

import torch
from edgeshare.exir._quantizers import (
    pack_int4,
    pack_int5,
    quantize_qb5w,
    quantize_qb8w,
    quantize_qc4w,
    quantize_qc8w,
    unpack_int4,
    unpack_int5,
)
from edgeshare.exir._resident import release
from edgeshare.exir.fc_formats import (
    OUTPUT_LAYER_NAMES,
    QB5W,
    QB8W,
    QC4W,
    QC8W,
    FcFormat,
    FcMix,
    UnknownFormatError,
    fc_format,
    format_for_adapter_dtype,
    format_for_option,
    foundation_format,
    is_output_layer,
    quantized_formats,
)
from edgeshare.exir.tensor_layout import derived, tensor_digest
from torch import nn

# Inputs per activation block: the delegate quantizes each row of activations in blocks of this
# many (kernels.h's kActBlock), each with its own scale.
ACT_BLOCK = 32

__all__ = [
    "ACT_BLOCK",
    "DEFAULT_GROUP_SIZE",
    "GROUP_SIZES",
    "OUTPUT_LAYER_NAMES",
    "QB8W_SCALES_SUFFIX",
    "QB8W_SCHEME",
    "QB8W_SUFFIX",
    "QC4W_SCALES_SUFFIX",
    "QC4W_SCHEME",
    "QC4W_SUFFIX",
    "QC8W_SCALES_SUFFIX",
    "QC8W_SCHEME",
    "QC8W_SUFFIX",
    "QUANTIZE_SCHEMES",
    "IMPORTANCE_META",
    "QUANT_SCHEME_META",
    "dequantize_qb5w",
    "dequantize_qb8w",
    "dequantize_qc4w",
    "dequantize_qc8w",
    "gather_qb5w",
    "gather_qb8w",
    "gather_qc4w",
    "gather_qc8w",
    "int4_reference",
    "int5_reference",
    "int8_reference",
    "is_output_layer",
    "pack_int4",
    "pack_int5",
    "qb5w_linear",
    "qb8w_linear",
    "qc4w_linear",
    "qc8w_linear",
    "quantize_activation_blocks",
    "adapter_reference",
    "quantize_qb5w",
    "quantize_qb8w",
    "quantize_qc4w",
    "quantize_qc8w",
    "quantized",
    "unpack_int4",
    "unpack_int5",
]

# The option values and key suffixes of the quantized formats, as their rows (exir/fc_formats.py)
# spell them.
QC8W_SCHEME = QC8W.option
QB8W_SCHEME = QB8W.option
QC4W_SCHEME = QC4W.option
QUANTIZE_SCHEMES: Tuple[str, ...] = ("none", *(f.option for f in quantized_formats()))
GROUP_SIZES: Tuple[int, ...] = QC4W.group_sizes
DEFAULT_GROUP_SIZE = GROUP_SIZES[0]
QC4W_SUFFIX = QC4W.key_suffix
QC4W_SCALES_SUFFIX = QC4W.scales_suffix
QC8W_SUFFIX = QC8W.key_suffix
QC8W_SCALES_SUFFIX = QC8W.scales_suffix
QB8W_SUFFIX = QB8W.key_suffix
QB8W_SCALES_SUFFIX = QB8W.scales_suffix
# Placeholder meta under a format with a fallback: the option ("int4", "int8" or "int8-row") of the
# format a pinned foundation weight is stored in (set by the XNNPACK partitioner, read by its
# preprocess and by quantize_embeddings).
QUANT_SCHEME_META = "edgeshare_quant_scheme"
# Placeholder meta of a pinned foundation weight whose format weighs an importance (calibration.py):
# float32 [in], how much each input's error counts (set by the XNNPACK partitioner, read by its
# preprocess).
IMPORTANCE_META = "edgeshare_importance"


def dequantize_qc8w(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float weight an int8 weight and its scales stand for: q * scale per row."""
    return q.to(torch.float32) * scales[:, None]


def gather_qc8w(q: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The int8 embedding gather: float32(q[i]) * scales[i] for every index i.

    Args:
      q: int8 table [n, d].
      scales: float32 [n].
      indices: integer indices, any shape.

    Returns:
      float32 [..., d].
    """
    return q[indices].to(torch.float32) * scales[indices].unsqueeze(-1)


# Rows quantize() handles at a time: each row's values depend on that row alone, and blocks keep the
# float temporaries of a large table (a vocabulary's embedding) to a few MiB.
_BLOCK_ROWS = 1024


def quantized(
    weight: torch.Tensor,
    scheme: str,
    group_size: int = DEFAULT_GROUP_SIZE,
    block_rows: int = _BLOCK_ROWS,
    importance: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """quantize_qc8w (scheme "int8") or quantize_qc4w (scheme "int4") of a foundation weight, as an
    export stores it: once per export for every equal weight and importance (tensor_layout.derived,
    inside digest_cache), so each program that stores it holds the same tensors; block_rows rows at
    a time, with the same result; the float weight's pages released after when it is mapped from a
    file (it is read again only if it is written in float).

    Args:
      weight: a finite float32 matrix.
      scheme: QC8W_SCHEME or QC4W_SCHEME.
      group_size: the int4 group (one of GROUP_SIZES).
      block_rows: rows quantized at once.
      importance: None, or float32 [in] for a format that weighs it (calibration.py).

    Returns:
      As quantize_qc8w or quantize_qc4w.

    Raises:
      ValueError: as quantize_qc8w or quantize_qc4w, or an unknown scheme.
    """
    fmt = _quantized_format(scheme)

    def make(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if w.dtype != torch.float32 or w.dim() != 2 or w.shape[0] <= block_rows:
            parts = [fmt.quantize(w, group_size, importance)]
        else:
            starts = range(0, w.shape[0], block_rows)
            parts = [fmt.quantize(w[start : start + block_rows], group_size, importance) for start in starts]
        release(w)
        if len(parts) == 1:
            return parts[0]
        return torch.cat([q for q, _ in parts]), torch.cat([scales for _, scales in parts])

    weighed = None if importance is None else tensor_digest(importance.contiguous())
    return derived(weight.detach(), (fmt.option, fmt.group(group_size) or None, weighed), make)


def _quantized_format(scheme: str) -> FcFormat:
    options = [f.option for f in quantized_formats()]
    if scheme not in options:
        raise ValueError(f"quantized: scheme must be one of {options}, got {scheme}")
    return format_for_option(scheme)


def dequantize_qb8w(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float weight an int8 block weight and its scales stand for: q * scale per block."""
    return q.to(torch.float32) * scales.to(torch.float32).repeat_interleave(ACT_BLOCK, dim=1)


def gather_qb8w(q: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The int8 block embedding gather: the rows of dequantize_qb8w(q, scales) at indices, computed
    for those rows only.

    Args:
      q: int8 table [n, d].
      scales: float16 [n, d / ACT_BLOCK].
      indices: integer indices, any shape.

    Returns:
      float32 [..., d].
    """
    flat = indices.reshape(-1)
    rows = dequantize_qb8w(q[flat], scales[flat])
    return rows.reshape(*indices.shape, rows.shape[-1])


def dequantize_qc4w(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float weight an int4 weight and its scales stand for: q * scale per group."""
    q = unpack_int4(packed).to(torch.float32)
    group = q.shape[1] // scales.shape[1]
    return q * scales.to(torch.float32).repeat_interleave(group, dim=1)


def dequantize_qb5w(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float weight a 5-bit block weight and its scales stand for: q * scale per block."""
    return dequantize_qb8w(unpack_int5(packed), scales)


def gather_qb5w(packed: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The 5-bit block embedding gather: the rows of dequantize_qb5w(packed, scales) at indices,
    computed for those rows only.

    Args:
      packed: uint8 table [n, d * 5 / 8] (pack_int5).
      scales: float16 [n, d / ACT_BLOCK].
      indices: integer indices, any shape.

    Returns:
      float32 [..., d].
    """
    flat = indices.reshape(-1)
    rows = dequantize_qb5w(packed[flat], scales[flat])
    return rows.reshape(*indices.shape, rows.shape[-1])


def gather_qc4w(packed: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The int4 embedding gather: the rows of dequantize_qc4w(packed, scales) at indices, computed
    for those rows only.

    Args:
      packed: uint8 table [n, d / 2] (pack_int4).
      scales: float16 [n, d / group].
      indices: integer indices, any shape.

    Returns:
      float32 [..., d].
    """
    flat = indices.reshape(-1)
    rows = dequantize_qc4w(packed[flat], scales[flat])
    return rows.reshape(*indices.shape, rows.shape[-1])


def quantize_activation_blocks(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The delegate's run-time quantization of activations: each row (last dim) in blocks of ACT_BLOCK.

    Args:
      x: float32 [..., k].

    Returns:
      (int8 values [..., k], float32 scales [..., ceil(k / ACT_BLOCK)]): per block, scale =
      max|block| / 127 and values round_half_even(clamp(x * (127 / max|block|), -127, 127)) (0 for
      an all-zero block); a last partial block is padded with zeros.
    """
    k = x.shape[-1]
    blocks = -(-k // ACT_BLOCK)
    xb = torch.nn.functional.pad(x, (0, blocks * ACT_BLOCK - k)).reshape(*x.shape[:-1], blocks, ACT_BLOCK)
    amax = xb.abs().amax(dim=-1)
    scales = amax / 127.0
    inv = torch.where(amax > 0, 127.0 / torch.where(amax > 0, amax, torch.ones_like(amax)), torch.zeros_like(amax))
    q = torch.round((xb * inv[..., None]).clamp(-127.0, 127.0)).to(torch.int8)
    return q.reshape(*x.shape[:-1], blocks * ACT_BLOCK)[..., :k], scales


def _block_dots(qx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Exact integer dots per activation block, in float64 (which holds every int32 sum of int8
    products): qx int8 [..., k], w integer [out, k] -> [..., out, blocks]."""
    k = qx.shape[-1]
    blocks = -(-k // ACT_BLOCK)
    pad = blocks * ACT_BLOCK - k
    xb = torch.nn.functional.pad(qx.to(torch.float64), (0, pad)).reshape(*qx.shape[:-1], blocks, ACT_BLOCK)
    wb = torch.nn.functional.pad(w.to(torch.float64), (0, pad)).reshape(w.shape[0], blocks, ACT_BLOCK)
    return torch.einsum("...bk,obk->...ob", xb, wb)


def _fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """float32(a * b + c) from float32 or exact-integer operands, the product exact in float64 and
    the sum rounded once to float32 unless its exact value needs more than 53 bits (rare here)."""
    return (a.to(torch.float64) * b.to(torch.float64) + c.to(torch.float64)).to(torch.float32)


def qc8w_linear(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The int8 fully connected as the delegate computes it, in torch.

    Per row: int8 activations in blocks (quantize_activation_blocks), one exact integer sum per
    block, acc = fma(float(sum_b), x_scale_b, acc) over the blocks in order, then
    y = fma(acc, w_scale, bias), each fused multiply-add as _fma32 computes it.

    Args:
      x: float32 [..., in].
      q: int8 weight [out, in].
      scales: float32 [out].
      bias: float32 [out] or None.

    Returns:
      float32 [..., out].
    """
    qx, xs = quantize_activation_blocks(x)
    dots = _block_dots(qx, q)
    acc = torch.zeros(dots.shape[:-1], dtype=torch.float32)
    for b in range(dots.shape[-1]):
        acc = _fma32(dots[..., b], xs[..., b, None], acc)
    b0 = torch.zeros(q.shape[0], dtype=torch.float32) if bias is None else bias
    return _fma32(acc, scales, b0)


def qb8w_linear(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The int8 block fully connected as the delegate computes it, in torch.

    Per row: int8 activations in blocks (quantize_activation_blocks), one exact integer sum per
    block, acc = fma(float(sum_b), float32(x_scale_b * scale_b), acc) over the blocks in order, then
    y = acc + bias, each fused multiply-add as _fma32 computes it.

    Args:
      x: float32 [..., in].
      q: int8 weight [out, in].
      scales: float16 [out, in / ACT_BLOCK].
      bias: float32 [out] or None.

    Returns:
      float32 [..., out].
    """
    qx, xs = quantize_activation_blocks(x)
    dots = _block_dots(qx, q)
    s = scales.to(torch.float32)
    acc = torch.zeros(dots.shape[:-1], dtype=torch.float32)
    for b in range(dots.shape[-1]):
        acc = _fma32(dots[..., b], xs[..., b, None] * s[:, b], acc)
    return acc if bias is None else acc + bias


def qc4w_linear(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor]
) -> torch.Tensor:
    """The int4 fully connected as the delegate computes it, in torch.

    Per row: int8 activations in blocks (quantize_activation_blocks), one exact integer sum per
    block, acc = fma(float(sum_b), float32(x_scale_b * scale_g), acc) over the blocks in order (g:
    the block's group), then y = acc + bias, each fused multiply-add as _fma32 computes it.

    Args:
      x: float32 [..., in].
      packed: uint8 [out, in / 2] (pack_int4).
      scales: float16 [out, in / group].
      bias: float32 [out] or None.

    Returns:
      float32 [..., out].
    """
    qx, xs = quantize_activation_blocks(x)
    q = unpack_int4(packed)
    out, k = q.shape
    group = k // scales.shape[1]
    dots = _block_dots(qx, q)
    s = scales.to(torch.float32)
    acc = torch.zeros(dots.shape[:-1], dtype=torch.float32)
    for b in range(dots.shape[-1]):
        acc = _fma32(dots[..., b], xs[..., b, None] * s[:, b * ACT_BLOCK // group], acc)
    return acc if bias is None else acc + bias


def qb5w_linear(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor]
) -> torch.Tensor:
    """The 5-bit block fully connected as the delegate computes it, in torch: qb8w_linear over the
    unpacked values (the kernels rebuild qb8w's bytes and run its arithmetic).

    Args:
      x: float32 [..., in].
      packed: uint8 [out, in * 5 / 8] (pack_int5).
      scales: float16 [out, in / ACT_BLOCK].
      bias: float32 [out] or None.

    Returns:
      float32 [..., out].
    """
    return qb8w_linear(x, unpack_int5(packed), scales, bias)


Stored = Tuple[torch.Tensor, torch.Tensor]


class _QuantizedLinear(nn.Module):
    """A Linear run as the delegate runs a quantized foundation linear: its weight stored by
    `quantize` (float32 weight -> values, scales) and run by `run(x, values, scales, bias)`;
    `dequantize(values, scales)` is the float weight it stands for (PEFT's LoRA layers read their
    linears' weight dtype)."""

    def __init__(
        self,
        linear: nn.Linear,
        quantize: Callable[[torch.Tensor], Stored],
        run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor],
        dequantize: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        super().__init__()
        q, scales = quantize(linear.weight.detach().to(torch.float32))
        self.register_buffer("q", q)
        self.register_buffer("scales", scales)
        self.bias_ = None if linear.bias is None else linear.bias.detach()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self._run, self._dequantize = run, dequantize

    @property
    def weight(self) -> torch.Tensor:
        """The float weight it stands for."""
        return self._dequantize(self.q, self.scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(x, self.q, self.scales, self.bias_)


class _QuantizedEmbedding(nn.Module):
    """An Embedding run as the runtime runs a quantized foundation table: stored by `quantize`,
    gathered by `gather(values, scales, indices)`."""

    def __init__(
        self,
        embedding: nn.Embedding,
        quantize: Callable[[torch.Tensor], Stored],
        gather: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        super().__init__()
        q, scales = quantize(embedding.weight.detach().to(torch.float32))
        self.register_buffer("q", q)
        self.register_buffer("scales", scales)
        self.num_embeddings = embedding.num_embeddings
        self.embedding_dim = embedding.embedding_dim
        self._gather = gather

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self._gather(self.q, self.scales, indices)


class _Int8Linear(_QuantizedLinear):
    """An int8 per row (qc8w) foundation linear."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear, quantize_qc8w, qc8w_linear, dequantize_qc8w)


class _Int8BlockLinear(_QuantizedLinear):
    """An int8 in blocks (qb8w) foundation linear."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear, quantize_qb8w, qb8w_linear, dequantize_qb8w)


class _Int4Linear(_QuantizedLinear):
    """An int4 (qc4w) foundation linear in groups of group_size."""

    def __init__(self, linear: nn.Linear, group_size: int) -> None:
        super().__init__(linear, lambda w: quantize_qc4w(w, group_size), qc4w_linear, dequantize_qc4w)


class _Int5Linear(_QuantizedLinear):
    """A 5-bit in blocks (qb5w) foundation linear."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__(linear, quantize_qb5w, qb5w_linear, dequantize_qb5w)


class _Int5Embedding(_QuantizedEmbedding):
    """A 5-bit in blocks (qb5w) foundation table."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__(embedding, quantize_qb5w, gather_qb5w)


class _Int8Embedding(_QuantizedEmbedding):
    """An int8 per row (qc8w) foundation table."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__(embedding, quantize_qc8w, gather_qc8w)


class _Int8BlockEmbedding(_QuantizedEmbedding):
    """An int8 in blocks (qb8w) foundation table."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__(embedding, quantize_qb8w, gather_qb8w)


class _Int4Embedding(_QuantizedEmbedding):
    """An int4 (qc4w) foundation table in groups of group_size."""

    def __init__(self, embedding: nn.Embedding, group_size: int) -> None:
        super().__init__(embedding, lambda w: quantize_qc4w(w, group_size), gather_qc4w)


def _is_adapter_linear(name: str) -> bool:
    parts = name.split(".")
    return any(p.startswith("lora_") or p in ("lora_a", "lora_b") for p in parts)


def adapter_reference(
    model: nn.Module,
    adapter_dtype: str,
    is_adapter: Optional[Callable[[str], bool]] = None,
    swappable: bool = False,
) -> nn.Module:
    """Makes, in place, every adapter nn.Linear of `model` compute as a per-adapter program with
    --adapter-dtype adapter_dtype runs it: an unquantized row's weight and bias rounded as stored
    (the row's rounded()); a quantized row's linear as int8_reference runs it (weight per row,
    activations quantized in blocks of 32, bias float32). A swappable program reads its adapters' weights
    as stored with float32 activations: with swappable, every row only rounds the weights.

    Args:
      model: a foundation with LoRA adapters.
      adapter_dtype: an adapter format's option ("fp32", "fp16", "int8").
      is_adapter: name -> whether that module is an adapter's; by default every one whose path has
        a "lora_" component (PEFT's lora_A/lora_B, edgeshare's lora_a/lora_b).
      swappable: the reference of a swappable program rather than a per-adapter one.

    Returns:
      The same model.

    Raises:
      UnknownFormatError: no adapter format row has that option.
    """
    fmt = format_for_adapter_dtype(adapter_dtype)
    if not fmt.holds_adapters:
        raise UnknownFormatError(f"adapter_reference: {adapter_dtype!r} stores no adapter")
    pick = is_adapter or _is_adapter_linear
    if fmt.quantized and not swappable:
        # The delegate runs a packed qc8w linear with its activations quantized in blocks too.
        return int8_reference(model, is_foundation=pick, blocks=False)
    with torch.no_grad():
        for name, module in model.named_modules():
            if not (isinstance(module, nn.Linear) and name and pick(name)):
                continue
            module.weight.copy_(fmt.rounded(module.weight))
            if module.bias is not None and not fmt.quantized:
                module.bias.copy_(fmt.rounded(module.bias[None, :])[0])
    return model


def int4_reference(
    model: nn.Module,
    group_size: int = DEFAULT_GROUP_SIZE,
    lm_head: str = QC8W.adapter_value,
    is_foundation: Optional[Callable[[str], bool]] = None,
    mix: Optional[FcMix] = None,
) -> nn.Module:
    """Swaps every foundation nn.Linear and nn.Embedding of `model`, in place, for the computation
    the int4 export runs: int4 linears and embeddings, except where the export keeps a layer at its
    fallback (foundation_format): the output layer (unless lm_head is int4) and a table tied to it,
    and a layer or table whose input size is not a multiple of group_size, each as int8_reference
    runs it.

    Args:
      model: the model (a foundation, or a foundation with LoRA adapters).
      group_size: one of GROUP_SIZES.
      lm_head: "int8" (per row, int4's fallback) or QC4W_SCHEME, the output layer's scheme.
      is_foundation: as int8_reference's.
      mix: a mix over int4 (INT4K: --quantize int4k), whose named projections run as its other
        row's reference (qb8w: int8_reference's), or None.

    Returns:
      The same model.
    """
    return _swap_with_fallback(model, QC4W, group_size, lm_head, is_foundation, mix)


def int5_reference(
    model: nn.Module,
    lm_head: str = QC8W.adapter_value,
    is_foundation: Optional[Callable[[str], bool]] = None,
    mix: Optional[FcMix] = None,
) -> nn.Module:
    """Swaps every foundation nn.Linear and nn.Embedding of `model`, in place, for the computation
    the int5 export (or, with mix=INT5K, int5k) runs: qb5w linears and embeddings, except where the
    export keeps a layer at its fallback (foundation_format): the output layer (unless lm_head is
    int5) and a table tied to it, and a layer or table whose input size is not a multiple of 32, as
    int8_reference runs them per row; a mix's named projections as its other row's reference (qb8w).

    Args:
      model: the model (a foundation, or a foundation with LoRA adapters).
      lm_head: "int8" (per row, the fallback) or QB5W's option, the output layer's format.
      is_foundation: as int8_reference's.
      mix: a mix over qb5w (INT5K), or None.

    Returns:
      The same model.
    """
    return _swap_with_fallback(model, QB5W, ACT_BLOCK, lm_head, is_foundation, mix)


def _swap_with_fallback(
    model: nn.Module,
    fmt: FcFormat,
    group_size: int,
    lm_head: str,
    is_foundation: Optional[Callable[[str], bool]],
    mix: Optional[FcMix],
) -> nn.Module:
    """_swap_foundation for a format whose output layer stays at its fallback unless lm_head names
    the format itself, over `fmt` or a mix whose base it is."""
    if mix is not None and mix.base_format is not fmt:
        raise ValueError(f"{fmt.option} reference: mix {mix.option} is over {mix.base}, not {fmt.scheme}")
    output_layer = fmt if lm_head == fmt.option else fc_format(fmt.fallback)
    return _swap_foundation(model, fmt, group_size, output_layer, is_foundation, mix)


def int8_reference(
    model: nn.Module, is_foundation: Optional[Callable[[str], bool]] = None, blocks: bool = True
) -> nn.Module:
    """Swaps every foundation nn.Linear and nn.Embedding of `model`, in place, for its int8
    computation: with blocks, as --quantize int8 runs it (qb8w, and qc8w for a layer or table whose
    input size is not a multiple of ACT_BLOCK); without, as --quantize int8-row (and an int8
    adapter) runs it (qc8w).

    Args:
      model: the model (a foundation, or a foundation with LoRA adapters).
      is_foundation: name -> whether that module is the foundation's; by default every one
        whose path has no "lora_" component (PEFT's lora_A/lora_B, edgeshare's lora_a/lora_b).
      blocks: qb8w where it holds (else qc8w everywhere).

    Returns:
      The same model.
    """
    fmt = QB8W if blocks else QC8W
    return _swap_foundation(model, fmt, ACT_BLOCK, fmt, is_foundation)


# A format's reference modules: (linear, embedding), each built from the float module and the group.
_REFERENCES = {
    QC8W.scheme: (lambda m, g: _Int8Linear(m), lambda m, g: _Int8Embedding(m)),
    QB8W.scheme: (lambda m, g: _Int8BlockLinear(m), lambda m, g: _Int8BlockEmbedding(m)),
    QC4W.scheme: (_Int4Linear, _Int4Embedding),
    QB5W.scheme: (lambda m, g: _Int5Linear(m), lambda m, g: _Int5Embedding(m)),
}


def _swap_foundation(
    model: nn.Module,
    requested: FcFormat,
    group_size: int,
    output_layer: FcFormat,
    is_foundation: Optional[Callable[[str], bool]],
    mix: Optional[FcMix] = None,
) -> nn.Module:
    """Swaps each foundation nn.Linear and nn.Embedding for the reference of the format the export
    stores it in (foundation_format, as the XNNPACK partitioner decides)."""
    keep = is_foundation or (lambda name: not _is_adapter_linear(name))
    tables = {id(m.weight) for _, m in model.named_modules() if isinstance(m, nn.Embedding)}
    linears = {id(m.weight) for _, m in model.named_modules() if isinstance(m, nn.Linear)}
    swaps = []
    for n, m in model.named_modules():
        if not n or not keep(n) or not isinstance(m, (nn.Linear, nn.Embedding)):
            continue
        gathered = isinstance(m, nn.Embedding)
        in_size = m.embedding_dim if gathered else m.in_features
        fmt, _ = foundation_format(
            requested,
            n + ".weight",
            in_size,
            group_size,
            output_layer,
            id(m.weight) in tables,
            id(m.weight) in linears,
            mix,
        )
        swaps.append((n, fmt, gathered))
    for name, fmt, gathered in swaps:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        make = _REFERENCES[fmt.scheme][1 if gathered else 0]
        setattr(parent, child, make(model.get_submodule(name), group_size))
    return model
