"""The int8 block token embedding operator, edgeshare::embedding_qb8w.

`torch.ops.edgeshare.embedding_qb8w(weight, scales, indices)` gathers rows of an int8 table in
blocks of 32 (scheme qb8w, exir/quantize.py) and writes each value as float32 q * its block's scale:

    weight:  int8 [n, d] (d a multiple of 32)
    scales:  float16 [n, d / 32]
    indices: int64 or int32, any shape
    returns  float32 [..., d]

Only the looked-up rows are dequantized. The runtime runs it as the portable kernel of the same
name (runtime/kernels/portable/shape.cc). exir/embedding_qc8w.py's `quantize_embeddings` rewrites
a foundation table to it, tied to the lm_head or not, over the same "<key>.qb8w" and
"<key>.qb8w.scales" entries the delegate stores for an int8 fully connected over that weight.
"""

import torch
from edgeshare.exir.quantize import gather_qb8w

__all__ = ["OPERATOR", "embedding_qb8w"]

OPERATOR = "edgeshare::embedding_qb8w"


@torch.library.custom_op(OPERATOR, mutates_args=())
def embedding_qb8w(weight: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The eager reference (exir/quantize.py's gather_qb8w)."""
    return gather_qb8w(weight, scales, indices)


@embedding_qb8w.register_fake
def _(weight, scales, indices):  # noqa: ANN001, ANN202
    return scales.new_empty((*indices.shape, weight.shape[1]), dtype=torch.float32)
