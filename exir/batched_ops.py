"""The two operators of a batched step: attention per sequence over its cache slot, and LoRA per row.

A batched step runs N rows (tokens) of several sequences through one pass over the foundation. Each
row carries the cache slot of its sequence, its position in that sequence and the adapter slot it
runs on (or none). Two operators take what differs per row:

`torch.ops.edgeshare.batched_attention(q, k_cache, v_cache, slots, positions, max_seq_len, scale,
softcap, window)` attends each query row to the keys of its own slot, positions 0..position (and
only the last `window` of them with a window):

    q:           [1, heads, N, head_dim]                      float
    k_cache:     [kv_heads, slots * max_seq_len, head_dim]    float or half; slot s holds rows
                 s * max_seq_len .. s * max_seq_len + max_seq_len - 1 of every key/value head, so a
                 slot's keys of one head are contiguous and a step writes its new keys with one
                 index_put on dim 1 (row slot * max_seq_len + position)
    v_cache:     like k_cache
    slots:       int64 [N], the cache slot of each row's sequence
    positions:   int64 [N], each row's position in its sequence (< max_seq_len)
    returns      [1, N, heads, head_dim], the layout transformers' attention functions return

`torch.ops.edgeshare.lora_bgmv(x, a, b, adapters)` is each row's low-rank product with its own
adapter, out[i] = (x[i] @ a[adapters[i]].T) @ b[adapters[i]], zeros for a row whose adapter is -1:

    x:         [..., N, in]                 float
    a:         [adapter_slots, rank, in]    float or half (an adapter of a smaller rank has zero rows)
    b:         [adapter_slots, rank, out]   float or half: LoRA's B transposed, the LoRA scale
               alpha / r folded in (a decode row's second product is then rank whole-row
               multiply-adds, not an output's horizontal sum each)
    adapters:  int64 [N], an adapter slot or -1
    returns    [..., N, out]

`torch.ops.edgeshare.lora_bgmv_q8(x, a, a_scales, b, b_scales, adapters)` is the same over int8
factors with one float32 scale per factor row (quantize_qc8w's rule), each product scaled as a
whole, low[r] = a_scales[s, r] * (a[s, r] . x) and out[o] = b_scales[s, o] * (low . b[s, :, o]), as
the runtime's int8 adapters are (gemm_nt's q8 products):

    a:         int8 [adapter_slots, rank, in];   a_scales: float32 [adapter_slots, rank]
    b:         int8 [adapter_slots, rank, out];  b_scales: float32 [adapter_slots, out], one per
               output (B's row before the transpose)

`torch.ops.edgeshare.batch_rows(slots, positions, adapters, num_slots, max_seq_len, adapter_slots)`
checks every row's slot, position and adapter slot and returns its cache row (slot * max_seq_len +
position); a step calls it first, so a bad row fails the step before any cache is written.

Rows of one adapter that follow each other (a prefill chunk, or decode rows sorted by adapter) form
one product (SGMV); single rows are matrix-vector products (BGMV). The runtime's kernels
(runtime/kernels/portable: batched_attention.cc, lora_bgmv.cc) run both; the eager definitions below
are the reference they are tested against.
"""

from typing import Callable

import torch

__all__ = [
    "ATTENTION_OPERATOR",
    "BGMV_OPERATOR",
    "BGMV_Q8_OPERATOR",
    "ROWS_OPERATOR",
    "batch_rows",
    "batched_attention",
    "lora_bgmv",
    "lora_bgmv_q8",
]

ATTENTION_OPERATOR = "edgeshare::batched_attention"
BGMV_OPERATOR = "edgeshare::lora_bgmv"
BGMV_Q8_OPERATOR = "edgeshare::lora_bgmv_q8"
ROWS_OPERATOR = "edgeshare::batch_rows"


@torch.library.custom_op(ROWS_OPERATOR, mutates_args=())
def batch_rows(
    slots: torch.Tensor,
    positions: torch.Tensor,
    adapters: torch.Tensor,
    num_slots: int,
    max_seq_len: int,
    adapter_slots: int,
) -> torch.Tensor:
    """The cache row of each row of a step (slot * max_seq_len + position), after checking every
    row's slot, position and adapter slot: the first call of a step, so that a bad row fails it
    before anything is written to any sequence's cache."""
    for name, values, low, high in (
        ("slot", slots, 0, num_slots),
        ("position", positions, 0, max_seq_len),
        ("adapter slot", adapters, -1, adapter_slots),
    ):
        bad = ((values < low) | (values >= high)).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(f"row {i}'s {name} {int(values[i])} is outside {low}..{high - 1}")
    return slots * max_seq_len + positions


