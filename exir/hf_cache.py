"""A causal LM with its KV cache as module buffers: the stateful "forward_cached" of --hf-model exports.

CachedCausalLM(model, max_seq_len) takes int64 input_ids [1, T] and an int64 start position (0-d)
and returns the logits [1, 1, vocab] of position start+T-1 (all_logits=True: [1, T, vocab], every
new position), attending to every earlier position it was called with. The last position is all
generation needs, and a prompt's prefill then runs the lm_head on one row instead of T. The keys and values of each layer live in two registered buffers
[1, kv_heads, max_seq_len, head_dim] (zeros), written in place with index_copy_: torch.export
records them as BUFFER_MUTATION outputs (index_put) and the emitter makes them the method's state,
kept across executes by the runtime. A prompt is prefilled in one call (start 0), then each new
token is one T=1 call at the next position.

    from edgeshare.exir.hf_cache import CachedCausalLM, cached_example_inputs

    cached = CachedCausalLM(peft_model, max_seq_len=128)
    logits = cached(prompt_ids, torch.tensor(0))             # prefill
    logits = cached(next_id.view(1, 1), torch.tensor(len(prompt)))

transformers' own cache classes allocate their tensors lazily and keep them as plain attributes,
which torch.export cannot see as state; the cache here is a transformers Cache whose layers read the
wrapper's buffers. Attention runs as edgeshare::cached_attention (exir/attention.py): it reads only
the positions filled so far, with the causal mask and any sliding window implied by the positions,
so a call costs what the filled length costs, not the bound. Sliding-window layers keep every
position in the cache and let the window mask them. Layer kinds other than full and sliding
attention are refused (UnsupportedModelError, naming the model type and the layer kind).

The cache is float32 by default (exact), or float16 on request (half the memory; keys and values
are rounded to half as they are written).
"""

import dataclasses
import functools
from typing import Any, Dict, Optional, Tuple

import torch
from edgeshare.exir.attention import ATTENTION_IMPLEMENTATION, cached_step, register_attention
from edgeshare.exir.errors import UnsupportedModelError
from edgeshare.exir.lora import ExtraMethod
from torch import nn

__all__ = [
    "CACHED_METHOD",
    "CachedCausalLM",
    "KvCacheShape",
    "buffer_layer_class",
    "cached_dynamic_shapes",
    "cached_example_inputs",
    "kv_cache_method",
    "kv_cache_shape",
]

CACHED_METHOD = "forward_cached"

# The layer kinds a cache of max_seq_len positions serves (a window masks what it does not see).
_ATTENTION_LAYERS = ("full_attention", "sliding_attention")


@dataclasses.dataclass(frozen=True)
class KvCacheShape:
    """The cache a config needs: layers, and per layer [1, kv_heads, max_seq_len, head_dim] twice.

    Attributes:
      layers: the number of attention layers.
      kv_heads: key/value heads per layer (num_key_value_heads, else the attention heads).
      head_dim: the size of one head (config.head_dim, else hidden_size / heads).
    """

    layers: int
    kv_heads: int
    head_dim: int


def _config_int(config: Any, *names: str) -> Optional[int]:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def kv_cache_shape(config: Any, max_seq_len: int) -> KvCacheShape:
    """Reads the cache dimensions from a transformers config and refuses what a full cache cannot serve.

    GPT-2's n_layer / n_head / n_embd are read through the config's attribute map
    (num_hidden_layers, num_attention_heads, hidden_size).

    Args:
      config: the model's config.
      max_seq_len: the positions the cache holds.

    Returns:
      The cache shape.

    Raises:
      UnsupportedModelError: a dimension is missing, or a layer kind other than full or sliding
        attention (naming the model type).
    """
    model_type = getattr(config, "model_type", type(config).__name__)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        other = sorted({str(kind) for kind in layer_types if kind not in _ATTENTION_LAYERS})
        if other:
            raise UnsupportedModelError(
                f"model type '{model_type}' has {', '.join(other)} layers; the KV-cache method supports "
                f"{' and '.join(_ATTENTION_LAYERS)} layers only"
            )
    layers = _config_int(config, "num_hidden_layers")
    heads = _config_int(config, "num_attention_heads")
    hidden = _config_int(config, "hidden_size")
    if layers is None or heads is None:
        raise UnsupportedModelError(
            f"model type '{model_type}': its config has no num_hidden_layers / num_attention_heads"
        )
    kv_heads = _config_int(config, "num_key_value_heads") or heads
    head_dim = _config_int(config, "head_dim")
    if head_dim is None:
        if hidden is None or hidden % heads:
            raise UnsupportedModelError(f"model type '{model_type}': its config gives no head_dim")
        head_dim = hidden // heads
    return KvCacheShape(layers, kv_heads, head_dim)


