"""A causal LM that runs a batch of sequences in one pass, each in its own cache slot and on its own adapter.

BatchedCausalLM(model, BatchShape(...)) wraps a bare transformers causal LM (no PEFT): every Linear an
adapter may adapt gets a table of adapter slots beside its foundation weight, and the KV cache holds
one slot per sequence. Its forward is the "forward_batch" method of a batch export:

    forward(input_ids [1, N], positions [N], slots [N], adapters [N], logit_rows [M]) -> [1, M, vocab]

Row i of the step is token input_ids[0, i] of the sequence in cache slot slots[i], at position
positions[i] of that sequence, on adapter slot adapters[i] (-1: the bare foundation). The rows of one
sequence in a step (a prefill chunk) follow each other in position order; a decode row is one row.
The foundation's Linear layers run once over all N rows; each adapted Linear adds each row's low-rank
product with its own adapter (edgeshare::lora_bgmv); attention reads each row's own slot
(edgeshare::batched_attention). The logits of rows logit_rows come back (the last row of each
sequence that samples this step).

The adapter tables are parameters of the wrapper: per adapted Linear `lora_a` [adapter_slots, rank,
in] and `lora_b` [adapter_slots, rank, out] (LoRA's B transposed, edgeshare::lora_bgmv's layout),
zeros until an adapter is put in a slot. An adapter of a smaller rank fills the first rows of its
slot; its LoRA scale is folded into lora_b. int8 tables
(table_dtype torch.int8) hold each factor row quantized on its own (quantize_qc8w) with its scale in
`lora_a_scales` [adapter_slots, rank] and `lora_b_scales` [adapter_slots, out] (edgeshare::lora_bgmv_q8). In an exported
program they are open data bound at run time (the engine owns them), never part of the foundation.

    batched = BatchedCausalLM(base_model, BatchShape(slots=4, max_seq_len=128, adapter_slots=8,
                                                     rank=16, targets=lora_targets([peft_a, peft_b])))
    batched.put_adapter(0, lora_weights(peft_a))
    logits = batched(ids, positions, slots, adapters, logit_rows)
"""

import dataclasses
import functools
import threading
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import torch
from edgeshare.exir._quantizers import quantize_qc8w
from edgeshare.exir.attention import check_attention_call
from edgeshare.exir.batched_ops import batch_rows, batched_attention, lora_bgmv, lora_bgmv_q8
from edgeshare.exir.errors import UnsupportedModelError
from edgeshare.exir.hf_cache import buffer_layer_class, cache_classes, kv_cache_shape
from edgeshare.exir.lora import shared_copy
from torch import nn

__all__ = [
    "BATCH_METHOD",
    "BatchShape",
    "BatchedCausalLM",
    "BatchedLoraLinear",
    "LoraWeights",
    "TABLE_DTYPES",
    "batch_example_inputs",
    "lora_targets",
    "lora_weights",
]

BATCH_METHOD = "forward_batch"
ATTENTION_IMPLEMENTATION = "edgeshare_batched"
# The adapter tables' element types by the name batch.json and --adapter-dtype give them.
TABLE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "int8": torch.int8}


@dataclasses.dataclass(frozen=True)
class BatchShape:
    """What one batch program holds.

    Attributes:
      slots: sequences generating at once (KV-cache slots).
      max_seq_len: positions per sequence (prompt plus generated tokens).
      adapter_slots: adapters resident at once.
      rank: the largest LoRA rank an adapter slot takes.
      targets: the full names of the Linear layers adapters may adapt ("model.layers.0.self_attn.q_proj").
      max_rows: the most rows (tokens) one step runs (prefill chunks plus decode rows).
      table_dtype: the adapter tables' element type, torch.float32, torch.float16 (half the bytes)
        or torch.int8 (a quarter, plus a float32 scale per factor row); each row's product still
        accumulates in float32.
    """

    slots: int
    max_seq_len: int
    adapter_slots: int
    rank: int
    targets: Tuple[str, ...]
    max_rows: int = 64
    table_dtype: torch.dtype = torch.float32

    def __post_init__(self) -> None:
        for name in ("slots", "max_seq_len", "adapter_slots", "rank", "max_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BatchShape.{name} must be a positive int, got {value!r}")
        if not self.targets:
            raise ValueError("BatchShape.targets is empty: no Linear layer would take an adapter")
        if self.table_dtype not in TABLE_DTYPES.values():
            raise ValueError(f"adapter tables of {self.table_dtype} are not supported (float32, float16 or int8)")


