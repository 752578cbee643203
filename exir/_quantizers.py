"""The quantizers of the quantized fully connected weight formats (exir/fc_formats.py's rows):
float32 weight -> the bytes an export stores and their scales. exir/quantize.py documents the
schemes and holds their eager references.
"""

from typing import Optional, Tuple

import torch

__all__ = [
    "QB5W_BLOCK",
    "QB8W_BLOCK",
    "pack_int4",
    "pack_int5",
    "quantize_qb5w",
    "quantize_qb8w",
    "quantize_qc4w",
    "quantize_qc8w",
    "unpack_int4",
    "unpack_int5",
]

# The group sizes qc4w takes (its row, exir/fc_formats.py, lists the same).
QC4W_GROUP_SIZES: Tuple[int, ...] = (32, 64, 128)
# The inputs per scale of qb8w: the delegate's activation block, so one weight scale meets one
# activation scale per integer dot.
QB8W_BLOCK = 32
# The inputs per scale of qb5w (the same activation block).
QB5W_BLOCK = 32
# Bytes of one block of 32 5-bit values in a row: 16 of low nibbles, 4 of fifth bits.
_QB5W_BLOCK_BYTES = QB5W_BLOCK * 5 // 8


def quantize_qc8w(weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantizes a float [out, in] weight to int8 per output row.

    Args:
      weight: a finite float32 tensor of rank 2.

    Returns:
      (int8 [out, in], float32 scales [out]), contiguous.

    Raises:
      ValueError: the weight is not a finite float32 matrix.
    """
    w = _check_weight("quantize_qc8w", weight)
    scales = (w.abs().amax(dim=1) / 127.0).to(torch.float32)
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(w / safe[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scales.contiguous()


def quantize_qb8w(
    weight: torch.Tensor, group_size: int = QB8W_BLOCK, importance: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantizes a float [out, in] weight to int8 in blocks of QB8W_BLOCK inputs, llama.cpp Q8_0's
    rule: per block, scale = float16(max|w| / 127), q = clamp(round_half_even(w / scale), -127, 127)
    (0 for a zero scale). Dividing by the stored (rounded) scale keeps each value's error within half
    a step of what the kernels multiply by.

    Args:
      weight: a finite float32 tensor of rank 2, its input size a multiple of QB8W_BLOCK.
      group_size: QB8W_BLOCK (the only block the format takes).
      importance: None (the format weighs none).

    Returns:
      (int8 [out, in], float16 scales [out, in / QB8W_BLOCK]), contiguous.

    Raises:
      ValueError: not a finite float32 matrix, an input size that is not a multiple of the block, a
        block too large for a float16 scale, another group size or an importance.
    """
    w = _check_weight("quantize_qb8w", weight)
    if group_size != QB8W_BLOCK or importance is not None:
        raise ValueError(f"quantize_qb8w: takes blocks of {QB8W_BLOCK} and no importance, got {group_size}")
    out, k = w.shape
    if k % QB8W_BLOCK:
        raise ValueError(f"quantize_qb8w: input size {k} is not a multiple of the block {QB8W_BLOCK}")
    blocks = w.reshape(out, k // QB8W_BLOCK, QB8W_BLOCK)
    scales = (blocks.abs().amax(dim=2) / 127.0).to(torch.float16)
    if not bool(torch.isfinite(scales).all()):
        raise ValueError("quantize_qb8w: a block's largest value is too large for a float16 scale")
    s = scales.to(torch.float32)
    safe = torch.where(s > 0, s, torch.ones_like(s))
    q = torch.round(blocks / safe[..., None]).clamp_(-127, 127)
    q = torch.where(s[..., None] > 0, q, torch.zeros_like(q)).to(torch.int8)
    return q.reshape(out, k).contiguous(), scales.contiguous()


def _check_weight(what: str, weight: torch.Tensor) -> torch.Tensor:
    if weight.dtype != torch.float32 or weight.dim() != 2:
        raise ValueError(f"{what}: takes a float32 matrix, got {weight.dtype} of shape {tuple(weight.shape)}")
    w = weight.detach()
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{what}: the weight has a NaN or an infinity")
    return w


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Packs int8 values in [-8, 7] of shape [out, in] (in even) two to a byte: uint8 [out, in / 2],
    element 2j in the low nibble of byte j and 2j + 1 in the high one."""
    nibbles = (q.to(torch.int16) & 0xF).to(torch.uint8)
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """pack_int4's inverse: int8 [out, 2 * bytes] in [-8, 7]."""
    b = packed.to(torch.int16)
    lo, hi = b & 0xF, (b >> 4) & 0xF
    q = torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)
    return torch.where(q >= 8, q - 16, q).to(torch.int8)


def quantize_qc4w(
    weight: torch.Tensor, group_size: int, importance: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantizes a float [out, in] weight to signed 4-bit values in groups along the input dim.

    Args:
      weight: a finite float32 tensor of rank 2 whose input size is a multiple of group_size.
      group_size: one of QC4W_GROUP_SIZES.
      importance: None, or float32 [in], finite and >= 0: how much each input's error counts (the
        mean square of that input over calibration text, as llama.cpp's importance matrix), which
        weighs the scale search.

    Returns:
      (uint8 [out, in / 2] packed as pack_int4, float16 scales [out, in / group_size]), contiguous.

    Raises:
      ValueError: the weight is not a finite float32 matrix, its input size is not a multiple of
        the group size, the importance is not [in] finite values >= 0, or a group's scale is
        beyond float16's range.
    """
    w = _check_weight("quantize_qc4w", weight)
    if importance is not None:
        _check_importance("quantize_qc4w", importance, w.shape[1])
    if group_size not in QC4W_GROUP_SIZES:
        raise ValueError(f"quantize_qc4w: group size must be one of {QC4W_GROUP_SIZES}, got {group_size}")
    out, k = w.shape
    if k % group_size:
        raise ValueError(f"quantize_qc4w: input size {k} is not a multiple of the group size {group_size}")
    groups = w.reshape(out, k // group_size, group_size)
    scales = _searched_scales(w, groups, -8, 7, importance)
    if bool(torch.isinf(scales).any()):
        raise ValueError("quantize_qc4w: a group's scale is beyond float16's range")
    s32 = scales.to(torch.float32)
    zero = s32 == 0
    # The levels are chosen for the stored (float16) scale, the one the kernels multiply by: for a
    # given scale the nearest level is the least error whatever the weighting.
    q = torch.round(groups / torch.where(zero, torch.ones_like(s32), s32)[..., None]).clamp_(-8, 7)
    q = torch.where(zero[..., None], torch.zeros_like(q), q).to(torch.int8).reshape(out, k)
    return pack_int4(q), scales.contiguous()


def pack_int5(q: torch.Tensor) -> torch.Tensor:
    """Packs int8 values in [-16, 15] of shape [out, in] (in a multiple of QB5W_BLOCK) as the
    delegate's canonical 5-bit bytes: uint8 [out, in * 5 / 8], per block of 32 values u = q + 16,
    16 bytes with u[2j] & 15 in the low nibble of byte j and u[2j + 1] & 15 in its high one, then 4
    bytes whose little-endian bit i is bit 4 of u[i]."""
    out, k = q.shape
    u = (q.to(torch.int16) + 16).reshape(out, k // QB5W_BLOCK, QB5W_BLOCK)
    low = (u & 0xF).to(torch.uint8)
    nibbles = low[..., 0::2] | (low[..., 1::2] << 4)
    fifth = ((u >> 4) & 1).reshape(out, k // QB5W_BLOCK, 4, 8)
    bits = (fifth << torch.arange(8, dtype=torch.int16)).sum(dim=-1).to(torch.uint8)
    return torch.cat([nibbles, bits], dim=-1).reshape(out, k // QB5W_BLOCK * _QB5W_BLOCK_BYTES).contiguous()


def unpack_int5(packed: torch.Tensor) -> torch.Tensor:
    """pack_int5's inverse: int8 [out, bytes * 8 / 5] in [-16, 15]."""
    out = packed.shape[0]
    blocks = packed.shape[1] // _QB5W_BLOCK_BYTES
    b = packed.reshape(out, blocks, _QB5W_BLOCK_BYTES).to(torch.int16)
    nibbles, bits = b[..., :16], b[..., 16:]
    low = torch.stack([nibbles & 0xF, (nibbles >> 4) & 0xF], dim=-1).reshape(out, blocks, QB5W_BLOCK)
    fifth = ((bits[..., None] >> torch.arange(8, dtype=torch.int16)) & 1).reshape(out, blocks, QB5W_BLOCK)
    return (low + 16 * fifth - 16).reshape(out, blocks * QB5W_BLOCK).to(torch.int8)


def quantize_qb5w(
    weight: torch.Tensor, group_size: int = QB5W_BLOCK, importance: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantizes a float [out, in] weight to signed 5-bit values in blocks of QB5W_BLOCK inputs with
    a float16 scale per block: the scale searched as quantize_qc4w's over the 32 levels [-16, 15]
    (Q5_0's rule, the extreme value at -16, is one candidate, so no block fits worse than with it),
    weighed by the importance when given; q = clamp(round_half_even(w / scale), -16, 15) for the
    stored scale (0 for a zero scale).

    Args:
      weight: a finite float32 tensor of rank 2, its input size a multiple of QB5W_BLOCK.
      group_size: QB5W_BLOCK (the only block the format takes).
      importance: None, or float32 [in], finite and >= 0 (as quantize_qc4w's).

    Returns:
      (uint8 [out, in * 5 / 8] packed as pack_int5, float16 scales [out, in / QB5W_BLOCK]), contiguous.

    Raises:
      ValueError: not a finite float32 matrix, an input size that is not a multiple of the block,
        another group size, a bad importance, or a block's scale beyond float16's range.
    """
    w = _check_weight("quantize_qb5w", weight)
    if group_size != QB5W_BLOCK:
        raise ValueError(f"quantize_qb5w: takes blocks of {QB5W_BLOCK}, got {group_size}")
    if importance is not None:
        _check_importance("quantize_qb5w", importance, w.shape[1])
    out, k = w.shape
    if k % QB5W_BLOCK:
        raise ValueError(f"quantize_qb5w: input size {k} is not a multiple of the block {QB5W_BLOCK}")
    groups = w.reshape(out, k // QB5W_BLOCK, QB5W_BLOCK)
    scales = _searched_scales(w, groups, -16, 15, importance)
    if bool(torch.isinf(scales).any()):
        raise ValueError("quantize_qb5w: a block's scale is beyond float16's range")
    s32 = scales.to(torch.float32)
    zero = s32 == 0
    q = torch.round(groups / torch.where(zero, torch.ones_like(s32), s32)[..., None]).clamp_(-16, 15)
    q = torch.where(zero[..., None], torch.zeros_like(q), q).to(torch.int8).reshape(out, k)
    return pack_int5(q), scales.contiguous()


# The scale candidates _searched_scales tries: the extreme value at level lowest - step / 10.
_SEARCH_STEPS: Tuple[int, ...] = tuple(range(-8, 9, 2))


def _check_importance(what: str, importance: torch.Tensor, inputs: int) -> None:
    if importance.dtype != torch.float32 or list(importance.shape) != [inputs]:
        got = f"{importance.dtype} {list(importance.shape)}"
        raise ValueError(f"{what}: importance must be float32 [{inputs}], got {got}")
    if not bool(torch.isfinite(importance).all()) or bool((importance < 0).any()):
        raise ValueError(f"{what}: importance must be finite and >= 0")


def _searched_scales(
    w: torch.Tensor, groups: torch.Tensor, lowest: int, highest: int, importance: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Each group's float16 scale, found as llama.cpp's make_qx_quants finds Q4_0's with importance
    weights: for each candidate (the group's largest-magnitude value, with its sign, at level
    lowest - step / 10), the levels are rounded and clamped to [lowest, highest] and the scale
    that fits them best by weighted least squares is computed; the candidate whose fit explains the
    most weighted energy wins. The weight of an input is sqrt(mean(row^2) + w^2) (large weights
    matter more, but never so much that small ones are ignored), times its importance if given.
    Step 0 takes Q4_0's levels (the extreme at exactly `lowest`) and fits their scale, so no group
    fits worse than with Q4_0's rule.

    groups: float32 [out, groups, group] (w reshaped); returns float16 [out, groups] (signed).
    """
    sigma2 = (w * w).mean(dim=1).reshape(-1, 1, 1)
    weight = torch.sqrt(sigma2 + groups * groups)
    if importance is not None:
        weight = weight * importance.reshape(1, groups.shape[1], groups.shape[2])
    weighted = weight * groups
    extreme = torch.gather(groups, -1, groups.abs().argmax(dim=-1, keepdim=True))
    nonzero = extreme != 0
    inverse = 1.0 / torch.where(nonzero, extreme, torch.ones_like(extreme))
    best_scale = (extreme / lowest).squeeze(-1)
    best_fit = torch.full_like(best_scale, -1.0)
    levels = torch.empty_like(groups)
    for step in _SEARCH_STEPS:
        torch.mul(groups, inverse * (lowest - 0.1 * step), out=levels)
        levels.round_().clamp_(lowest, highest)
        sum_lx = torch.linalg.vecdot(weighted, levels)
        levels.mul_(levels)
        sum_l2 = torch.linalg.vecdot(weight, levels)
        fits = sum_l2 > 0
        denominator = torch.where(fits, sum_l2, torch.ones_like(sum_l2))
        fit = torch.where(fits, sum_lx * sum_lx / denominator, torch.full_like(sum_lx, -1.0))
        better = fit > best_fit
        best_scale = torch.where(better, sum_lx / denominator, best_scale)
        best_fit = torch.where(better, fit, best_fit)
    scales = best_scale.to(torch.float16)
    scales = torch.where(nonzero.squeeze(-1), scales, torch.zeros_like(scales))
    return torch.where(scales == 0, torch.zeros_like(scales), scales)  # no -0.0 in the file