def cache_classes() -> Tuple[type, type]:
    from transformers.cache_utils import Cache, CacheLayerMixin  # noqa: PLC0415 (slow import)

    return Cache, CacheLayerMixin


@functools.lru_cache(maxsize=None)
def buffer_layer_class() -> type:
    """The cache layer whose keys and values are its owner's buffers key_cache_<i> / value_cache_<i>
    (the owner has max_seq_len and step.positions / step.start_pos); a subclass changes update()
    and get_seq_length() for another layout."""
    _, mixin = cache_classes()

    class _BufferLayer(mixin):  # type: ignore[misc, valid-type]
        """One layer of the cache: its keys and values are the owner's buffers (read on each access,
        so that torch.export sees the buffers and functionalizes their mutation)."""

        is_compileable = True
        is_sliding = False

        def __init__(self, owner: "CachedCausalLM", index: int) -> None:
            super().__init__()
            self._owner = owner
            self._index = index
            self.is_initialized = True

        @property
        def keys(self) -> torch.Tensor:  # noqa: D102
            return getattr(self._owner, f"key_cache_{self._index}")

        @keys.setter
        def keys(self, value: Any) -> None:
            pass  # the mixin's __init__ and reset() assign; the buffers stay the owner's

        @property
        def values(self) -> torch.Tensor:  # noqa: D102
            return getattr(self._owner, f"value_cache_{self._index}")

        @values.setter
        def values(self, value: Any) -> None:
            pass

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            pass  # allocated by the owner

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if key_states.shape[1:2] + key_states.shape[3:] != self.keys.shape[1:2] + self.keys.shape[3:]:
                raise UnsupportedModelError(
                    f"layer {self._index}: the model's keys are {tuple(key_states.shape)} but the cache, "
                    f"read from its config, is {tuple(self.keys.shape)} ([1, kv_heads, positions, head_dim])"
                )
            positions = self._owner.step.positions
            self.keys.index_copy_(2, positions, key_states.to(self.keys.dtype))
            self.values.index_copy_(2, positions, value_states.to(self.values.dtype))
            return self.keys, self.values

        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> Tuple[int, int]:
            return self._owner.max_seq_len, 0  # the whole cache; the causal mask hides the future

        def get_seq_length(self) -> Any:
            return self._owner.step.start_pos

        def get_max_length(self) -> int:
            return self._owner.max_seq_len

        def get_max_cache_shape(self) -> int:
            return self._owner.max_seq_len

    return _BufferLayer


@dataclasses.dataclass
class _Step:
    """The positions of the current call, read by the cache layers (a plain object, not a tensor
    attribute of the module: torch.export would warn that a module attribute changed)."""

    positions: torch.Tensor
    start_pos: torch.Tensor


