"""The adapter-swap figures of issue 12: one loaded program, adapters bound by Method::rebind_data.

Over swappable exports (exir.export_swappable / exir.export_hf_swappable: lora.pte plus one small
.ptd per adapter), in fresh lora_runner processes (1 thread):

- reference model (bench/_models.reference_model: 2 MiB adapters): adapter_swap_ms, the median
  Method::rebind_data onto the next adapter's .ptd (lora_runner --swap-data), goal <= 0.15 ms,
  with the content policy's SHA-256 of the new bytes (an open data file remembers the entries it
  has checked, so only a file's first bind hashes: adapter_swap_ms_first_bind, the median first
  bind onto each not yet checked adapter); adapter_swap_ms_unverified: --no-verify (trusted
  files), what the rebinding itself costs;
- tiny LLM: adapter_swap_ms_llm; rss_mb_8_swappable (lora.pte over foundation.ptd, bound in turn
  to all 8 adapter .ptd files) against rss_mb_8_programs (the 8 adapter programs, shared);
  swappable_latency_ms_t{1,32} (the adapter's products run as kernels on mapped bytes).
"""

import os
import statistics
import subprocess
from typing import Any, Dict, List, Sequence

import numpy as np
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._export import BenchError
from edgeshare.bench._llm_measure import LlmExported
from edgeshare.bench._llm_model import LlmFiles, LlmSpec
from edgeshare.bench._measure import json_report, runner_path
from edgeshare.bench._models import BenchModel, demo_model, reference_model

__all__ = ["SWAP_KEYS", "measure_swap"]

SWAP_KEYS = ("adapter_swap_ms", "adapter_swap_ms_llm", "rss_mb_8_swappable", "rss_mb_8_programs")


def _run(args: List[str]) -> Dict[str, Any]:
    proc = subprocess.run([runner_path()] + args + ["--threads", "1"], capture_output=True, text=True, check=False)
    return json_report(proc, "lora_runner")


def _swap_args(foundation: str, program: str, adapters: Sequence[str], rounds: int) -> List[str]:
    """Loaded over foundation + the first adapter, then bound to the others and back, `rounds` times."""
    args = ["--data", foundation, "--data", adapters[0], "--program", program]
    for path in list(adapters[1:]) + [adapters[0]]:
        args += ["--swap-data", path]
    return args + ["--swap-rounds", str(rounds)]


def _median_swap(reports: Sequence[Dict[str, Any]]) -> float:
    return float(statistics.median(ms for r in reports for ms in r["swap_ms"]))


def _median_first_binds(reports: Sequence[Dict[str, Any]], adapters: int) -> float:
    """The first round's binds onto adapters 2..N (the first one was checked when it was loaded)."""
    return float(statistics.median(ms for r in reports for ms in r["swap_ms"][: adapters - 1]))


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
    args = _swap_args(result.foundation_path, result.swappable_program, adapters, rounds)
    reports = [_run(args) for _ in range(repeats)]
    trusted = [_run(args + ["--no-verify"]) for _ in range(repeats)]
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
        swaps.append(_run(_swap_args(result.foundation_path, result.swappable_program, adapters, 1)))
        programs.append(
            _run(["--data", exported.foundation] + [a for p in exported.programs for a in ("--program", p)])
        )
        for tokens in (1, 32):
            args = ["--data", result.foundation_path, "--data", adapters[0], "--program", result.swappable_program]
            args += ["--method", "forward", "--input", exported.inputs[tokens], "--iterations", str(n[tokens])]
            latency[tokens].append(float(np.median(_run(args)["latency_ms"])))
    out: Dict[str, Any] = {
        "adapter_swap_ms_llm": _median_swap(swaps),
        "rss_mb_8_swappable": statistics.median((r["rss_swapped_kib"] - r["rss_before_kib"]) / 1024.0 for r in swaps),
        "rss_mb_8_programs": statistics.median((r["rss_loaded_kib"] - r["rss_before_kib"]) / 1024.0 for r in programs),
    }
    out["rss_8_swappable_over_programs"] = out["rss_mb_8_swappable"] / out["rss_mb_8_programs"]
    for tokens in (1, 32):
        out[f"swappable_latency_ms_t{tokens}"] = float(statistics.median(latency[tokens]))
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
