"""Weight-only int8 quantization of a foundation (scheme "qc8w") and its eager reference.

qc8w: int8 per output row, symmetric, round to nearest even (torch.round), scale = max|w_row| / 127
in float32 (a zero row has scale 0 and zero bytes). It is a pure function of the float weight's
values, never of names or adapters, so foundation.ptd is byte-identical across exports of one
foundation. The weight and its scales are named-data entries of their own:
"<key>.qc8w" (int8 [out, in]) and "<key>.qc8w.scales" (float32 [out]), each with its digest.

At run time the XNNPACK delegate quantizes each activation row to int8 on its own (symmetric,
scale = max|x_row| / 127, x * (127 / max|x_row|) clamped to +-127 and rounded to nearest even),
accumulates the integer dot exactly and applies one float epilogue:
y = (x_scale * w_scale) * float(acc) + bias. `qc8w_linear` is that computation in torch, and
`int8_reference` swaps a model's foundation linears for it, and its token embeddings for
`gather_qc8w` (the int8 rows written as q * scale, the runtime's edgeshare::embedding_qc8w): the
eager model the runtime's outputs are compared with.
"""

from typing import Callable, Optional, Tuple

import torch
from torch import nn

__all__ = [
    "QC8W_SCALES_SUFFIX",
    "QC8W_SCHEME",
    "QC8W_SUFFIX",
    "QUANTIZE_SCHEMES",
    "dequantize_qc8w",
    "gather_qc8w",
    "int8_reference",
    "qc8w_linear",
    "quantize_activation_rows",
    "quantize_qc8w",
]

QC8W_SCHEME = "int8"
QUANTIZE_SCHEMES: Tuple[str, ...] = ("none", QC8W_SCHEME)
# "<key>.qc8w" cannot be another weight's key: "<key>" is a tensor, so no module is called
# "<key>" and no parameter "<key>.qc8w" exists.
QC8W_SUFFIX = ".qc8w"
QC8W_SCALES_SUFFIX = ".qc8w.scales"


def quantize_qc8w(weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantizes a float [out, in] weight to int8 per output row.

    Args:
      weight: a finite float32 tensor of rank 2.

    Returns:
      (int8 [out, in], float32 scales [out]), contiguous.

    Raises:
      ValueError: the weight is not a finite float32 matrix.
    """
    if weight.dtype != torch.float32 or weight.dim() != 2:
        raise ValueError(f"quantize_qc8w: takes a float32 matrix, got {weight.dtype} of shape {tuple(weight.shape)}")
    w = weight.detach()
    if not bool(torch.isfinite(w).all()):
        raise ValueError("quantize_qc8w: the weight has a NaN or an infinity")
    scales = (w.abs().amax(dim=1) / 127.0).to(torch.float32)
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(w / safe[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scales.contiguous()


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


def quantize_activation_rows(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The delegate's run-time quantization of activations, one row (last dim) at a time.

    Args:
      x: float32 [..., k].

    Returns:
      (int8 values [..., k], float32 scales [...]): scale = max|row| / 127, values
      round_half_even(clamp(x * (127 / max|row|), -127, 127)) (0 for an all-zero row).
    """
    amax = x.abs().amax(dim=-1)
    scales = amax / 127.0
    inv = torch.where(amax > 0, 127.0 / torch.where(amax > 0, amax, torch.ones_like(amax)), torch.zeros_like(amax))
    q = torch.round((x * inv[..., None]).clamp(-127.0, 127.0)).to(torch.int8)
    return q, scales


def qc8w_linear(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The int8 fully connected as the delegate computes it, in torch (bit for bit its floats).

    Args:
      x: float32 [..., in].
      q: int8 weight [out, in].
      scales: float32 [out].
      bias: float32 [out] or None.

    Returns:
      float32 [..., out].
    """
    qx, xs = quantize_activation_rows(x)
    # Exact integer sums: float64 holds every int32 sum of int8 products.
    acc = (qx.to(torch.float64) @ q.to(torch.float64).t()).to(torch.float32)
    y = (xs[..., None] * scales) * acc
    return y + bias if bias is not None else y


class _Int8Linear(nn.Module):
    """A Linear run as the delegate runs an int8 foundation linear."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        q, scales = quantize_qc8w(linear.weight.detach().to(torch.float32))
        self.register_buffer("q", q)
        self.register_buffer("scales", scales)
        self.bias_ = None if linear.bias is None else linear.bias.detach()
        self.in_features = linear.in_features
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return qc8w_linear(x, self.q, self.scales, self.bias_)


class _Int8Embedding(nn.Module):
    """An Embedding run as the runtime runs an int8 foundation table."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        q, scales = quantize_qc8w(embedding.weight.detach().to(torch.float32))
        self.register_buffer("q", q)
        self.register_buffer("scales", scales)
        self.num_embeddings = embedding.num_embeddings
        self.embedding_dim = embedding.embedding_dim

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return gather_qc8w(self.q, self.scales, indices)


def _is_adapter_linear(name: str) -> bool:
    parts = name.split(".")
    return any(p.startswith("lora_") or p in ("lora_a", "lora_b") for p in parts)


def int8_reference(model: nn.Module, is_foundation: Optional[Callable[[str], bool]] = None) -> nn.Module:
    """Swaps every foundation nn.Linear and nn.Embedding of `model`, in place, for its int8
    computation.

    Args:
      model: the model (a foundation, or a foundation with LoRA adapters).
      is_foundation: name -> whether that module is the foundation's; by default every one
        whose path has no "lora_" component (PEFT's lora_A/lora_B, edgeshare's lora_a/lora_b).

    Returns:
      The same model.
    """
    keep = is_foundation or (lambda name: not _is_adapter_linear(name))
    targets = [
        (n, m) for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Embedding)) and n and keep(n)
    ]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, _Int8Linear(module) if isinstance(module, nn.Linear) else _Int8Embedding(module))
    return model
