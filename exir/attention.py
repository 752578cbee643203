"""Attention over a KV cache that reads only the positions filled so far: the cached_attention operator.

`torch.ops.edgeshare.cached_attention(q, k_cache, v_cache, start_pos, scale, softcap, window)` is the
attention of T new query rows at positions start_pos..start_pos+T-1 over a cache of max_seq_len
positions, of which only the first start_pos+T are read. The causal mask is implied by the
positions (row i sees keys 0..start_pos+i, and with a window > 0 only the last `window` of them),
so no mask tensor is built, and grouped-query heads index their key/value head directly instead
of repeating the cache. The runtime runs it as one kernel call (runtime/kernels/portable's
"edgeshare::cached_attention") whose cost follows start_pos+T, not the bound.

    q:        [1, heads, T, head_dim]              float
    k_cache:  [1, kv_heads, max_seq_len, head_dim] float (heads a multiple of kv_heads)
    v_cache:  like k_cache
    start_pos: int64, 0-d
    scale:    the factor of q.k (head_dim ** -0.5 for most models)
    softcap:  > 0: scores become softcap * tanh(score / softcap) (Gemma 2); 0: none
    window:   > 0: row i sees only keys after start_pos + i - window (sliding window); 0: all
    returns   [1, T, heads, head_dim], the layout transformers' attention functions return

The eager implementation below is the reference the exported model runs in torch (tests compare it
with transformers' own attention). `attention_function()` is the transformers attention interface
that routes a CachedCausalLM's layers to the operator; hf_cache installs it only while a cached
forward runs, so the cache-free "forward" keeps transformers' own attention.
"""

import threading
from typing import Any, Dict, Optional, Tuple

import torch
from edgeshare.exir.errors import UnsupportedModelError

__all__ = [
    "ATTENTION_IMPLEMENTATION",
    "OPERATOR",
    "cached_attention",
    "cached_step",
    "check_attention_call",
    "register_attention",
]

OPERATOR = "edgeshare::cached_attention"
ATTENTION_IMPLEMENTATION = "edgeshare_cached"


@torch.library.custom_op(OPERATOR, mutates_args=())
def cached_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start_pos: torch.Tensor,
    scale: float,
    softcap: float,
    window: int,
) -> torch.Tensor:
    """The eager reference: softmax(q.k * scale, causal within the window) . v over filled positions."""
    _, heads, t, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    start = int(start_pos)
    filled = start + t
    groups = heads // kv_heads
    k = k_cache[:, :, :filled].to(q.dtype).repeat_interleave(groups, dim=1)
    v = v_cache[:, :, :filled].to(q.dtype).repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    rows = torch.arange(t).view(t, 1) + start
    cols = torch.arange(filled).view(1, filled)
    visible = cols <= rows
    if window > 0:
        visible = visible & (cols > rows - window)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v).transpose(1, 2).contiguous()


@cached_attention.register_fake
def _(q, k_cache, v_cache, start_pos, scale, softcap, window):  # noqa: ANN001, ANN202
    _, heads, t, head_dim = q.shape
    return q.new_empty((1, t, heads, head_dim))


class _Current(threading.local):
    start_pos: Optional[torch.Tensor] = None


_CURRENT = _Current()


class cached_step:  # noqa: N801 (used as a context manager, like torch.no_grad)
    """While active on this thread, transformers layers configured with ATTENTION_IMPLEMENTATION
    attend through cached_attention with this start position."""

    def __init__(self, start_pos: torch.Tensor) -> None:
        self._start_pos = start_pos
        self._outer: Optional[torch.Tensor] = None

    def __enter__(self) -> "cached_step":
        self._outer = _CURRENT.start_pos
        _CURRENT.start_pos = self._start_pos
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.start_pos = self._outer


def config_window(config: Any, layer_idx: Optional[int]) -> Optional[int]:
    """The sliding window the config gives layer `layer_idx`, or None for full attention."""
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types and layer_idx is not None and 0 <= layer_idx < len(layer_types):
        return window if layer_types[layer_idx] == "sliding_attention" else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return window


def check_attention_call(
    module: torch.nn.Module, sliding_window: Optional[int], kwargs: Dict[str, Any], method: str
) -> None:
    """Refuses an attention call the cached operators cannot run: attention sinks, or a layer whose
    config slides a window the call does not give (the operators build the window into their mask,
    so such a layer would silently attend to everything).

    Raises:
      UnsupportedModelError: naming the layer and `method` ("the KV-cache method").
    """
    name = type(module).__name__
    if kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None:
        raise UnsupportedModelError(f"{name}: attention sinks are not supported by {method}")
    config = getattr(module, "config", None)
    layer = getattr(module, "layer_idx", None)
    expected = config_window(config, layer) if config is not None else None
    if expected is not None and (sliding_window or None) != expected:
        raise UnsupportedModelError(
            f"{name} (layer {layer}): the config slides a window of {expected} positions but the "
            f"attention call gives {sliding_window}; {method} cannot place its mask"
        )


def _attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    softcap: Optional[float] = None,
    **kwargs: Any,
) -> Tuple[torch.Tensor, None]:
    start_pos = _CURRENT.start_pos
    name = type(module).__name__
    if start_pos is None:
        raise UnsupportedModelError(
            f"{name}: attention '{ATTENTION_IMPLEMENTATION}' runs only inside a cached forward"
        )
    check_attention_call(module, sliding_window, kwargs, "the KV-cache method")
    if query.shape[0] != 1:
        raise UnsupportedModelError(f"{name}: the KV-cache method runs batch 1, got {query.shape[0]}")
    if query.shape[1] % key.shape[1]:
        raise UnsupportedModelError(
            f"{name}: {query.shape[1]} query heads are not a multiple of {key.shape[1]} key/value heads"
        )
    scale = float(scaling) if scaling is not None else float(query.shape[-1]) ** -0.5
    out = torch.ops.edgeshare.cached_attention(
        query,
        key,
        value,
        start_pos,
        scale,
        float(softcap or 0.0),
        int(sliding_window or 0),
    )
    return out, None


_REGISTERED = False


def register_attention() -> None:
    """Registers ATTENTION_IMPLEMENTATION with transformers (once). No mask function is registered
    for it, so transformers builds no mask: the operator implies it."""
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface  # noqa: PLC0415 (slow import)

    AttentionInterface.register(ATTENTION_IMPLEMENTATION, _attention)
    _REGISTERED = True
