"""Hugging Face inputs: a causal LM directory and PEFT LoRA adapter directories, exported for LoRA.

A model directory is what `save_pretrained` writes (config.json + model.safetensors, or shards
listed in model.safetensors.index.json); it is loaded with transformers' AutoModelForCausalLM
from local files only. An adapter directory is what PEFT's `save_pretrained` writes
(adapter_config.json + adapter_model.safetensors); it is loaded with peft onto a fresh copy of the
model (the base path it records is not used). Each program's method "forward" takes int64
input_ids [1, T] and returns the logits [1, T, vocab]; T is dynamic, 1..max_seq_len. Beside it,
"forward_cached" (exir/hf_cache.py) takes input_ids [1, T] and an int64 start position and keeps a
KV cache of max_seq_len positions as its state: the method text generation runs.

    from edgeshare.exir.hf import export_hf_lora

    result = export_hf_lora("tiny/model", {"chat": "tiny/chat", "code": "tiny/code"}, "out")
    # out/chat.pte, out/code.pte, out/foundation.pte (no adapter), out/foundation.ptd

Every directory or file problem is an HfInputError naming it, checked before anything is loaded;
a PEFT type other than LoRA is an UnsupportedAdapterError; an adapter that does not fit the model
(another hidden size, modules the model lacks) is an AdapterMismatchError naming the adapter.
"""

import dataclasses
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

import torch
from edgeshare.exir._pipeline import Lowerer, OutputFiles, SharedData, check_out_dir, export_method
from edgeshare.exir._quantizers import quantize_qc8w
from edgeshare.exir._serialize import with_foundation_digest, write_ptd
from edgeshare.exir.calibration import CALIBRATION_CTX, calibration_ids, check_calibration_file, importance_from_ids
from edgeshare.exir.data_policy import (
    DataPlacement,
    DataPolicy,
    FoundationDataPolicy,
    canonical_name,
    foundation_tensors,
)
from edgeshare.exir.errors import AdapterMismatchError, ExportError
from edgeshare.exir.export import DataFileEntry, ExecutorchBackendConfig, to_edge
from edgeshare.exir.export_options import OptionError
from edgeshare.exir.foundation_index import FoundationIndex
from edgeshare.exir.hf_batch import (
    BATCH_METHOD,
    TABLE_DTYPES,
    BatchedCausalLM,
    BatchShape,
    LoraWeights,
    batch_dynamic_shapes,
    batch_example_inputs,
    lora_targets,
    lora_weights,
)
from edgeshare.exir.hf_cache import kv_cache_method
from edgeshare.exir.lora import ExtraMethod, LoraExportResult, check_adapter_name, export_lora, shared_copy
from edgeshare.exir.named_data_store import NamedDataStore
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.peft_options import (
    check_lora_layers,
    check_lora_options,
    fold_dora,
    keep_foundation_bias,
    protect_foundation,
)
from edgeshare.exir.swappable import SwappableExportResult, export_swappable
from edgeshare.exir.tensor_layout import TensorLayout, digest_cache, tensor_digest, tensor_view
from torch import nn

__all__ = [
    "CausalLMLogits",
    "HfInputError",
    "UnsupportedAdapterError",
    "BatchExportResult",
    "export_hf_batch",
    "export_hf_lora",
    "export_hf_swappable",
    "load_hf_model",
    "load_peft_adapter",
    "tied_keys",
    "token_dynamic_shapes",
]

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
FOUNDATION = "foundation"
BATCH_PROGRAM = "batch"
BATCH_TABLES = "batch_tables"


class HfInputError(ExportError):
    """A model or adapter directory, or a file in it, is missing or unreadable (naming it)."""


class UnsupportedAdapterError(HfInputError):
    """A PEFT adapter of another type than LoRA (IA3, prefix tuning, ...), naming adapter and type."""


