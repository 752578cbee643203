"""The quantizers of the quantized fully connected weight formats (exir/fc_formats.py's rows):
float32 weight -> the bytes an export stores and their scales. exir/quantize.py documents the
schemes and holds their eager references.
"""

from typing import Tuple

import torch

__all__ = ["pack_int4", "quantize_qc4w", "quantize_qc8w", "unpack_int4"]

# The group sizes qc4w takes (its row, exir/fc_formats.py, lists the same).
QC4W_GROUP_SIZES: Tuple[int, ...] = (32, 64, 128)


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


def quantize_qc4w(weight: torch.Tensor, group_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantizes a float [out, in] weight to signed 4-bit values in groups along the input dim.

    Args:
      weight: a finite float32 tensor of rank 2 whose input size is a multiple of group_size.
      group_size: one of QC4W_GROUP_SIZES.

    Returns:
      (uint8 [out, in / 2] packed as pack_int4, float16 scales [out, in / group_size]), contiguous.

    Raises:
      ValueError: the weight is not a finite float32 matrix, its input size is not a multiple of
        the group size, or a group's scale is beyond float16's range.
    """
    w = _check_weight("quantize_qc4w", weight)
    if group_size not in QC4W_GROUP_SIZES:
        raise ValueError(f"quantize_qc4w: group size must be one of {QC4W_GROUP_SIZES}, got {group_size}")
    out, k = w.shape
    if k % group_size:
        raise ValueError(f"quantize_qc4w: input size {k} is not a multiple of the group size {group_size}")
    groups = w.reshape(out, k // group_size, group_size)
    # Q4_0's rule: the group's value of largest magnitude, with its sign, is level -8, so all 16
    # levels are in use (a symmetric max / 7.5 scale leaves -8 nearly empty and spends a level's
    # worth of resolution on every group). Scales are therefore signed.
    extreme = torch.gather(groups, -1, groups.abs().argmax(dim=-1, keepdim=True)).squeeze(-1)
    scales = (extreme / -8.0).to(torch.float16)
    scales = torch.where(scales == 0, torch.zeros_like(scales), scales)  # no -0.0 in the file
    if bool(torch.isinf(scales).any()):
        raise ValueError("quantize_qc4w: a group's scale max|w| / 8 is beyond float16's range")
    s32 = scales.to(torch.float32)
    zero = s32 == 0
    # Dividing by the stored (float16) scale itself: the levels are chosen for the scale the
    # kernels multiply by, and a float16 reciprocal could overflow for tiny groups.
    q = torch.round(groups / torch.where(zero, torch.ones_like(s32), s32)[..., None]).clamp_(-8, 7)
    q = torch.where(zero[..., None], torch.zeros_like(q), q).to(torch.int8).reshape(out, k)
    return pack_int4(q), scales.contiguous()
