"""The adapter-swap figures: one loaded program, adapters bound by Method::rebind_data.

Over swappable exports (exir.export_swappable / exir.export_hf_swappable: lora.pte plus one small
.ptd per adapter), in fresh lora_runner processes (1 thread):

- reference model (bench/_lora_model.reference_model: 2 MiB adapters): adapter_swap_ms, the median
  Method::rebind_data onto the next adapter's .ptd (lora_runner --swap-data), goal <= 0.15 ms,
  with the content policy's SHA-256 of the new bytes (an open data file remembers the entries it
  has checked, so only a file's first bind hashes: adapter_swap_ms_first_bind, the median first
  bind onto each not yet checked adapter); adapter_swap_ms_unverified: --no-verify (trusted
  files), what the rebinding itself costs;
- tiny LLM: adapter_swap_ms_llm; rss_mb_8_swappable (lora.pte over foundation.ptd, bound in turn
  to all 8 adapter .ptd files) against rss_mb_8_programs (the 8 adapter programs, shared);
  swappable_latency_ms_t{1,32} (the adapter's products run as kernels on mapped bytes).
"""

import dataclasses
import os
from typing import Any, Dict, List, Sequence

from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_measure import LlmExported
from edgeshare.bench._llm_model import LlmFiles, LlmSpec
from edgeshare.bench._lora_model import BenchModel, demo_model, reference_model
from edgeshare.bench._runner import BenchError, RunnerConfig, run_runner
from edgeshare.bench._stats import median, mib_delta, ratio

__all__ = ["SWAP_KEYS", "measure_swap"]

SWAP_KEYS = ("adapter_swap_ms", "adapter_swap_ms_llm", "rss_mb_8_swappable", "rss_mb_8_programs")


def _swap_config(foundation: str, program: str, adapters: Sequence[str], rounds: int) -> RunnerConfig:
    """Loaded over foundation + the first adapter, then bound to the others and back, `rounds` times."""
    swaps = list(adapters[1:]) + [adapters[0]]
    return RunnerConfig([program], [foundation, adapters[0]], swap_data=swaps, swap_rounds=rounds)


def _median_swap(reports: Sequence[Dict[str, Any]]) -> float:
    return median(ms for r in reports for ms in r["swap_ms"])


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
    config = _swap_config(result.foundation_path, result.swappable_program, adapters, rounds)
    reports = [run_runner(config) for _ in range(repeats)]
    trusted = [run_runner(dataclasses.replace(config, verify=False)) for _ in range(repeats)]
    return {
        "adapter_swap_ms": _median_swap(reports),
        "adapter_swap_ms_first_bind": _median_first_binds(reports, len(adapters)),
        "adapter_swap_ms_unverified": _median_swap(trusted),
        "adapter_swap_mb": os.path.getsize(adapters[0]) / (1024.0 * 1024.0),
        "adapter_swap_model": model.name,
    }


def _llm(
    spec: LlmSpec, files: LlmFiles, exported: LlmExported, work_dir: str, repeats: int, rounds: int, n: Dict[int, int]
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
    for _ in range(repeats):
        swaps.append(run_runner(_swap_config(result.foundation_path, result.swappable_program, adapters, 1)))
        programs.append(run_runner(RunnerConfig(exported.programs, [exported.foundation])))
        for tokens in (1, 32):
            data = [result.foundation_path, adapters[0]]
            config = RunnerConfig([result.swappable_program], data, iterations=n[tokens], tokens=tokens,
                                  inputs=exported.inputs)
            latency[tokens].append(median(run_runner(config)["latency_ms"]))
    out: Dict[str, Any] = {
        "adapter_swap_ms_llm": _median_swap(swaps),
        "rss_mb_8_swappable": median(mib_delta(r, "rss_swapped_kib") for r in swaps),
        "rss_mb_8_programs": median(mib_delta(r, "rss_loaded_kib") for r in programs),
    }
    out["rss_8_swappable_over_programs"] = ratio(out["rss_mb_8_swappable"], out["rss_mb_8_programs"])
    for tokens in (1, 32):
        out[f"swappable_latency_ms_t{tokens}"] = median(latency[tokens])
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
) -> Dict[str, Any]:
    """The swap figures (see the module doc). small: the demo model instead of the reference (the
    smoke test)."""
    out = _reference(demo_model() if small else reference_model(), work_dir, repeats, rounds)
    out.update(_llm(spec, files, exported, work_dir, repeats, rounds, iterations))
    return out
