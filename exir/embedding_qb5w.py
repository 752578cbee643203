"""The 5-bit block token embedding operator, edgeshare::embedding_qb5w.

`torch.ops.edgeshare.embedding_qb5w(weight, scales, indices)` gathers rows of a 5-bit table in
blocks of 32 (scheme qb5w, exir/_quantizers.py) and writes each value as float32 q * its block's
scale:

    weight:  uint8 [n, d * 5 / 8] (exir/_quantizers.py's pack_int5; d a multiple of 32)
    scales:  float16 [n, d / 32]
    indices: int64 or int32, any shape
    returns  float32 [..., d]

Only the looked-up rows are dequantized. The runtime runs it as the portable kernel of the same
name (runtime/kernels/portable/shape.cc). exir/embedding_qc8w.py's `quantize_embeddings` rewrites an
untied foundation table to it, over the same "<key>.qb5w" and "<key>.qb5w.scales" entries the
delegate stores for a 5-bit fully connected over that weight.
"""

import torch
from edgeshare.exir.quantize import gather_qb5w

__all__ = ["OPERATOR", "embedding_qb5w"]

OPERATOR = "edgeshare::embedding_qb5w"


@torch.library.custom_op(OPERATOR, mutates_args=())
def embedding_qb5w(weight: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The eager reference (exir/quantize.py's gather_qb5w)."""
    return gather_qb5w(weight, scales, indices)


@embedding_qb5w.register_fake
def _(weight, scales, indices):  # noqa: ANN001, ANN202
    return scales.new_empty((*indices.shape, weight.shape[1] * 8 // 5), dtype=torch.float32)
