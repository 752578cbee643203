"""The adapter-swap figures: one loaded program, adapters bound by Method::rebind_data.

Over swappable exports (exir.export_swappable / exir.export_hf_swappable: lora.pte plus one small
.ptd per adapter), in fresh lora_runner processes (1 thread):

- reference model (bench/_lora_model.reference_model: 2 MiB adapters): adapter_swap_ms, the median
  Method::rebind_data onto the next adapter's .ptd (lora_runner --swap-data), goal <= 0.15 ms,
  with the content policy's SHA-256 of the new bytes (an open data file remembers the entries it
  has checked, so only a file's first bind hashes: adapter_swap_ms_first_bind, the median first
  bind onto each not yet checked adapter); adapter_swap_ms_unverified: --no-verify (trusted
  files), what the rebinding itself costs;
- tiny LLM: adapter_swap_ms_llm (median rebind onto an adapter bound before, its file open: the
  method switches to its remembered table) and adapter_swap_ms_llm_first_bind (the first round);
  rss_mb_8_swappable (lora.pte over foundation.ptd, bound in turn to all 8 adapter .ptd files)
  against rss_mb_8_programs (the 8 adapter programs, shared); swappable_latency_ms_t{1,32} (the
  adapter's products run as kernels on mapped bytes); generation (tools/generate, the first
  adapter, greedy, interleaved with that adapter's own program): swappable_prefill_ms and
  own_prefill_ms, swappable_decode_tokens_per_s and own_decode_tokens_per_s, their medians'
  ratios swappable_prefill_over_own (goal <= 1.03) and swappable_decode_rate_over_own (goal >=
  0.97), and swappable_tokens_match_own (every run's tokens equal the own program's).
"""

import dataclasses
import os
from typing import Any, Dict, List, Sequence

from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_measure import PROMPT_TOKENS, LlmExported
from edgeshare.bench._llm_model import LlmFiles, LlmSpec
from edgeshare.bench._lora_model import BenchModel, demo_model, reference_model
from edgeshare.bench._runner import BenchError, RunnerConfig, run_generate, run_runner
from edgeshare.bench._stats import median, mib_delta, ratio

__all__ = ["SWAP_KEYS", "measure_swap", "median_swap", "swap_config"]

SWAP_KEYS = ("adapter_swap_ms", "adapter_swap_ms_llm", "rss_mb_8_swappable", "rss_mb_8_programs")


def swap_config(foundation: str, program: str, adapters: Sequence[str], rounds: int) -> RunnerConfig:
    """Loaded over foundation + the first adapter, then bound to the others and back, `rounds` times."""
    swaps = list(adapters[1:]) + [adapters[0]]
    return RunnerConfig([program], [foundation, adapters[0]], swap_data=swaps, swap_rounds=rounds)


def median_swap(reports: Sequence[Dict[str, Any]], adapters: int) -> float:
    """Binds after the first round: onto adapters bound before (their files still open)."""
    return median(ms for r in reports for ms in r["swap_ms"][adapters:])


def _median_first_binds(reports: Sequence[Dict[str, Any]], adapters: int) -> float:
    """The first round's binds onto adapters 2..N (the first one was checked when it was loaded)."""
    return median(ms for r in reports for ms in r["swap_ms"][: adapters - 1])


def _reference(model: BenchModel, work_dir: str, repeats: int, rounds: int) -> Dict[str, Any]:
    from edgeshare.exir import export_swappable  # noqa: PLC0415

    result = export_swappable(
        model.foundation,
        model.adapters,
        (model.make_input(1),),
        os.path.join(work_dir, "swap_reference"),
        XnnpackPartitioner(),
    )
    adapters = list(result.adapter_files.values())
    config = swap_config(result.foundation_path, result.swappable_program, adapters, rounds)
    reports = [run_runner(config) for _ in range(repeats)]
    trusted = [run_runner(dataclasses.replace(config, verify=False)) for _ in range(repeats)]
    return {
        "adapter_swap_ms": median_swap(reports, len(adapters)),
        "adapter_swap_ms_first_bind": _median_first_binds(reports, len(adapters)),
        "adapter_swap_ms_unverified": median_swap(trusted, len(adapters)),
        "adapter_swap_mb": os.path.getsize(adapters[0]) / (1024.0 * 1024.0),
        "adapter_swap_model": model.name,
    }