class CausalLMLogits(nn.Module):
    """A causal LM (or a PEFT model over one) as a function of token ids: the logits, no KV cache.

    Args:
      model: a transformers causal LM or a peft PeftModel wrapping one.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.model(input_ids=input_ids, use_cache=False).logits


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def _read_json(path: str, what: str) -> Dict[str, Any]:
    if not os.path.isfile(path):
        raise HfInputError(f"{what} has no {os.path.basename(path)} ({path} is missing)")
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HfInputError(f"{what}: {path} is not valid JSON ({_one_line(e)})") from e
    if not isinstance(value, dict):
        raise HfInputError(f"{what}: {path} holds a JSON {type(value).__name__}, not an object")
    return value


def _check_safetensors(path: str, what: str) -> None:
    """Reads the header of a safetensors file (which also checks it covers the whole file)."""
    import safetensors  # noqa: PLC0415 (only the HF path needs it)

    if not os.path.isfile(path):
        raise HfInputError(f"{what} has no {os.path.basename(path)} ({path} is missing)")
    try:
        with safetensors.safe_open(path, framework="pt") as f:
            f.keys()
    except Exception as e:  # safetensors raises its own SafetensorError (not exported) and OSError.
        raise HfInputError(f"{what}: {path} is not a valid safetensors file ({_one_line(e)})") from e


def _check_dir(path: str, what: str) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path, got {type(path).__name__}")
    if not os.path.isdir(path):
        raise HfInputError(f"{what} '{path}' does not exist or is not a directory")


def _weight_files(model_dir: str, what: str) -> List[str]:
    single = os.path.join(model_dir, WEIGHTS)
    index = os.path.join(model_dir, WEIGHTS_INDEX)
    if os.path.isfile(single) or not os.path.isfile(index):
        return [single]
    weight_map = _read_json(index, what).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise HfInputError(f"{what}: {index} has no weight_map")
    return [os.path.join(model_dir, name) for name in sorted(set(weight_map.values()))]


def load_hf_model(model_dir: str) -> nn.Module:
    """Loads a causal LM that `save_pretrained` wrote, offline, in float32 and eval mode.

    Args:
      model_dir: the directory (config.json + model.safetensors or sharded safetensors).

    Returns:
      The transformers model.

    Raises:
      HfInputError: the directory, its config.json or a safetensors file is missing or corrupt,
        transformers cannot build the model from it, the files lack weights the model has, or
        they hold weights the model does not use (naming them).
    """
    what = f"model directory '{model_dir}'"
    _check_dir(model_dir, "model directory")
    config = _read_json(os.path.join(model_dir, CONFIG), what)
    if not isinstance(config.get("model_type"), str):
        raise HfInputError(f"{what}: {os.path.join(model_dir, CONFIG)} has no model_type")
    for path in _weight_files(model_dir, what):
        _check_safetensors(path, what)
    import transformers  # noqa: PLC0415 (importing transformers takes seconds)

    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, local_files_only=True, dtype=torch.float32, output_loading_info=True
        )
    except Exception as e:  # transformers raises ValueError, OSError, KeyError...: keep its words.
        raise HfInputError(f"{what}: transformers cannot load it as a causal LM ({_one_line(e)})") from e
    # transformers fills missing or mismatched weights with random values, and drops weights the
    # config has no place for (a config with fewer layers than the checkpoint): never export those.
    for kind in ("missing_keys", "mismatched_keys", "unexpected_keys"):
        keys = sorted(str(k) for k in info.get(kind) or ())
        if keys:
            raise HfInputError(
                f"{what}: the safetensors files do not fit {type(model).__name__} "
                f"({kind.replace('_', ' ')}: {', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
            )
    return model.eval()


def _check_adapter_dir(name: str, adapter_dir: str) -> None:
    what = f"adapter '{name}' directory '{adapter_dir}'"
    _check_dir(adapter_dir, f"adapter '{name}' directory")
    config = _read_json(os.path.join(adapter_dir, ADAPTER_CONFIG), what)
    peft_type = config.get("peft_type")
    if peft_type != "LORA":
        raise UnsupportedAdapterError(
            f"adapter '{name}' ({os.path.join(adapter_dir, ADAPTER_CONFIG)}) is a PEFT {peft_type} "
            "adapter; only LoRA adapters (peft_type LORA) can be exported"
        )
    check_lora_options(name, os.path.join(adapter_dir, ADAPTER_CONFIG), config)
    _check_safetensors(os.path.join(adapter_dir, ADAPTER_WEIGHTS), what)


def load_peft_adapter(base: nn.Module, name: str, adapter_dir: str) -> nn.Module:
    """Loads a PEFT LoRA adapter onto a copy of base that shares base's weights (base is not modified).

    Args:
      base: the model load_hf_model returned.
      name: the adapter's name (for errors).
      adapter_dir: the directory PEFT's save_pretrained wrote.

    Returns:
      The PEFT model in eval mode.

    Raises:
      HfInputError: the directory or one of its files is missing or corrupt.
      UnsupportedAdapterError: the adapter is not a LoRA adapter.
      UnsupportedOptionError: it sets a LoRA option that cannot be exported (peft_options), naming it.
      AdapterMismatchError: its weights do not fit the model (shapes, or modules it lacks).
    """
    _check_adapter_dir(name, adapter_dir)
    import peft  # noqa: PLC0415
    import safetensors.torch  # noqa: PLC0415

    what = f"adapter '{name}' ({adapter_dir})"
    saved = safetensors.torch.load_file(os.path.join(adapter_dir, ADAPTER_WEIGHTS))
    adapted = shared_copy(base)
    protect_foundation(adapted, saved)
    try:
        model = peft.PeftModel.from_pretrained(adapted, adapter_dir, is_trainable=False)
    except RuntimeError as e:
        mismatch = [line.strip() for line in str(e).splitlines() if "size mismatch" in line]
        detail = mismatch[0] if mismatch else _one_line(e)
        raise AdapterMismatchError(f"{what} does not fit the model: {detail}") from e
    except ValueError as e:  # e.g. "Target modules {...} not found in the base model".
        raise AdapterMismatchError(f"{what} does not fit the model: {_one_line(e)}") from e
    except Exception as e:
        raise HfInputError(f"{what}: peft cannot load it ({_one_line(e)})") from e
    # PEFT only warns about adapter weights it did not use: an adapter for another model would
    # then export as if it had fewer layers adapted. Every weight of the file must be in the model.
    loaded = peft.get_peft_model_state_dict(model)
    unused = sorted(k for k in saved if k not in loaded or not torch.equal(loaded[k], saved[k].to(loaded[k].dtype)))
    if unused:
        raise AdapterMismatchError(
            f"{what} does not fit the model: {len(unused)} of its weights are not used by it "
            f"({', '.join(unused[:3])}{', ...' if len(unused) > 3 else ''})"
        )
    check_lora_layers(name, model)
    fold_dora(model)
    keep_foundation_bias(model, base)
    return model.eval()


def tied_keys(model: nn.Module) -> Set[str]:
    """The foundation keys that several of model's tensor names share: an lm_head tied to the
    embedding, or equal buffers (rotary inv_freq and its copy). FoundationDataPolicy stores each
    once, under the first name."""
    policy = FoundationDataPolicy(model)
    names: Dict[str, int] = {}
    for tensor in foundation_tensors(model).values():
        key = policy.foundation_key(tensor)
        names[key] = names.get(key, 0) + 1
    return {key for key, count in names.items() if count > 1}


def token_dynamic_shapes(max_seq_len: int) -> Optional[Dict[str, Dict[int, Any]]]:
    """The dynamic_shapes of CausalLMLogits: input_ids' token dim T in 1..max_seq_len.

    torch 2.13's export keeps min=1 (no 0/1 specialisation of a declared Dim): the program is
    right for T=1 (checked by hf_export_test). None for max_seq_len 1 (static T=1).
    """
    if max_seq_len == 1:
        return None
    return {"input_ids": {1: torch.export.Dim("T", min=1, max=max_seq_len)}}


def _check_max_seq_len(max_seq_len: int, model: nn.Module, model_dir: str) -> None:
    if not isinstance(max_seq_len, int) or isinstance(max_seq_len, bool) or max_seq_len < 1:
        raise ExportError(f"max_seq_len must be a positive int, got {max_seq_len!r}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and max_seq_len > limit:
        raise ExportError(
            f"max_seq_len {max_seq_len} exceeds the model's max_position_embeddings {limit} ({model_dir})"
        )


def export_hf_lora(
    model_dir: str,
    adapters: Mapping[str, str],
    out_dir: str,
    max_seq_len: int = 128,
    partitioner: Optional[Partitioner] = None,
    config: Optional[ExecutorchBackendConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
    kv_dtype: Optional[torch.dtype] = None,
    full_logits: bool = False,
    calibration: Optional[str] = None,
    foundation_index: Optional[FoundationIndex] = None,
) -> LoraExportResult:
    """Exports a Hugging Face causal LM with PEFT LoRA adapters: one program per adapter plus the bare
    foundation, all over one foundation.ptd.

    Writes out_dir/<name>.pte per adapter, out_dir/foundation.pte (no adapter) and
    out_dir/foundation.ptd. Each program has the stateless "forward" and the KV-cache method
    "forward_cached" (hf_cache.CachedCausalLM), sharing their weights. Foundation weights are
    recognised by identity and keyed by the bare model's parameter names (an lm_head tied to the
    embedding is stored once).

    Args:
      model_dir: the model directory (config.json + safetensors).
      adapters: adapter name (a file stem, not "foundation") -> its PEFT directory.
      out_dir: the folder to write (created if missing).
      max_seq_len: the largest T the programs accept.
      partitioner: the partitioner to delegate with (e.g. XnnpackPartitioner()), or None.
      config: serialization options.
      progress: called with one line per step (loading, export, lowering, writing).
      kv_dtype: forward_cached's KV cache element type: None (float32, exact) or torch.float16
        (half the memory).
      full_logits: forward_cached returns the logits of every new position ([1, T, vocab]) rather
        than the last one's ([1, 1, vocab], all generation needs).
      calibration: a UTF-8 text file, or None: the bare model is run over its first tokens and
        each foundation Linear input's mean square weighs the quantizer's scale search
        (exir/calibration.py; the partitioner's weighing(), which refuses a format that weighs
        none).
      foundation_index: if set, the index (exir/foundation_index.py) of a foundation.ptd an
        earlier export of this model with these options wrote: only the adapters' programs are
        written, byte for byte as an export of the model with them all would write them (neither
        foundation.pte nor foundation.ptd).

    Returns:
      What was written (result.foundation_program is out_dir/foundation.pte, or None with
      foundation_index).

    Raises:
      HfInputError, UnsupportedAdapterError, AdapterMismatchError: see load_hf_model and
        load_peft_adapter.
      ExportError: an adapter name is not a usable file stem, max_seq_len is out of range, or
        the export fails (UnsupportedModelError naming the model, also for a model whose
        attention a KV cache cannot serve, e.g. linear-attention layers).
      CalibrationError: the calibration text cannot be used; OptionError: calibration with a
        partitioner that cannot weigh it.
    """
    say = progress or (lambda line: None)
    check_out_dir(out_dir)
    _check_calibration(calibration, partitioner)
    inputs = _load_for_export("export_hf_lora", model_dir, adapters, max_seq_len, say, kv_dtype, full_logits)
    partitioner = _calibrated(partitioner, calibration, model_dir, inputs.base, say)
    return export_lora(
        CausalLMLogits(inputs.base),
        inputs.models,
        (inputs.example,),
        out_dir,
        partitioner,
        foundation_tag=FOUNDATION,
        config=config,
        # Keys from the bare model's own names ("lm_head.weight"), not the wrapper's.
        data_policy=FoundationDataPolicy(inputs.base, FOUNDATION),
        dynamic_shapes=token_dynamic_shapes(max_seq_len),
        foundation_program=FOUNDATION if foundation_index is None else None,
        progress=say,
        extra_methods=[inputs.cached],
        foundation_index=foundation_index,
    )


def export_hf_swappable(
    model_dir: str,
    adapters: Mapping[str, str],
    out_dir: str,
    max_seq_len: int = 128,
    partitioner: Optional[Partitioner] = None,
    config: Optional[ExecutorchBackendConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
    kv_dtype: Optional[torch.dtype] = None,
    full_logits: bool = False,
    calibration: Optional[str] = None,
) -> SwappableExportResult:
    """export_hf_lora's inputs, written for adapter swapping (exir.swappable.export_swappable):
    out_dir/lora.pte (forward and forward_cached) shared by every adapter of the first adapter's
    structure (PEFT target modules, rank, alpha), out_dir/<name>.ptd with each such adapter's
    weights, out_dir/<name>.pte for an adapter of another structure, and foundation.pte /
    foundation.ptd as export_hf_lora writes them.

    Raises:
      As export_hf_lora.
    """
    say = progress or (lambda line: None)
    check_out_dir(out_dir)
    if not adapters:
        raise ExportError("export_hf_swappable needs at least one adapter (export_hf_lora exports a bare model)")
    _check_calibration(calibration, partitioner)
    inputs = _load_for_export("export_hf_swappable", model_dir, adapters, max_seq_len, say, kv_dtype, full_logits)
    partitioner = _calibrated(partitioner, calibration, model_dir, inputs.base, say)
    return export_swappable(
        CausalLMLogits(inputs.base),
        inputs.models,
        (inputs.example,),
        out_dir,
        partitioner,
        foundation_policy=FoundationDataPolicy(inputs.base, FOUNDATION),
        dynamic_shapes=token_dynamic_shapes(max_seq_len),
        config=config,
        progress=say,
        extra_methods=[inputs.cached],
    )


@dataclasses.dataclass
class BatchExportResult:
    """What export_hf_batch wrote.

    Attributes:
      files: path -> size in bytes of every file written.
      foundation_path: foundation.ptd (as export_hf_lora writes it).
      foundation_program: foundation.pte (the bare model, as export_hf_lora writes it).
      batch_program: batch.pte, method "forward_batch" (exir/hf_batch.py).
      tables_path: batch_tables.ptd: the adapter tables, the adapters in slots 0.. in the given order.
      adapter_paths: adapter name -> <name>.ptd, its factors alone, for loading into any slot.
      manifest_path: batch.json: the batch's shape and which adapter is in which slot.
      shape: the batch's shape.
      fallbacks, gathered_formats: as SwappableExportResult's (the partitioner's format choices).
    """

    files: Dict[str, int]
    foundation_path: str
    foundation_program: str
    batch_program: str
    tables_path: str
    adapter_paths: Dict[str, str]
    manifest_path: str
    shape: BatchShape
    fallbacks: Dict[str, str] = dataclasses.field(default_factory=dict)
    gathered_formats: Dict[str, str] = dataclasses.field(default_factory=dict)


class _TablesPolicy(DataPolicy):
    """Foundation weights pinned in foundation.ptd; the adapter tables open in batch_tables.ptd."""

    def __init__(self, foundation: FoundationDataPolicy) -> None:
        self.foundation = foundation

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        key = self.foundation.foundation_key(tensor)
        if key is not None:
            return DataPlacement(key, self.foundation.foundation_tag)
        return DataPlacement(f"{BATCH_TABLES}/{canonical_name(name)}", BATCH_TABLES, open=True)


def export_hf_batch(
    model_dir: str,
    adapters: Mapping[str, str],
    out_dir: str,
    slots: int = 8,
    max_seq_len: int = 128,
    adapter_slots: Optional[int] = None,
    rank: Optional[int] = None,
    max_rows: int = 64,
    partitioner: Optional[Partitioner] = None,
    config: Optional[ExecutorchBackendConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
    kv_dtype: Optional[torch.dtype] = None,
    table_dtype: Optional[torch.dtype] = None,
) -> BatchExportResult:
    """Exports a Hugging Face causal LM for batches of sequences on mixed adapters (exir/hf_batch.py).

    Writes out_dir/foundation.pte and foundation.ptd as export_hf_lora writes them (so the batch
    shares the foundation with the per-adapter programs of the same options), out_dir/batch.pte
    with the method "forward_batch", out_dir/batch_tables.ptd (the adapter tables, the given
    adapters in slots 0, 1, ... in order, the other slots zero) and out_dir/batch.json.

    Args:
      model_dir: the model directory.
      adapters: adapter name -> its PEFT directory; their target modules, together, are the layers
        that take adapters.
      out_dir: the folder to write (created if missing).
      slots: sequences that generate at once (KV-cache slots).
      max_seq_len: positions per sequence.
      adapter_slots: adapters resident at once (None: as many as slots, at least the adapters given).
      rank: the largest LoRA rank a slot takes (None: the largest of the adapters given).
      max_rows: the most tokens one step runs.
      partitioner, config, progress, kv_dtype: as export_hf_lora's.
      table_dtype: the adapter tables' and adapter files' element type: None for float32,
        torch.float16 (half the bytes) or torch.int8 (each factor row quantized with its own float32
        scale); the products accumulate in float32.

    Returns:
      What was written.

    Raises:
      As export_hf_lora; ExportError also for no adapters, more adapters than adapter slots, a rank
      below an adapter's, or a shape that is not positive.
    """
    say = progress or (lambda line: None)
    check_out_dir(out_dir)
    if not adapters:
        raise ExportError("export_hf_batch needs at least one adapter (its modules are the layers adapters take)")
    for name in adapters:
        if name in (BATCH_PROGRAM, BATCH_TABLES):
            raise ExportError(f"adapter name '{name}' is a file stem of the batch export; choose another")
    if adapter_slots is not None and len(adapters) > adapter_slots:
        raise ExportError(f"{len(adapters)} adapters do not fit {adapter_slots} adapter slots")
    inputs = _load_for_export("export_hf_batch", model_dir, adapters, max_seq_len, say, kv_dtype)
    weights = [lora_weights(module.model) for module in inputs.models.values()]
    largest = max(w.rank for w in weights)
    if rank is not None and rank < largest:
        raise ExportError(f"--batch-rank {rank} is below the adapters' largest rank {largest}")
    try:
        shape = BatchShape(
            slots=slots,
            max_seq_len=max_seq_len,
            adapter_slots=adapter_slots if adapter_slots is not None else max(slots, len(adapters)),
            rank=rank if rank is not None else largest,
            targets=lora_targets(weights),
            max_rows=max_rows,
            table_dtype=table_dtype or torch.float32,
        )
    except ValueError as e:
        raise ExportError(str(e)) from None
    batched = BatchedCausalLM(inputs.base, shape, kv_dtype)
    for slot, adapter in enumerate(weights):
        batched.put_adapter(slot, adapter)
    vocab = int(inputs.base.get_input_embeddings().weight.shape[0])
    foundation_policy = FoundationDataPolicy(inputs.base, FOUNDATION)
    with digest_cache():
        lowerer = Lowerer(
            partitioner,
            config,
            (inputs.example,),
            token_dynamic_shapes(max_seq_len),
            [inputs.cached],
            say,
            FOUNDATION,
        )
        bare, _ = lowerer.lower(CausalLMLogits(inputs.base), "the foundation", foundation_policy, foundation=True)
        shared = SharedData(FOUNDATION, reference=FOUNDATION)
        shared.add(FOUNDATION, bare)
        say(f"exporting the batch program ({shape.slots} slots, {shape.adapter_slots} adapter slots, rank {shape.rank})")
        ep = export_method(batched, batch_example_inputs(vocab, shape), "the batch program", batch_dynamic_shapes(shape))
        edge = to_edge({BATCH_METHOD: ep}, data_policy=_TablesPolicy(foundation_policy))
        program, _ = lowerer.lower_edge(edge, "the batch program")
        shared.add(BATCH_PROGRAM, program)
        identity = shared.identity()
        tables = program.data_entries.get(BATCH_TABLES, {})
        constant_alignment = lowerer.config.constant_alignment
        adapter_files = {
            name: _adapter_table_entries(w, tables, constant_alignment, shape.table_dtype)
            for name, w in zip(adapters, weights)
        }
        manifest = {
            "method": BATCH_METHOD,
            "slots": shape.slots,
            "max_seq_len": shape.max_seq_len,
            "adapter_slots": shape.adapter_slots,
            "rank": shape.rank,
            "max_rows": shape.max_rows,
            "table_dtype": next(k for k, v in TABLE_DTYPES.items() if v == shape.table_dtype),
            "targets": list(shape.targets),
            "adapters": list(adapters),
            "adapter_files": {name: f"{name}.ptd" for name in adapters},
        }
        alignment = lowerer.config.tensor_alignment
        with OutputFiles(out_dir, say) as files:
            foundation_program = files.write_bytes(
                f"{FOUNDATION}.pte", with_foundation_digest(bare.buffer, identity, f"{FOUNDATION}.pte")
            )
            foundation_path = shared.write(files, alignment)
            batch_program = files.write_bytes(
                f"{BATCH_PROGRAM}.pte", with_foundation_digest(program.buffer, identity, f"{BATCH_PROGRAM}.pte")
            )
            tables_path = files.write(f"{BATCH_TABLES}.ptd", lambda f: write_ptd(f, tables, alignment, identity))
            adapter_paths = {
                name: files.write(f"{name}.ptd", lambda f, e=entries: write_ptd(f, e, alignment, identity))
                for name, entries in adapter_files.items()
            }
            manifest_path = files.write_bytes(f"{BATCH_PROGRAM}.json", (json.dumps(manifest, indent=2) + "\n").encode())
            sizes = files.commit()
    return BatchExportResult(
        sizes,
        foundation_path,
        foundation_program,
        batch_program,
        tables_path,
        adapter_paths,
        manifest_path,
        shape,
        dict(lowerer.fallbacks),
        dict(lowerer.gathered_formats),
    )


def _adapter_table_entries(
    weights: LoraWeights, tables: Mapping[str, DataFileEntry], alignment: int, dtype: torch.dtype
) -> Dict[str, DataFileEntry]:
    """One adapter's file for the batch program: under each table's key, its own factor ([r, in]
    for a lora_a table, [out, r] for a lora_b one), which the engine writes into a slot; int8
    tables' factors quantized per row as BatchedLoraLinear.put quantizes them, with their scales
    ([r] under lora_a_scales, [out] under lora_b_scales)."""
    store = NamedDataStore()
    for target, (a, b) in weights.layers.items():
        parts: List[Tuple[str, torch.Tensor]] = []
        for part, factor in (("lora_a", a), ("lora_b", b)):
            if dtype == torch.int8:
                q, scales = quantize_qc8w(factor.detach().float().contiguous())
                parts += [(part, q), (f"{part}_scales", scales)]
            else:
                parts.append((part, factor.detach().to(dtype).contiguous()))
        for part, tensor in parts:
            key = f"{BATCH_TABLES}/{canonical_name(f'model.{target}.{part}')}"
            if key not in tables:
                raise ExportError(f"the batch program has no table '{key}' for adapted layer {target}")
            layout = TensorLayout.of(tensor, key)
            store.add_named_data(key, tensor_view(tensor), alignment, BATCH_TABLES, layout, tensor_digest(tensor))
    output = store.get_named_data_store_output()
    return {
        key: DataFileEntry(
            output.buffers[e.buffer_index].data,
            output.buffers[e.buffer_index].alignment,
            e.tensor_layout,
            output.buffers[e.buffer_index].digest,
        )
        for key, e in output.external_data.get(BATCH_TABLES, {}).items()
    }


def _check_calibration(calibration: Optional[str], partitioner: Optional[Partitioner]) -> None:
    """Refuses calibration a partitioner cannot weigh, or a missing text, before the model loads."""
    if calibration is None:
        return
    weighing = getattr(partitioner, "weighing", None)
    if weighing is None:
        raise OptionError("calibration needs a partitioner that quantizes (e.g. XnnpackPartitioner(quantize='int4'))")
    weighing({})
    check_calibration_file(calibration)


def _calibrated(
    partitioner: Optional[Partitioner],
    calibration: Optional[str],
    model_dir: str,
    base: nn.Module,
    say: Callable[[str], None],
) -> Optional[Partitioner]:
    """partitioner, weighing the importance the bare model gives the calibration text."""
    if calibration is None:
        return partitioner
    ids = calibration_ids(model_dir, calibration)
    positions = getattr(base.config, "max_position_embeddings", None) or CALIBRATION_CTX
    ctx = min(CALIBRATION_CTX, int(positions))
    say(f"calibrating on {ids.numel()} tokens of {calibration}")
    return partitioner.weighing(importance_from_ids(base, ids, ctx))  # type: ignore[union-attr]


@dataclasses.dataclass
class _ExportInputs:
    """What both Hugging Face exports start from: the bare model, each adapter's logits module,
    the KV-cache method and an example input_ids."""

    base: nn.Module
    models: Dict[str, nn.Module]
    cached: ExtraMethod
    example: torch.Tensor


def _load_for_export(
    caller: str,
    model_dir: str,
    adapters: Mapping[str, str],
    max_seq_len: int,
    say: Callable[[str], None],
    kv_dtype: Optional[torch.dtype] = None,
    full_logits: bool = False,
) -> _ExportInputs:
    """Checks every input before the slow loading, then loads the model and its adapters."""
    for name in adapters:
        check_adapter_name(name, FOUNDATION)
    for name, adapter_dir in adapters.items():
        _check_adapter_dir(name, adapter_dir)
    say(f"loading model {model_dir}")
    base = load_hf_model(model_dir)
    _check_max_seq_len(max_seq_len, base, model_dir)
    cached = kv_cache_method(base, max_seq_len, kv_dtype, all_logits=full_logits)  # refuses unsupported attention before the adapters load
    models: Dict[str, nn.Module] = {}
    for name, adapter_dir in adapters.items():
        say(f"loading adapter '{name}' from {adapter_dir}")
        models[name] = CausalLMLogits(load_peft_adapter(base, name, adapter_dir))
    example_t = 1 if max_seq_len == 1 else max(2, min(max_seq_len, 7))
    vocab = int(base.get_input_embeddings().weight.shape[0])
    example = torch.randint(0, vocab, (1, example_t), generator=torch.Generator().manual_seed(0))
    return _ExportInputs(base, models, cached, example)