@dataclasses.dataclass(frozen=True)
class LoraWeights:
    """One adapter's low-rank factors per adapted Linear: name -> (A [r, in], B [out, r] with the
    LoRA scale folded in)."""

    layers: Mapping[str, Tuple[torch.Tensor, torch.Tensor]]

    @property
    def rank(self) -> int:  # noqa: D102
        return max((a.shape[0] for a, _ in self.layers.values()), default=0)


def _peft_layers(model: nn.Module) -> Iterable[Tuple[str, nn.Module]]:
    """(base-model name, LoRA layer) of every PEFT LoRA layer of model."""
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and hasattr(module, "base_layer") and len(module.lora_A) > 0:
            # PEFT names: base_model.model.<name of the layer in the bare model>
            yield name.removeprefix("base_model.model."), module


def lora_weights(peft_model: nn.Module, adapter: Optional[str] = None) -> LoraWeights:
    """One PEFT adapter's factors, in the bare model's names, with the scale folded into B.

    Raises:
      UnsupportedModelError: a LoRA layer of a kind the batch cannot run (not a plain Linear, a
        weight stored transposed, a LoRA bias or DoRA), naming it.
    """
    layers: Dict[str, Tuple[torch.Tensor, torch.Tensor]] = {}
    for name, module in _peft_layers(peft_model):
        key = adapter or next(iter(module.lora_A.keys()))
        if key not in module.lora_A:
            continue
        if not isinstance(module.base_layer, nn.Linear) or getattr(module, "fan_in_fan_out", False):
            raise UnsupportedModelError(f"{name}: a batch runs LoRA on Linear layers only")
        if getattr(module, "use_dora", {}).get(key, False) or module.lora_B[key].bias is not None:
            raise UnsupportedModelError(f"{name}: a batch runs plain LoRA (no DoRA, no LoRA bias)")
        a = module.lora_A[key].weight.detach().float()
        b = module.lora_B[key].weight.detach().float() * float(module.scaling[key])
        layers[name] = (a, b)
    return LoraWeights(layers)


def lora_targets(adapters: Iterable[LoraWeights]) -> Tuple[str, ...]:
    """The union of the Linear layers the adapters adapt, sorted."""
    return tuple(sorted({name for adapter in adapters for name in adapter.layers}))


class _Step(threading.local):
    adapters: Optional[torch.Tensor] = None
    slots: Optional[torch.Tensor] = None
    positions: Optional[torch.Tensor] = None
    max_seq_len: int = 0


_STEP = _Step()


