"""The portable kernels against torch eager through the real C++ runtime (//tools:run): each tiny
model is exported with NO partitioner, so every op is a kernel call, and its outputs must match
torch within 1e-4 on the shapes a transformer uses ([T, d], [B, H, T, Dh])."""

import dataclasses
import inspect
import os
import tempfile
import zlib
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from edgeshare.exir import UnsupportedModelError, to_edge
from edgeshare.exir._serialize import deserialize_pte
from edgeshare.schema import program_generated as fb
from edgeshare.testing.run_binary import run_programs
from torch import nn

TOLERANCE = 1e-4
T, D = 4, 64  # tokens, model width
MAX_LEN, SHORT_LEN = 16, 2  # a dynamic token dim's bound, and the second length it runs at
B, H, DH = 2, 4, 16  # batch, heads, head width

Fn = Callable[..., Any]


class _Module(nn.Module):
    """fn(module, *inputs) over a few parameters: fc (D -> D, bias), fc_nb (no bias), ln, ln_plain
    (no affine), emb (a [10, D] table), idx (an int64 buffer), w and b (raw matrices)."""

    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.fn = fn
        g = torch.Generator().manual_seed(11)
        self.fc = nn.Linear(D, D)
        self.fc_nb = nn.Linear(D, 3 * D, bias=False)
        self.ln = nn.LayerNorm(D)
        self.ln_plain = nn.LayerNorm(D, elementwise_affine=False)
        self.emb = nn.Embedding(10, D)
        self.w = nn.Parameter(torch.randn(D, 2 * D, generator=g) * 0.2)
        self.b = nn.Parameter(torch.randn(2 * D, generator=g))
        self.register_buffer("idx", torch.tensor([[1, 3, 9], [0, 0, 7]]))
        with torch.no_grad():
            for p in (*self.fc.parameters(), self.fc_nb.weight, *self.ln.parameters(), self.emb.weight):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, *xs: torch.Tensor) -> Any:  # noqa: D102
        return self.fn(self, *xs)


@dataclasses.dataclass(frozen=True)
class Case:
    """One tiny model.

    Attributes:
      name: the test id.
      fn: fn(module, *inputs) -> tensor(s).
      shapes: input shapes.
      kernels: operators that must appear as kernel calls ("aten::bmm", "aten::add.Tensor").
      positive: indices of float inputs drawn from [0.5, 2) instead of [-2, 2).
      ints: index -> exclusive upper bound, for integer inputs.
      int_dtype: the dtype of integer inputs.
      dynamic: input 0's dim 0 is exported as dynamic (up to MAX_LEN) and the program also runs
        with that dim shrunk to SHORT_LEN, against torch at both lengths.
      needs: what the exporter must support for the case: "lists" (a Tensor[] or Tensor?[]
        argument), "to_copy" (a dtype conversion, which traces with _assert_tensor_metadata
        nodes the exporter must drop) or "" (nothing new). See _exporter_supports.
    """

    name: str
    fn: Fn
    shapes: Tuple[Tuple[int, ...], ...]
    kernels: FrozenSet[str]
    positive: Tuple[int, ...] = ()
    ints: Tuple[Tuple[int, int], ...] = ()
    int_dtype: torch.dtype = torch.int64
    dynamic: bool = False
    needs: str = ""


def _c(name: str, fn: Fn, shapes: Sequence[Tuple[int, ...]], kernels: Sequence[str], **kw: Any) -> Case:
    return Case(name, fn, tuple(tuple(s) for s in shapes), frozenset(kernels), **kw)


TD = (T, D)
BHTD = (B, H, T, DH)


def _f(mask: torch.Tensor) -> torch.Tensor:
    """A bool tensor as 1.0 / 0.0 (tools/run reads and writes no bool arrays); where.self, not
    _to_copy, so the case needs nothing new from the exporter."""
    return torch.where(mask, 1.0, 0.0)


