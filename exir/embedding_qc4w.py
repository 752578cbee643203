"""The int4 token embedding operator, edgeshare::embedding_qc4w.

`torch.ops.edgeshare.embedding_qc4w(weight, scales, indices)` gathers rows of an int4 table in
groups (scheme qc4w, exir/quantize.py) and writes each as float32 q * scale per group:

    weight:  uint8 [n, d / 2] (two signed 4-bit values a byte, exir/quantize.py's pack_int4)
    scales:  float16 [n, d / group]
    indices: int64 or int32, any shape
    returns  float32 [..., d]

Only the looked-up rows are dequantized. The runtime runs it as the portable kernel of the same
name (runtime/kernels/portable/shape.cc). exir/embedding_qc8w.py's `quantize_embeddings` rewrites
an untied foundation table to it, over the same "<key>.qc4w" and "<key>.qc4w.scales" entries the
delegate stores for an int4 fully connected over that weight.
"""

import torch
from edgeshare.exir.quantize import gather_qc4w

__all__ = ["OPERATOR", "embedding_qc4w"]

OPERATOR = "edgeshare::embedding_qc4w"


@torch.library.custom_op(OPERATOR, mutates_args=())
def embedding_qc4w(weight: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The eager reference (exir/quantize.py's gather_qc4w)."""
    return gather_qc4w(weight, scales, indices)


@embedding_qc4w.register_fake
def _(weight, scales, indices):  # noqa: ANN001, ANN202
    return scales.new_empty((*indices.shape, 2 * weight.shape[1]), dtype=torch.float32)