def _llm(
    spec: LlmSpec,
    files: LlmFiles,
    exported: LlmExported,
    work_dir: str,
    repeats: int,
    rounds: int,
    n: Dict[int, int],
    new_tokens: int,
) -> Dict[str, Any]:
    from edgeshare.exir.hf import export_hf_swappable  # noqa: PLC0415

    result = export_hf_swappable(
        files.model_dir, files.adapter_dirs, os.path.join(work_dir, "swap_llm"), spec.max_seq_len, XnnpackPartitioner()
    )
    if result.own_programs:
        raise BenchError(f"adapters {sorted(result.own_programs)} did not share lora.pte's structure")
    adapters = list(result.adapter_files.values())
    swaps: List[Dict[str, Any]] = []
    programs: List[Dict[str, Any]] = []
    latency: Dict[int, List[float]] = {1: [], 32: []}
    first = next(iter(result.adapter_files))
    own = _own_program(exported, first)
    prompt = exported.inputs[PROMPT_TOKENS]
    generated: Dict[str, List[Dict[str, Any]]] = {"swappable": [], "own": []}
    for _ in range(repeats):
        swaps.append(run_runner(swap_config(result.foundation_path, result.swappable_program, adapters, rounds)))
        data = [result.foundation_path, adapters[0]]
        generated["swappable"].append(run_generate(result.swappable_program, data, prompt, new_tokens))
        generated["own"].append(run_generate(own, [exported.foundation], prompt, new_tokens))
        programs.append(run_runner(RunnerConfig(exported.programs, [exported.foundation])))
        for tokens in (1, 32):
            data = [result.foundation_path, adapters[0]]
            config = RunnerConfig([result.swappable_program], data, iterations=n[tokens], tokens=tokens,
                                  inputs=exported.inputs)
            latency[tokens].append(median(run_runner(config)["latency_ms"]))
    out: Dict[str, Any] = {
        "adapter_swap_ms_llm": median_swap(swaps, len(adapters)),
        "adapter_swap_ms_llm_first_bind": _median_first_binds(swaps, len(adapters)),
        "rss_mb_8_swappable": median(mib_delta(r, "rss_swapped_kib") for r in swaps),
        "rss_mb_8_programs": median(mib_delta(r, "rss_loaded_kib") for r in programs),
    }
    out["rss_8_swappable_over_programs"] = ratio(out["rss_mb_8_swappable"], out["rss_mb_8_programs"])
    for tokens in (1, 32):
        out[f"swappable_latency_ms_t{tokens}"] = median(latency[tokens])
    out.update(_generation_figures(generated))
    return out


def _own_program(exported: LlmExported, adapter: str) -> str:
    """The adapter's own program among the per-adapter exports (same adapter names).

    Raises:
      BenchError: there is none.
    """
    for program in exported.programs:
        if os.path.basename(program) == f"{adapter}.pte":
            return program
    raise BenchError(f"no own program of adapter '{adapter}' among {exported.programs}")


def _generation_figures(generated: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Medians of each side, their ratios, and whether every swappable run's tokens equal the own
    program's."""
    out: Dict[str, Any] = {}
    for side, runs in generated.items():
        out[f"{side}_prefill_ms"] = median(r["prefill_ms"] for r in runs)
        out[f"{side}_decode_tokens_per_s"] = median(r["decode_tokens_per_s"] for r in runs)
    out["swappable_prefill_over_own"] = ratio(out["swappable_prefill_ms"], out["own_prefill_ms"])
    out["swappable_decode_rate_over_own"] = ratio(
        out["swappable_decode_tokens_per_s"], out["own_decode_tokens_per_s"]
    )
    out["swappable_tokens_match_own"] = all(
        s["tokens"] == o["tokens"] for s, o in zip(generated["swappable"], generated["own"])
    )
    return out


def measure_swap(
    spec: LlmSpec,
    files: LlmFiles,
    exported: LlmExported,
    work_dir: str,
    repeats: int,
    iterations: Dict[int, int],
    rounds: int = 20,
    small: bool = False,
    new_tokens: int = 32,
) -> Dict[str, Any]:
    """The swap figures (see the module doc). small: the demo model instead of the reference (the
    smoke test); new_tokens: generated per tools/generate run."""
    out = _reference(demo_model() if small else reference_model(), work_dir, repeats, rounds)
    out.update(_llm(spec, files, exported, work_dir, repeats, rounds, iterations, new_tokens))
    return out