def _attention(m: _Module, x: torch.Tensor) -> torch.Tensor:
    """x [B, T, D] -> [B, T, D]: fused qkv projection, heads, scaled softmax attention, output."""
    q, k, v = m.fc_nb(x).reshape(B, T, 3, H, DH).permute(2, 0, 3, 1, 4).unbind(0)
    att = torch.softmax(q @ k.transpose(-1, -2) * DH**-0.5, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, D)
    return m.fc(y)


CASES: List[Case] = [
    # linear algebra
    _c("linear_bias", lambda m, x: m.fc(x), [TD], ["aten::linear"]),
    _c("linear_no_bias", lambda m, x: m.fc_nb(x), [TD], ["aten::linear"]),
    _c("linear_3d", lambda m, x: m.fc(x), [(B, T, D)], ["aten::linear"]),
    _c("linear_1d", lambda m, x: m.fc(x), [(D,)], ["aten::linear"]),
    _c("addmm", lambda m, x: torch.addmm(m.b, x, m.w), [TD], ["aten::addmm"]),
    _c("addmm_beta_alpha", lambda m, x: torch.addmm(m.b, x, m.w, beta=0.5, alpha=-2.0), [TD], ["aten::addmm"]),
    _c("mm", lambda m, x: torch.mm(x, m.w), [TD], ["aten::mm"]),
    _c("bmm", lambda m, a, b: torch.bmm(a, b), [(B * H, T, DH), (B * H, DH, T)], ["aten::bmm"]),
    _c("matmul_2d", lambda m, x, y: x @ y, [TD, (D, T)], ["aten::mm"]),
    _c("matmul_3d_2d", lambda m, x: x @ m.w, [(B, T, D)], ["aten::mm", "aten::view"]),
    _c("matmul_4d_2d", lambda m, x: x @ m.w[:DH], [BHTD], ["aten::mm"]),
    _c("matmul_scores", lambda m, q, k: q @ k.transpose(-1, -2), [BHTD, BHTD], ["aten::bmm", "aten::expand"]),
    _c("matmul_values", lambda m, a, v: a @ v, [(B, H, T, T), BHTD], ["aten::bmm"]),
    _c("matmul_broadcast_batch", lambda m, a, v: a @ v, [(H, T, T), (B, H, T, DH)], ["aten::bmm"]),
    _c("matmul_matrix_vector", lambda m, x, v: x @ v, [(B, T, D), (D,)], ["aten::sum.dim_IntList"]),
    _c("matmul_vector_matrix", lambda m, v, x: v @ x, [(D,), (B, D, T)], ["aten::sum.dim_IntList"]),
    # elementwise, broadcasting and scalars
    _c("add_mask", lambda m, s, mask: s + mask, [(B, H, T, T), (T, T)], ["aten::add.Tensor"]),
    _c("add_alpha", lambda m, x, y: torch.add(x, y, alpha=0.5), [TD, (D,)], ["aten::add.Tensor"]),
    _c("sub_bcast", lambda m, x, y: x - y, [(B, 1, T, 1), (H, 1, DH)], ["aten::sub.Tensor"]),
    _c("sub_alpha", lambda m, x, y: torch.sub(x, y, alpha=3), [TD, TD], ["aten::sub.Tensor"]),
    _c("mul_bcast", lambda m, x, y: x * y, [(B, 1, D), (T, 1)], ["aten::mul.Tensor"]),
    _c("div_bcast", lambda m, x, y: x / y, [BHTD, (H, 1, 1)], ["aten::div.Tensor"], positive=(1,)),
    _c("add_scalar", lambda m, x: x + 2.5, [TD], ["aten::add.Tensor"]),
    _c("sub_scalar", lambda m, x: x - 1, [TD], ["aten::sub.Tensor"]),
    _c("mul_scalar", lambda m, x: x * -3, [TD], ["aten::mul.Tensor"]),
    _c("div_scalar", lambda m, x: x / 8.0, [TD], ["aten::div.Tensor"]),
    _c("scalar_minus_tensor", lambda m, x: 2.0 - x, [TD], ["aten::sub.Tensor"]),
    _c("rsub", lambda m, x: torch.rsub(x, 3.0), [TD], ["aten::sub.Tensor"]),
    _c("rsub_alpha", lambda m, x: torch.rsub(x, 3.0, alpha=2.0), [TD], ["aten::sub.Tensor"]),
    _c("rsub_tensor", lambda m, x, y: torch.rsub(x, y, alpha=2), [TD, (D,)], ["aten::sub.Tensor"]),
    _c("scalar_over_tensor", lambda m, x: 3.0 / x, [TD], ["aten::reciprocal"], positive=(0,)),
    _c("rank0", lambda m, x, y: x * y + 1.0, [(), (D,)], ["aten::mul.Tensor", "aten::add.Tensor"]),
    _c("add_Scalar", lambda m, x: torch.ops.aten.add.Scalar(x, 1.5), [TD], ["aten::add.Scalar"]),
    _c("mul_Scalar", lambda m, x: torch.ops.aten.mul.Scalar(x, 0.5), [TD], ["aten::mul.Scalar"]),
    # activations
    _c("relu", lambda m, x: torch.relu(x), [TD], ["aten::relu"]),
    _c("relu_keeps_nan", lambda m, x: torch.relu(torch.sqrt(x)), [TD], ["aten::relu", "aten::sqrt"]),
    _c("gelu", lambda m, x: F.gelu(x), [TD], ["aten::gelu"]),
    _c("gelu_tanh", lambda m, x: F.gelu(x, approximate="tanh"), [TD], ["aten::gelu"]),
    _c("silu", lambda m, x: F.silu(x), [TD], ["aten::sigmoid", "aten::mul.Tensor"]),
    _c("sigmoid", lambda m, x: torch.sigmoid(x), [TD], ["aten::sigmoid"]),
    _c("tanh", lambda m, x: torch.tanh(x), [TD], ["aten::tanh"]),
    # softmax and normalisation
    _c("softmax_last", lambda m, x: torch.softmax(x, dim=-1), [(B, H, T, T)], ["aten::_softmax"]),
    _c("softmax_dim0", lambda m, x: torch.softmax(x, dim=0), [(B, H, T, T)], ["aten::_softmax"]),
    _c("softmax_dim1", lambda m, x: torch.softmax(x, dim=1), [BHTD], ["aten::_softmax"]),
    _c("softmax_dim2", lambda m, x: torch.softmax(x, dim=2), [BHTD], ["aten::_softmax"]),
    _c("log_softmax_last", lambda m, x: torch.log_softmax(x, dim=-1), [TD], ["aten::_log_softmax"]),
    _c("log_softmax_dim1", lambda m, x: torch.log_softmax(x, dim=1), [BHTD], ["aten::_log_softmax"]),
    _c("layer_norm_affine", lambda m, x: m.ln(x), [TD], ["aten::native_layer_norm"]),
    _c("layer_norm_affine_3d", lambda m, x: m.ln(x), [(B, T, D)], ["aten::native_layer_norm"]),
    _c("layer_norm_plain", lambda m, x: m.ln_plain(x), [(B, T, D)], ["aten::native_layer_norm"]),
    _c("layer_norm_eps", lambda m, x: F.layer_norm(x * 1e-3, (D,), eps=1e-2), [TD], ["aten::native_layer_norm"]),
    _c("layer_norm_two_dims", lambda m, x: F.layer_norm(x, (T, DH)), [BHTD], ["aten::native_layer_norm"]),
    # shapes
    _c("view", lambda m, x: x.view(T, H, DH), [TD], ["aten::view"]),
    _c("reshape_heads", lambda m, x: x.reshape(B, T, H, DH), [(B, T, D)], ["aten::view"]),
    _c("permute_heads", lambda m, x: x.permute(0, 2, 1, 3), [(B, T, H, DH)], ["aten::permute"]),
    _c("permute_contiguous", lambda m, x: x.permute(3, 1, 0, 2).contiguous(), [BHTD], ["aten::permute"]),
    _c("transpose_last", lambda m, x: x.transpose(-1, -2), [BHTD], ["aten::permute"]),
    _c("transpose_1_2", lambda m, x: x.transpose(1, 2), [BHTD], ["aten::permute"]),
    _c("t", lambda m, x: x.t(), [TD], ["aten::permute"]),
    _c("expand", lambda m, x: x.expand(B, H, T, DH), [(1, H, 1, DH)], ["aten::expand"]),
    _c("expand_new_dims", lambda m, x: x.expand(B, T, DH), [(DH,)], ["aten::expand"]),
    _c("clone", lambda m, x: (x * 2).clone(), [TD], ["aten::clone"]),
    _c("unsqueeze", lambda m, x: x.unsqueeze(1), [TD], ["aten::unsqueeze"]),
    _c("unsqueeze_last", lambda m, x: x.unsqueeze(-1), [TD], ["aten::unsqueeze"]),
    _c("squeeze_dim", lambda m, x: x.squeeze(1), [(T, 1, D)], ["aten::squeeze.dims"]),
    _c("squeeze_all", lambda m, x: x.squeeze(), [(1, T, 1, D)], ["aten::squeeze.dims"]),
    _c("slice", lambda m, x: x[1:3], [TD], ["aten::slice.Tensor"]),
    _c("slice_step", lambda m, x: x[:, 1::3], [TD], ["aten::slice.Tensor"]),
    _c("slice_negative", lambda m, x: x[..., -5:-1], [BHTD], ["aten::slice.Tensor"]),
    _c("select", lambda m, x: x[:, 2], [BHTD], ["aten::select.int"]),
    _c("select_negative", lambda m, x: x[..., -1], [BHTD], ["aten::select.int"]),
    _c("split_qkv", lambda m, x: [t * 1.5 for t in m.fc_nb(x).split(D, dim=-1)], [TD], ["aten::split_with_sizes"]),
    _c("split_uneven", lambda m, x: x.split([1, 3, 4], dim=1), [(B, 8, T)], ["aten::split_with_sizes"]),
    _c("chunk", lambda m, x: [c - 1 for c in x.chunk(2, dim=0)], [BHTD], ["aten::split_with_sizes"]),
    # embedding
    _c("embedding_input", lambda m, i: m.emb(i), [(B, T)], ["aten::embedding"], ints=((0, 10),)),
    _c("embedding_input_1d", lambda m, i: m.emb(i), [(T,)], ["aten::embedding"], ints=((0, 10),)),
    _c(
        "embedding_input_int32",
        lambda m, i: m.emb(i),
        [(B, T)],
        ["aten::embedding"],
        ints=((0, 10),),
        int_dtype=torch.int32,
    ),
    _c("embedding_buffer", lambda m, x: m.emb(m.idx) + x, [(D,)], ["aten::embedding"]),
    _c(
        "embedding_constant",
        lambda m, x: F.embedding(torch.tensor([4, 2, 2, 0]), m.emb.weight) * x,
        [TD],
        ["aten::embedding"],
    ),
    # int64 and bool arithmetic (positions, masks) with torch's type promotion
    _c(
        "add_long",
        lambda m, i, j: i + j * 3,
        [(T,), (B, 1)],
        ["aten::add.Tensor", "aten::mul.Tensor"],
        ints=((0, 9), (1, 9)),
    ),
    _c("sub_long", lambda m, i, j: i - j, [(T,), (T,)], ["aten::sub.Tensor"], ints=((0, 9), (1, 9))),
    _c("long_times_float", lambda m, i: i * 0.5, [(T,)], ["aten::mul.Tensor"], ints=((0, 9),)),
    _c("long_plus_float_tensor", lambda m, i, x: i + x, [(T, 1), TD], ["aten::add.Tensor"], ints=((0, 9),)),
    _c("long_div", lambda m, i: i / 4, [(T,)], ["aten::div.Tensor"], ints=((0, 9),)),
    _c("neg_long", lambda m, i: -i, [(T,)], ["aten::neg"], ints=((0, 9),)),
    _c("bool_times_float", lambda m, x, y: (x > 0) * y, [TD, TD], ["aten::gt.Scalar", "aten::mul.Tensor"]),
    _c("bool_times_bool", lambda m, x, y: _f((x > 0) * (y > 0)), [TD, TD], ["aten::mul.Tensor"]),
    _c("bool_plus_long", lambda m, x, i: (x > 0) + i, [(T,), (T,)], ["aten::add.Tensor"], ints=((1, 9),)),
    # comparisons (.Scalar and .Tensor, broadcasting) and masks
    _c("eq_scalar_long", lambda m, i: _f(i == 3), [(B, T)], ["aten::eq.Scalar", "aten::where.self"], ints=((0, 5),)),
    _c("ne_scalar_long", lambda m, i: _f(i != 0), [(B, T)], ["aten::ne.Scalar"], ints=((0, 3),)),
    _c("eq_tensor_long", lambda m, i, j: _f(i == j), [(T, 1), (T,)], ["aten::eq.Tensor"], ints=((0, 3), (1, 3))),
    _c("lt_tensor", lambda m, x, y: _f(x < y), [TD, (D,)], ["aten::lt.Tensor"]),
    _c(
        "le_tensor_causal",
        lambda m, i, j: _f(j[None, :] <= i[:, None]),
        [(T,), (T,)],
        ["aten::le.Tensor"],
        ints=((0, 4), (1, 4)),
    ),
    _c("gt_tensor", lambda m, x, y: _f(x > y), [(B, 1, D), (T, 1)], ["aten::gt.Tensor"]),
    _c("ge_scalar", lambda m, x: _f(x >= 0.25), [TD], ["aten::ge.Scalar"]),
    _c("lt_scalar", lambda m, x: _f(x < -1), [TD], ["aten::lt.Scalar"]),
    _c("le_scalar_long", lambda m, i: _f(i <= 2), [(T,)], ["aten::le.Scalar"], ints=((0, 5),)),
    _c("gt_long_vs_float", lambda m, i, x: _f(i > x), [(T, 1), TD], ["aten::gt.Tensor"], ints=((0, 3),)),
    _c("bitwise_and", lambda m, x, y: _f((x > 0) & (y < 0.5)), [TD, TD], ["aten::bitwise_and.Tensor"]),
    _c("bitwise_or", lambda m, x, y: _f((x > 0) | (y < 0.5)), [TD, (D,)], ["aten::bitwise_or.Tensor"]),
    _c("bitwise_and_long", lambda m, i, j: i & j, [(T,), (T,)], ["aten::bitwise_and.Tensor"], ints=((0, 16), (1, 16))),
    _c("logical_not", lambda m, x: _f(torch.logical_not(x > 0)), [TD], ["aten::logical_not"]),
    _c("logical_not_long", lambda m, i: _f(torch.logical_not(i)), [(T,)], ["aten::logical_not"], ints=((0, 2),)),
    _c("any_dim", lambda m, x: _f((x > 1.5).any(dim=-1)), [(B, T, D)], ["aten::any.dim"]),
    _c("any_dim_keepdim", lambda m, x: _f((x > 1.9).any(dim=1, keepdim=True)), [(B, T, D)], ["aten::any.dim"]),
    _c("any_all", lambda m, x: _f((x > 1.99).any()), [TD], ["aten::any"]),
    _c("where", lambda m, x, y: torch.where(x > 0, x, y), [TD, (D,)], ["aten::where.self"]),
    _c("where_scalar", lambda m, x: torch.where(x > 0, 0.0, float("-inf")), [TD], ["aten::where.self"]),
    _c("where_long", lambda m, x, i: torch.where(x > 0, i, -i), [(T,), (T,)], ["aten::where.self"], ints=((1, 9),)),
    _c(
        "masked_fill",
        lambda m, x, y: x.masked_fill(y > 0.5, float("-inf")),
        [(B, H, T, T), (T, T)],
        ["aten::where.self"],
    ),
    # sequences, creation from a tensor, dtype conversion
    _c("cumsum", lambda m, x: torch.cumsum(x, dim=1), [(B, T, D)], ["aten::cumsum"]),
    _c("cumsum_long", lambda m, i: torch.cumsum(i, dim=-1), [(B, T)], ["aten::cumsum"], ints=((0, 9),)),
    _c("cumsum_bool", lambda m, x: (x > 0).cumsum(-1), [TD], ["aten::cumsum"]),
    _c("full_like", lambda m, x: torch.full_like(x, 2.5) * x, [TD], ["aten::full_like"]),
    _c("full_like_long", lambda m, i: torch.full_like(i, 7) - i, [(T,)], ["aten::full_like"], ints=((0, 9),)),
    _c("ones_like_bool", lambda m, x: _f(torch.ones_like(x > 0)), [TD], ["aten::full_like"]),
    _c("to_long", lambda m, x: (x * 3).long(), [TD], ["aten::_to_copy"], needs="to_copy"),
    _c("to_float", lambda m, i: i.float() * 0.5, [(T,)], ["aten::_to_copy"], needs="to_copy", ints=((0, 9),)),
    _c("to_bool_and_back", lambda m, x: x.bool().float(), [TD], ["aten::_to_copy"], needs="to_copy"),
    _c("cos_sin", lambda m, x: torch.cos(x) * torch.sin(x), [TD], ["aten::cos", "aten::sin"]),
    _c(
        "rotary",
        lambda m, x, p: torch.cat((x * torch.cos(p), x * torch.sin(p)), dim=-1),
        [TD, TD],
        ["aten::cat"],
        needs="lists",
    ),
    # lists: cat and index.Tensor
    _c("cat", lambda m, x, y: torch.cat([x, y], dim=0), [TD, (1, D)], ["aten::cat"], needs="lists"),
    _c(
        "cat_last_long",
        lambda m, i, j: torch.cat([i, j], dim=-1),
        [(B, T), (B, 1)],
        ["aten::cat"],
        needs="lists",
        ints=((0, 9), (1, 9)),
    ),
    _c("cat_bool", lambda m, x, y: _f(torch.cat([x > 0, y > 0], dim=1)), [TD, TD], ["aten::cat"], needs="lists"),
    _c("index_rows", lambda m, x, i: x[i], [TD, (2, 3)], ["aten::index.Tensor"], needs="lists", ints=((1, T),)),
    _c("index_negative", lambda m, x, i: x[i - T], [TD, (3,)], ["aten::index.Tensor"], needs="lists", ints=((1, T),)),
    _c(
        "index_broadcast_pair",
        lambda m, x, i, j: x[i[:, None], j],
        [BHTD, (B,), (H,)],
        ["aten::index.Tensor"],
        needs="lists",
        ints=((1, B), (2, H)),
    ),
    _c(
        "index_after_none",
        lambda m, x, j: x[:, j],
        [BHTD, (2, 2)],
        ["aten::index.Tensor"],
        needs="lists",
        ints=((1, H),),
    ),
    _c(
        "index_apart",
        lambda m, x, i, j: x[i, :, j],
        [BHTD, (3,), (3,)],
        ["aten::index.Tensor"],
        needs="lists",
        ints=((1, B), (2, T)),
    ),
    _c("index_long", lambda m, i, j: i[j], [(T,), (2,)], ["aten::index.Tensor"], needs="lists", ints=((0, 9), (1, T))),
    _c(
        "index_bool_self",
        lambda m, x, j: _f((x > 0)[:, j]),
        [TD, (3,)],
        ["aten::index.Tensor"],
        needs="lists",
        ints=((1, D),),
    ),
    # a dynamic token dim: one program, two lengths
    _c("dynamic_linear_gelu", lambda m, x: F.gelu(m.fc(x)), [TD], ["aten::linear"], dynamic=True),
    _c(
        "dynamic_arange",
        lambda m, x: x + torch.arange(x.shape[0])[:, None],
        [TD],
        ["aten::arange.start_step"],
        dynamic=True,
    ),
    _c(
        "dynamic_causal_mask",
        lambda m, x: torch.softmax(x @ x.t() + torch.full((x.shape[0], x.shape[0]), float("-inf")).triu(1), -1),
        [TD],
        ["aten::_softmax"],
        dynamic=True,
    ),
    _c(
        "dynamic_positions",
        lambda m, i: m.emb(i) * (torch.arange(i.shape[0]) + 1)[:, None],
        [(T,)],
        ["aten::embedding", "aten::arange.start_step"],
        dynamic=True,
        ints=((0, 10),),
    ),
    _c(
        "dynamic_view_heads",
        lambda m, x: x.view(x.shape[0], H, DH).transpose(0, 1).reshape(H, -1),
        [TD],
        ["aten::view"],
        dynamic=True,
    ),
    _c("dynamic_cat", lambda m, x: torch.cat([x, x * 2], dim=0), [TD], ["aten::cat"], dynamic=True, needs="lists"),
    # a whole attention layer, a LayerNorm + GELU MLP
    _c("attention", _attention, [(B, T, D)], ["aten::linear", "aten::bmm", "aten::_softmax", "aten::permute"]),
    _c(
        "ln_gelu_mlp",
        lambda m, x: x + F.gelu(m.ln(x) @ m.w + m.b) @ m.w.t(),
        [(B, T, D)],
        ["aten::native_layer_norm", "aten::gelu", "aten::mm"],
    ),
]