class CachedCausalLM(nn.Module):
    """A causal LM (or a PEFT model over one) with a KV cache of max_seq_len positions as buffers.

    Args:
      model: a transformers causal LM or a peft PeftModel wrapping one.
      max_seq_len: the positions the cache holds (prompt plus generated tokens).
      kv_dtype: the cache's element type: None for the model's (float32), or torch.float16.
      all_logits: return the logits of every new position ([1, T, vocab]) instead of the last
        one's ([1, 1, vocab], all generation needs: the lm_head then runs on one row, not T).
      own_attention: attend through edgeshare::cached_attention (False: transformers' own
        attention over the whole cache with its mask, for a runtime without the operator).

    Raises:
      UnsupportedModelError: the config needs a cache kind other than full attention (see
        kv_cache_shape).
    """

    def __init__(
        self,
        model: nn.Module,
        max_seq_len: int,
        kv_dtype: Optional[torch.dtype] = None,
        *,
        all_logits: bool = False,
        own_attention: bool = True,
    ) -> None:
        super().__init__()
        self.model = model
        self.max_seq_len = max_seq_len
        self.all_logits = all_logits
        self.own_attention = own_attention
        config = getattr(model, "config", None)
        if config is None:
            raise UnsupportedModelError(f"{type(model).__name__} has no config (not a transformers model?)")
        self.shape = kv_cache_shape(config, max_seq_len)
        dtype = kv_dtype or next(model.parameters()).dtype
        if dtype not in (torch.float32, torch.float16):
            raise UnsupportedModelError(f"a KV cache of {dtype} is not supported (float32 or float16)")
        size = (1, self.shape.kv_heads, max_seq_len, self.shape.head_dim)
        for i in range(self.shape.layers):
            self.register_buffer(f"key_cache_{i}", torch.zeros(size, dtype=dtype))
            self.register_buffer(f"value_cache_{i}", torch.zeros(size, dtype=dtype))
        cache, _ = cache_classes()
        layer = buffer_layer_class()
        self._cache = cache(layers=[layer(self, i) for i in range(self.shape.layers)])
        self.step = _Step(torch.zeros(0, dtype=torch.long), torch.zeros((), dtype=torch.long))

    def reset(self) -> None:
        """Zeroes the cache (the runtime's Method::reset_state)."""
        with torch.no_grad():
            for buffer in self.buffers(recurse=False):
                buffer.zero_()

    def forward(self, input_ids: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:  # noqa: D102
        positions = torch.arange(input_ids.shape[1], dtype=torch.long) + start_pos
        self.step = _Step(positions, start_pos)
        kwargs = dict(
            input_ids=input_ids,
            past_key_values=self._cache,
            cache_position=positions,
            position_ids=positions.unsqueeze(0),
            use_cache=True,
        )
        if not self.all_logits:
            kwargs["logits_to_keep"] = 1
        if not self.own_attention:
            return self.model(**kwargs).logits
        register_attention()
        config = self.model.config
        outer = config._attn_implementation
        config._attn_implementation = ATTENTION_IMPLEMENTATION
        try:
            with cached_step(start_pos):
                return self.model(**kwargs).logits
        finally:
            config._attn_implementation = outer


def cached_example_inputs(vocab: int, max_seq_len: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Seeded example inputs of CachedCausalLM: a few token ids and start position 0."""
    t = 1 if max_seq_len == 1 else max(2, min(max_seq_len, 7))
    ids = torch.randint(0, vocab, (1, t), generator=torch.Generator().manual_seed(0))
    return ids, torch.tensor(0, dtype=torch.long)


def cached_dynamic_shapes(max_seq_len: int) -> Optional[Dict[str, Any]]:
    """CachedCausalLM's dynamic_shapes: input_ids' T in 1..max_seq_len, start_pos a scalar."""
    if max_seq_len == 1:
        return None
    return {"input_ids": {1: torch.export.Dim("T", min=1, max=max_seq_len)}, "start_pos": None}


def _inner_model(module: nn.Module) -> nn.Module:
    """The causal LM a "forward" wrapper (CausalLMLogits) holds, or module itself."""
    inner = getattr(module, "model", None)
    return inner if isinstance(inner, nn.Module) and getattr(module, "config", None) is None else module


def kv_cache_method(
    base: nn.Module, max_seq_len: int, kv_dtype: Optional[torch.dtype] = None, *, all_logits: bool = False
) -> ExtraMethod:
    """export_lora's "forward_cached" of a Hugging Face export: CachedCausalLM over each program's model.

    Args:
      base: the bare model (its config is checked here, its vocabulary sizes the example).
      max_seq_len: the positions the cache holds.
      kv_dtype: the cache's element type (None: the model's; torch.float16 halves its memory).
      all_logits: the method returns every new position's logits ([1, T, vocab]: planned memory
        for max_seq_len rows, and the lm_head on every row of a prefill) instead of the last one's.

    Returns:
      The extra method; its wrap takes what "forward" exports (CausalLMLogits or the model).

    Raises:
      UnsupportedModelError: the config needs another cache kind (see kv_cache_shape), or the
        dtype is neither float32 nor float16.
    """
    kv_cache_shape(base.config, max_seq_len)
    if kv_dtype not in (None, torch.float32, torch.float16):
        raise UnsupportedModelError(f"a KV cache of {kv_dtype} is not supported (float32 or float16)")
    vocab = int(base.get_input_embeddings().weight.shape[0])
    return ExtraMethod(
        CACHED_METHOD,
        lambda module: CachedCausalLM(_inner_model(module), max_seq_len, kv_dtype, all_logits=all_logits),
        cached_example_inputs(vocab, max_seq_len),
        cached_dynamic_shapes(max_seq_len),
    )