class BatchedLoraLinear(nn.Module):
    """A foundation Linear plus each row's low-rank product with its adapter slot's factors."""

    def __init__(self, base: nn.Linear, adapter_slots: int, rank: int, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.base = base
        a = torch.zeros(adapter_slots, rank, base.in_features, dtype=dtype)
        b = torch.zeros(adapter_slots, rank, base.out_features, dtype=dtype)
        self.lora_a = nn.Parameter(a, requires_grad=False)
        self.lora_b = nn.Parameter(b, requires_grad=False)
        self.quantized = dtype == torch.int8
        if self.quantized:
            self.lora_a_scales = nn.Parameter(torch.zeros(adapter_slots, rank), requires_grad=False)
            self.lora_b_scales = nn.Parameter(torch.zeros(adapter_slots, base.out_features), requires_grad=False)

    def put(self, slot: int, a: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> None:
        """Writes one adapter's factors (A [r, in], B [out, r], float) into `slot`, B transposed, zeros
        past rank r (None: zeros); int8 tables quantize each row of A and of B on its own."""
        with torch.no_grad():
            self.lora_a[slot].zero_()
            self.lora_b[slot].zero_()
            if self.quantized:
                self.lora_a_scales[slot].zero_()
                self.lora_b_scales[slot].zero_()
            if a is None or b is None:
                return
            if self.quantized:
                qa, sa = quantize_qc8w(a.float().contiguous())
                qb, sb = quantize_qc8w(b.float().contiguous())
                self.lora_a[slot, : a.shape[0]] = qa
                self.lora_a_scales[slot, : a.shape[0]] = sa
                self.lora_b[slot, : b.shape[1]] = qb.t()
                self.lora_b_scales[slot] = sb
            else:
                self.lora_a[slot, : a.shape[0]] = a
                self.lora_b[slot, : b.shape[1]] = b.t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        adapters = _STEP.adapters
        if adapters is None:
            raise UnsupportedModelError("BatchedLoraLinear runs only inside BatchedCausalLM's forward")
        if self.quantized:
            low_rank = lora_bgmv_q8(x, self.lora_a, self.lora_a_scales, self.lora_b, self.lora_b_scales, adapters)
        else:
            low_rank = lora_bgmv(x, self.lora_a, self.lora_b, adapters)
        return self.base(x) + low_rank


def _attention(
    module: nn.Module,
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
    name = type(module).__name__
    if _STEP.slots is None:
        raise UnsupportedModelError(f"{name}: attention '{ATTENTION_IMPLEMENTATION}' runs only in a batched step")
    check_attention_call(module, sliding_window, kwargs, "the batch method")
    scale = float(scaling) if scaling is not None else float(query.shape[-1]) ** -0.5
    out = batched_attention(
        query,
        key,
        value,
        _STEP.slots,
        _STEP.positions,
        _STEP.max_seq_len,
        scale,
        float(softcap or 0.0),
        int(sliding_window or 0),
    )
    return out, None


@functools.lru_cache(maxsize=None)
def _register_attention() -> None:
    from transformers import AttentionInterface  # noqa: PLC0415 (slow import)

    AttentionInterface.register(ATTENTION_IMPLEMENTATION, _attention)


@functools.lru_cache(maxsize=None)
def _layer_class() -> type:
    class _SlotLayer(buffer_layer_class()):  # type: ignore[misc, valid-type]
        """One layer of the slotted cache: [kv_heads, slots * max_seq_len, head_dim] keys and values,
        the owner's buffers; a step writes row slot * max_seq_len + position of each new token."""

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            rows = self._owner.cache_rows
            self.keys.index_copy_(1, rows, key_states[0].to(self.keys.dtype))
            self.values.index_copy_(1, rows, value_states[0].to(self.values.dtype))
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return 0

    return _SlotLayer


class BatchedCausalLM(nn.Module):
    """A bare causal LM with adapter tables on its targeted Linear layers and a slotted KV cache.

    Args:
      model: a transformers causal LM without PEFT layers; it is not modified (the wrapper holds a
        copy sharing its weights).
      shape: slots, positions, adapter slots, rank and the adapted layers.
      kv_dtype: the cache's element type: None for float32, or torch.float16.

    Raises:
      UnsupportedModelError: a target is not a Linear of the model, the model holds PEFT layers, or
        its config needs another cache kind (hf_cache.kv_cache_shape).
    """

    def __init__(self, model: nn.Module, shape: BatchShape, kv_dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        config = getattr(model, "config", None)
        if config is None or hasattr(model, "peft_config"):
            raise UnsupportedModelError("BatchedCausalLM wraps a bare transformers causal LM (no PEFT model)")
        self.shape = shape
        cache = kv_cache_shape(config, shape.max_seq_len)
        self.model = shared_copy(model)
        modules = dict(self.model.named_modules())
        for target in shape.targets:
            linear = modules.get(target)
            if not isinstance(linear, nn.Linear):
                raise UnsupportedModelError(f"adapter target '{target}' is not a Linear layer of the model")
            parent_name, _, child = target.rpartition(".")
            setattr(
                modules[parent_name] if parent_name else self.model,
                child,
                BatchedLoraLinear(linear, shape.adapter_slots, shape.rank, shape.table_dtype),
            )
        dtype = kv_dtype or torch.float32
        if dtype not in (torch.float32, torch.float16):
            raise UnsupportedModelError(f"a KV cache of {dtype} is not supported (float32 or float16)")
        size = (cache.kv_heads, shape.slots * shape.max_seq_len, cache.head_dim)
        for i in range(cache.layers):
            self.register_buffer(f"key_cache_{i}", torch.zeros(size, dtype=dtype))
            self.register_buffer(f"value_cache_{i}", torch.zeros(size, dtype=dtype))
        cache_class, _ = cache_classes()
        self._cache = cache_class(layers=[_layer_class()(self, i) for i in range(cache.layers)])
        self.cache_rows = torch.zeros(0, dtype=torch.long)

    @property
    def max_seq_len(self) -> int:
        """Positions per sequence (what the cache layers report as their length)."""
        return self.shape.max_seq_len

    def adapted(self) -> Dict[str, BatchedLoraLinear]:
        """The adapted layers by target name."""
        return {name: module for name, module in self.model.named_modules() if isinstance(module, BatchedLoraLinear)}

    def put_adapter(self, slot: int, weights: LoraWeights) -> None:
        """Writes an adapter into adapter slot `slot` (layers it does not adapt get zeros).

        Raises:
          ValueError: the slot is out of range, the rank is above the shape's, or the adapter adapts
            a layer that is not a target or whose factors do not fit it.
        """
        if not 0 <= slot < self.shape.adapter_slots:
            raise ValueError(f"adapter slot {slot} is outside 0..{self.shape.adapter_slots - 1}")
        if weights.rank > self.shape.rank:
            raise ValueError(f"the adapter's rank {weights.rank} is above the batch's {self.shape.rank}")
        layers = self.adapted()
        unknown = sorted(set(weights.layers) - set(layers))
        if unknown:
            raise ValueError(f"the adapter adapts {unknown[0]}, which is not a target of the batch")
        for name, (a, b) in weights.layers.items():
            module = layers[name]
            if a.shape[1] != module.lora_a.shape[2] or b.shape[0] != module.lora_b.shape[2]:
                raise ValueError(f"{name}: the adapter's factors {tuple(a.shape)}, {tuple(b.shape)} do not fit")
        for name, module in layers.items():
            module.put(slot, *weights.layers.get(name, (None, None)))

    def reset(self) -> None:
        """Zeroes the cache."""
        with torch.no_grad():
            for buffer in self.buffers(recurse=False):
                buffer.zero_()

    def forward(  # noqa: D102
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        adapters: torch.Tensor,
        logit_rows: torch.Tensor,
    ) -> torch.Tensor:
        shape = self.shape
        self.cache_rows = batch_rows(slots, positions, adapters, shape.slots, shape.max_seq_len, shape.adapter_slots)
        _register_attention()
        config = self.model.config
        outer = config._attn_implementation
        config._attn_implementation = ATTENTION_IMPLEMENTATION
        _STEP.adapters, _STEP.slots, _STEP.positions = adapters, slots, positions
        _STEP.max_seq_len = self.shape.max_seq_len
        try:
            return self.model(
                input_ids=input_ids,
                past_key_values=self._cache,
                cache_position=positions,
                position_ids=positions.unsqueeze(0),
                use_cache=True,
                logits_to_keep=logit_rows,
            ).logits
        finally:
            config._attn_implementation = outer
            _STEP.adapters = _STEP.slots = _STEP.positions = None


def batch_example_inputs(vocab: int, shape: BatchShape) -> Tuple[torch.Tensor, ...]:
    """Example inputs of forward_batch: two sequences in slots 0 and 1 (or one), on no adapter and slot 0."""
    rows = min(shape.max_rows, 4)
    ids = torch.randint(0, vocab, (1, rows), generator=torch.Generator().manual_seed(0))
    slots = torch.tensor([min(1, shape.slots - 1) if i >= rows // 2 else 0 for i in range(rows)], dtype=torch.long)
    positions = torch.tensor([i % max(1, rows // 2) for i in range(rows)], dtype=torch.long)
    adapters = torch.tensor([-1 if i < rows // 2 else 0 for i in range(rows)], dtype=torch.long)
    logit_rows = torch.tensor([rows // 2 - 1, rows - 1] if rows > 1 else [0], dtype=torch.long)
    return ids, positions, slots, adapters, logit_rows


def batch_dynamic_shapes(shape: BatchShape) -> Dict[str, Any]:
    """forward_batch's dynamic dims: N rows in 1..max_rows, M logit rows in 1..max_rows."""
    rows = torch.export.Dim("N", min=1, max=shape.max_rows)
    kept = torch.export.Dim("M", min=1, max=shape.max_rows)
    return {
        "input_ids": {1: rows},
        "positions": {0: rows},
        "slots": {0: rows},
        "adapters": {0: rows},
        "logit_rows": {0: kept},
    }
