"""The tiny-LLM benchmark's export and measurement stages: export_hf_lora, lora_runner and
tools/generate in fresh processes, and transformers eager (PEFT) at 1 thread."""

import dataclasses
import os
import time
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_model import LlmFiles, LlmSpec
from edgeshare.bench._runner import BenchError, RunnerConfig, run_generate, run_runner, torch_latency_ms
from edgeshare.exir.hf import CausalLMLogits, export_hf_lora, load_hf_model, load_peft_adapter
from edgeshare.exir.lora import LoraExportResult
from torch import nn

__all__ = [
    "CACHED_METHOD",
    "LlmExported",
    "LlmMeasured",
    "export_llm",
    "generate_torch",
    "forward_config",
    "generate",
    "measure_llm",
]

# The stateful method every program has beside "forward" (input_ids [1, T], start position -> logits).
CACHED_METHOD = "forward_cached"
PROMPT_TOKENS = 32


@dataclasses.dataclass
class LlmExported:
    """The exported files.

    Attributes:
      foundation: foundation.ptd; bare: foundation.pte (no adapter); programs: adapterN.pte in order.
      export_s: export_hf_lora's wall time (loading, export, lowering, writing of every program).
      result: what export_hf_lora returned.
      inputs: tokens -> an int64 input_ids [1, tokens] .npy (seeded).
    """

    foundation: str
    bare: str
    programs: List[str]
    export_s: float
    result: LoraExportResult
    inputs: Dict[int, str]


def _write_ids(path: str, tokens: int, vocab: int, seed: int) -> str:
    g = torch.Generator().manual_seed(seed)
    np.save(path, torch.randint(0, vocab, (1, tokens), generator=g).numpy().astype(np.int64))
    return path


def export_llm(spec: LlmSpec, files: LlmFiles, out_dir: str, log: Any) -> LlmExported:
    """Exports the model and every adapter with XNNPACK over one foundation.ptd; times it."""
    start = time.perf_counter()
    result = export_hf_lora(
        files.model_dir, files.adapter_dirs, out_dir, spec.max_seq_len, XnnpackPartitioner(), progress=log
    )
    export_s = time.perf_counter() - start
    inputs = {t: _write_ids(os.path.join(out_dir, f"ids_t{t}.npy"), t, spec.vocab, 100 + t) for t in (1, 32)}
    return LlmExported(
        foundation=result.foundation_path,
        bare=os.path.join(out_dir, "foundation.pte"),
        programs=[result.program_paths[name] for name in files.adapter_dirs],
        export_s=export_s,
        result=result,
        inputs=inputs,
    )


@dataclasses.dataclass
class LlmMeasured:
    """Raw samples.

    Attributes:
      runs: configuration -> lora_runner reports, one per repeat.
      torch_ms: (what, tokens) -> transformers eager samples; what is "lora" or "foundation".
      generate: tools/generate reports per repeat.
      torch_generate: transformers' own KV cache, per repeat: prefill_ms, decode_tokens_per_s, tokens.
    """

    runs: Dict[str, List[Dict[str, Any]]]
    torch_ms: Dict[Tuple[str, int], List[float]]
    generate: List[Dict[str, Any]]
    torch_generate: List[Dict[str, Any]]


def forward_config(exported: LlmExported, program: str, tokens: int, iterations: int, warmup: int) -> RunnerConfig:
    """lora_runner timing method "forward" of program on input_ids [1, tokens], 1 thread."""
    return RunnerConfig([program], [exported.foundation], iterations=iterations, warmup=warmup, tokens=tokens,
                        inputs=exported.inputs)


def generate(exported: LlmExported, prompt: str, new_tokens: int) -> Dict[str, Any]:
    """One fresh tools/generate (first adapter, 1 thread) greedy from prompt (.npy) -> its report."""
    return run_generate(exported.programs[0], [exported.foundation], prompt, new_tokens)