@dataclasses.dataclass
class Outcome:
    """What one case produced."""

    kernel_names: List[str]
    num_delegate_calls: int
    got: List[np.ndarray]
    expected: List[torch.Tensor]


def _inputs(case: Case) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    ints = dict(case.ints)
    out = []
    for i, shape in enumerate(case.shapes):
        if i in ints:
            out.append(torch.randint(0, ints[i], shape, generator=g, dtype=case.int_dtype))
            continue
        u = torch.rand(shape, generator=g)
        out.append(0.5 + 1.5 * u if i in case.positive else 4.0 * u - 2.0)
    return out


def _export(module: nn.Module, inputs: Sequence[torch.Tensor], dynamic: bool) -> Any:
    """The program of module: input 0's dim 0 dynamic (1..MAX_LEN) when asked."""
    shapes = None
    if dynamic:
        length = torch.export.Dim("length", min=1, max=MAX_LEN)
        shapes = tuple({0: length} if i == 0 else None for i in range(len(inputs)))
        params = inspect.signature(module.forward).parameters.values()
        if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
            shapes = (shapes,)  # forward(*inputs): one spec for the whole tuple
    return to_edge(torch.export.export(module, tuple(inputs), dynamic_shapes=shapes)).to_executorch()


class _Probe(nn.Module):
    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fn(x)