@batch_rows.register_fake
def _(slots, positions, adapters, num_slots, max_seq_len, adapter_slots):  # noqa: ANN001, ANN202
    return torch.empty_like(slots)


@torch.library.custom_op(ATTENTION_OPERATOR, mutates_args=())
def batched_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor,
    max_seq_len: int,
    scale: float,
    softcap: float,
    window: int,
) -> torch.Tensor:
    """The eager reference: per row, softmax(q.k * scale, causal within the window) . v of its slot."""
    _, heads, rows, head_dim = q.shape
    kv_heads = k_cache.shape[0]
    groups = heads // kv_heads
    out = q.new_empty((1, rows, heads, head_dim))
    for i in range(rows):
        slot, position = int(slots[i]), int(positions[i])
        begin = position + 1 - window if 0 < window <= position else 0
        first = slot * max_seq_len
        k = k_cache[:, first + begin : first + position + 1].to(q.dtype).repeat_interleave(groups, dim=0)
        v = v_cache[:, first + begin : first + position + 1].to(q.dtype).repeat_interleave(groups, dim=0)
        scores = torch.einsum("hd,hpd->hp", q[0, :, i], k) * scale
        if softcap > 0:
            scores = torch.tanh(scores / softcap) * softcap
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out[0, i] = torch.einsum("hp,hpd->hd", probs, v)
    return out


@batched_attention.register_fake
def _(q, k_cache, v_cache, slots, positions, max_seq_len, scale, softcap, window):  # noqa: ANN001, ANN202
    _, heads, rows, head_dim = q.shape
    return q.new_empty((1, rows, heads, head_dim))


@torch.library.custom_op(BGMV_OPERATOR, mutates_args=())
def lora_bgmv(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, adapters: torch.Tensor) -> torch.Tensor:
    """The eager reference: out[i] = (x[i] @ a[s].T) @ b[s] with s = adapters[i], zeros where s < 0."""
    return _per_row(x, adapters, b.shape[2], lambda xi, s: (xi @ a[s].to(x.dtype).t()) @ b[s].to(x.dtype))


def _per_row(
    x: torch.Tensor,
    adapters: torch.Tensor,
    out_features: int,
    product: Callable[[torch.Tensor, int], torch.Tensor],
) -> torch.Tensor:
    """x's rows [..., i, :] each through product(rows, adapters[i]), zeros where adapters[i] < 0."""
    rows = x.shape[-2]
    flat = x.reshape(-1, rows, x.shape[-1])
    out = x.new_zeros((flat.shape[0], rows, out_features))
    for i in range(rows):
        slot = int(adapters[i])
        if slot >= 0:
            out[:, i] = product(flat[:, i], slot)
    return out.reshape(*x.shape[:-1], out_features)


@lora_bgmv.register_fake
def _(x, a, b, adapters):  # noqa: ANN001, ANN202
    return x.new_empty((*x.shape[:-1], b.shape[2]))


@torch.library.custom_op(BGMV_Q8_OPERATOR, mutates_args=())
def lora_bgmv_q8(
    x: torch.Tensor,
    a: torch.Tensor,
    a_scales: torch.Tensor,
    b: torch.Tensor,
    b_scales: torch.Tensor,
    adapters: torch.Tensor,
) -> torch.Tensor:
    """The eager reference: out[i] = b_scales[s] * ((a_scales[s] * (x[i] @ a[s].T)) @ b[s]) with
    s = adapters[i], zeros where s < 0."""

    def product(xi: torch.Tensor, s: int) -> torch.Tensor:
        low = (xi @ a[s].to(x.dtype).t()) * a_scales[s].to(x.dtype)
        return (low @ b[s].to(x.dtype)) * b_scales[s].to(x.dtype)

    return _per_row(x, adapters, b.shape[2], product)


@lora_bgmv_q8.register_fake
def _(x, a, a_scales, b, b_scales, adapters):  # noqa: ANN001, ANN202
    return x.new_empty((*x.shape[:-1], b.shape[2]))