def _configs(exported: LlmExported, n1: int, n32: int, warmup: int) -> Dict[str, RunnerConfig]:
    """name -> its runner: forward latency at T=1 and T=32, or (all_*) every program loaded, RSS only."""
    everything = [exported.bare] + exported.programs
    return {
        "lora_t1": forward_config(exported, exported.programs[0], 1, n1, warmup),
        "lora_t32": forward_config(exported, exported.programs[0], 32, n32, warmup),
        "foundation_t1": forward_config(exported, exported.bare, 1, n1, warmup),
        "foundation_t32": forward_config(exported, exported.bare, 32, n32, warmup),
        "all_shared": RunnerConfig(everything, [exported.foundation], warmup=0),
        "all_unshared": RunnerConfig(everything, [exported.foundation], share=False, warmup=0),
    }


def generate_torch(model: nn.Module, prompt: torch.Tensor, new_tokens: int) -> Dict[str, Any]:
    """Greedy decoding with transformers' own KV cache at 1 thread, timed as tools/generate times:
    prefill (the prompt's forward and the first token's argmax), then tokens/s over the rest."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            start = time.perf_counter()
            out = model(input_ids=prompt, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
            prefill_ms = (time.perf_counter() - start) * 1e3
            tokens = [int(token)]
            past = out.past_key_values
            start = time.perf_counter()
            for _ in range(new_tokens - 1):
                out = model(input_ids=token, past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = out.logits[:, -1:].argmax(-1)
                tokens.append(int(token))
            decode_s = time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)
    rate = (new_tokens - 1) / decode_s if new_tokens > 1 and decode_s > 0 else 0.0
    return {"tokens": tokens, "prefill_ms": prefill_ms, "decode_tokens_per_s": rate}


def _torch_samples(
    files: LlmFiles, exported: LlmExported, n1: int, n32: int, repeats: int, warmup: int
) -> Tuple[Dict[Tuple[str, int], List[float]], nn.Module]:
    base = load_hf_model(files.model_dir)
    first = next(iter(files.adapter_dirs))
    peft_model = load_peft_adapter(base, first, files.adapter_dirs[first])
    torch_ms: Dict[Tuple[str, int], List[float]] = {}
    for what, module in (("lora", CausalLMLogits(peft_model)), ("foundation", CausalLMLogits(base))):
        for tokens, n in ((1, n1), (32, n32)):
            ids = torch.from_numpy(np.load(exported.inputs[tokens]))
            torch_ms[(what, tokens)] = torch_latency_ms(module, ids, n * repeats, warmup)
    return torch_ms, peft_model


def measure_llm(
    files: LlmFiles, exported: LlmExported, repeats: int, n1: int, n32: int, warmup: int, new_tokens: int
) -> LlmMeasured:
    """Every configuration in a fresh lora_runner process, `repeats` times round-robin; then
    transformers eager; then generation (tools/generate against transformers' KV cache).

    Raises:
      BenchError: a process failed, or the programs have no CACHED_METHOD (every --hf-model export
        has it).
    """
    configs = _configs(exported, n1, n32, warmup)
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, config in configs.items():
            runs[name].append(run_runner(config))
    methods = runs["lora_t1"][0].get("methods", [])
    if CACHED_METHOD not in methods:
        raise BenchError(f"the programs have no '{CACHED_METHOD}' method (methods: {', '.join(methods)})")
    torch_ms, peft_model = _torch_samples(files, exported, n1, n32, repeats, warmup)
    generate_runs: List[Dict[str, Any]] = []
    torch_generate: List[Dict[str, Any]] = []
    prompt = exported.inputs[PROMPT_TOKENS]
    generate_torch(peft_model, torch.from_numpy(np.load(prompt)), 2)  # warm-up: the first cached call
    for _ in range(repeats):
        generate_runs.append(generate(exported, prompt, new_tokens))
        torch_generate.append(generate_torch(peft_model, torch.from_numpy(np.load(prompt)), new_tokens))
    return LlmMeasured(runs, torch_ms, generate_runs, torch_generate)