# What a case may need beyond static shapes and single tensors, and a tiny program that has it.
_PROBES: Dict[str, Tuple[Fn, bool]] = {
    "lists": (lambda x: torch.cat([x, x]), False),
    "dynamic": (lambda x: x + 1, True),
    "to_copy": (lambda x: x.long(), False),
}


def _exporter_supports(feature: str, cache: Dict[str, Optional[str]]) -> Optional[str]:
    """None when //exir exports a probe program with `feature`, else the exporter's refusal.

    The kernels land before the exporter that emits tensor lists and dynamic dims; until then the
    cases needing them are skipped with the exporter's own message, and they run once it can.
    """
    if feature not in cache:
        fn, dynamic = _PROBES[feature]
        try:
            _export(_Probe(fn), [torch.zeros(3, 2)], dynamic)
            cache[feature] = None
        except UnsupportedModelError as e:
            cache[feature] = str(e)
    return cache[feature]


def _shrunk(inputs: List[torch.Tensor], case: Case) -> List[torch.Tensor]:
    """The inputs with input 0's dim 0 cut to SHORT_LEN."""
    return [x[:SHORT_LEN] if i == 0 else x for i, x in enumerate(inputs)]


def _run(case: Case, folder: str) -> Outcome:
    module = _Module(case.fn).eval()
    inputs = _inputs(case)
    et = _export(module, inputs, case.dynamic)
    paths = et.write_to_dir(os.path.join(folder, case.name), "m")
    (plan,) = deserialize_pte(et.buffer, paths[0]).program.executionPlans
    names, delegate_calls = [], 0
    for ins in plan.instructions:
        if ins.instrArgsType == fb.InstructionArguments.KernelCall:
            op = plan.operators[ins.instrArgs.opIndex]
            overload = op.overload.decode() if op.overload else ""
            names.append(op.name.decode() + (f".{overload}" if overload else ""))
        else:
            delegate_calls += 1
    got: List[np.ndarray] = []
    expected: List[torch.Tensor] = []
    for k, xs in enumerate([inputs, _shrunk(inputs, case)] if case.dynamic else [inputs]):
        work = os.path.join(os.path.dirname(paths[0]), f"run{k}")
        os.makedirs(work)
        run = run_programs([paths[0]], paths[1:], [x.numpy() for x in xs], work_dir=work)
        with torch.no_grad():
            want = module(*xs)
        expected += list(want) if isinstance(want, (tuple, list)) else [want]
        got += run.outputs["m.forward"]
    return Outcome(names, delegate_calls, got, expected)


