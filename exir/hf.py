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
from typing import Any, Callable, Dict, List, Mapping, Optional, Set

import torch
from edgeshare.exir._pipeline import check_out_dir
from edgeshare.exir.calibration import CALIBRATION_CTX, calibration_ids, check_calibration_file, importance_from_ids
from edgeshare.exir.data_policy import FoundationDataPolicy, foundation_tensors
from edgeshare.exir.errors import AdapterMismatchError, ExportError
from edgeshare.exir.export import ExecutorchBackendConfig
from edgeshare.exir.export_options import OptionError
from edgeshare.exir.foundation_index import FoundationIndex
from edgeshare.exir.hf_cache import kv_cache_method
from edgeshare.exir.lora import ExtraMethod, LoraExportResult, check_adapter_name, export_lora, shared_copy
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.peft_options import (
    check_lora_layers,
    check_lora_options,
    fold_dora,
    keep_foundation_bias,
    protect_foundation,
)
from edgeshare.exir.swappable import SwappableExportResult, export_swappable
from torch import nn

__all__ = [
    "CausalLMLogits",
    "HfInputError",
    "UnsupportedAdapterError",
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