def _shard(cases: List[Case]) -> List[Case]:
    """This Bazel test shard's share of cases (every case when not sharded)."""
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    index = int(os.environ.get("TEST_SHARD_INDEX", "0"))
    status = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status:
        open(status, "a").close()
    return [case for i, case in enumerate(cases) if i % total == index]


MY_CASES = _shard(CASES)


@pytest.fixture(scope="module")
def outcomes() -> Dict[str, Any]:
    """Exports and runs this shard's cases once (an exception is kept and re-raised by its test)."""
    folder = tempfile.mkdtemp(prefix="portable_torch_test_")
    results: Dict[str, Any] = {}
    support: Dict[str, Optional[str]] = {}
    for case in MY_CASES:
        refusal = None
        for feature in [case.needs] * bool(case.needs) + ["dynamic"] * case.dynamic:
            refusal = refusal or _exporter_supports(feature, support)
        if refusal is not None:
            results[case.name] = _Skip(f"the exporter cannot emit this yet: {refusal}")
            continue
        try:
            results[case.name] = _run(case, folder)
        except Exception as e:  # re-raised by the case's own test
            results[case.name] = e
    return results


@dataclasses.dataclass
class _Skip:
    reason: str


@pytest.mark.parametrize("case", MY_CASES, ids=lambda c: c.name)
def test_portable_kernels_match_torch(outcomes: Dict[str, Any], case: Case) -> None:
    outcome = outcomes[case.name]
    if isinstance(outcome, _Skip):
        pytest.skip(outcome.reason)
    if isinstance(outcome, Exception):
        raise outcome
    assert outcome.num_delegate_calls == 0
    assert outcome.kernel_names, case.name
    assert case.kernels <= set(outcome.kernel_names), (case.name, outcome.kernel_names)
    assert len(outcome.got) == len(outcome.expected)
    for got, want in zip(outcome.got, outcome.expected):
        assert got.shape == tuple(want.shape), (case.name, got.shape, tuple(want.shape))
        assert got.dtype == want.numpy().dtype, (case.name, got.dtype)
        np.testing.assert_allclose(got, want.numpy(), atol=TOLERANCE, rtol=TOLERANCE, err_msg=case.name)


class _ReusesInputBytes(nn.Module):
    """x is dead after the first op, so a planner may put later intermediates over it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = F.layer_norm(x, (8,))
        return torch.tanh(self.fc(torch.tanh(y) * 3)) + 1


def test_inputs_survive_repeated_execution(tmp_path: Any) -> None:
    # Regression: inputs were planned to die at their last use, so the intermediates of a
    # second execute() on the same inputs (tools/run --iterations) read overwritten bytes.
    module = _ReusesInputBytes().eval()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    paths = to_edge(torch.export.export(module, (x,))).to_executorch().write_to_dir(str(tmp_path), "m")
    with torch.no_grad():
        expected = module(x).numpy()
    for iterations in ("1", "3"):
        run = run_programs(paths[:1], inputs=[x.numpy()], extra_args=["--iterations", iterations])
        np.testing.assert_allclose(run.outputs["m.forward"][0], expected, atol=TOLERANCE, rtol=TOLERANCE)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
