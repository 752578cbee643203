"""The LoRA case's figures: medians and ratios from the raw samples, under the report's JSON keys."""

import os
from typing import Any, Dict, List

from edgeshare.bench._lora_export import Exported
from edgeshare.bench._lora_measure import Measured
from edgeshare.bench._lora_model import NUM_ADAPTERS
from edgeshare.bench._stats import MIB, median, mib_delta, ratio

__all__ = ["NOT_MEASURED", "figures"]

NOT_MEASURED: Dict[str, str] = {}  # nothing the issue asks for is left out
_LORA_CONFIGS = ("1", "2_shared", "2_unshared", "8_shared", "8_unshared")


def _memory(runs: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """rss_mb_*, rss_trimmed_mb_*, rss_file_mb_*, peak_mb_*: MiB grown since before loading."""

    def over(name: str, key: str, rest: str = "rss_before_kib") -> float:
        return median([mib_delta(r, key, rest) for r in runs[name]])

    def steps(name: str) -> List[float]:
        count = len(runs[name][0]["rss_after_kib"])
        return [
            round(median([(r["rss_after_kib"][i] - r["rss_before_kib"]) / 1024.0 for r in runs[name]]), 3)
            for i in range(count)
        ]

    out: Dict[str, Any] = {f"rss_mb_{n}": over(n, "rss_loaded_kib") for n in _LORA_CONFIGS}
    out.update({f"peak_mb_{n}": over(n, "hwm_loaded_kib") for n in _LORA_CONFIGS})
    out.update({f"rss_trimmed_mb_{n}": over(n, "rss_trimmed_kib") for n in ("1", "8_shared", "8_unshared")})
    out.update(
        {
            "rss_mb_foundation_only": over("foundation", "rss_loaded_kib"),
            "rss_mb_1_b32": over("1_b32", "rss_loaded_kib"),
            "rss_mb_1_after_run": over("1", "rss_ran_kib"),
            "rss_mb_1_b32_after_run": over("1_b32", "rss_ran_kib"),
            "rss_mb_steps_8_shared": steps("8_shared"),
            "rss_mb_steps_8_unshared": steps("8_unshared"),
            "rss_file_mb_8_shared": over("8_shared", "rss_file_loaded_kib", "rss_file_before_kib"),
        }
    )
    return out


def _load(runs: Dict[str, List[Dict[str, Any]]]) -> Dict[str, float]:
    """load_ms_*: opening the .ptd plus program 1, program 2 with and without sharing, 2..8."""
    lora_runs = [r for name in _LORA_CONFIGS for r in runs[name]]

    def second_load(share: bool) -> List[float]:
        return [r["load_ms"][1] for r in lora_runs if r["sharing"] == share and len(r["load_ms"]) > 1]

    return {
        "load_ms_first": median([r["data_open_ms"] + r["load_ms"][0] for r in lora_runs]),
        "load_ms_second_shared": median(second_load(True)),
        "load_ms_second_unshared": median(second_load(False)),
        "load_ms_rest_shared": median([ms for r in runs["8_shared"] for ms in r["load_ms"][1:]]),
        "load_ms_rest_unshared": median([ms for r in runs["8_unshared"] for ms in r["load_ms"][1:]]),
        "load_ms_foundation_only": median([r["data_open_ms"] + r["load_ms"][0] for r in runs["foundation"]]),
        "data_open_ms": median([r["data_open_ms"] for r in lora_runs]),
    }


def _latency(measured: Measured) -> Dict[str, float]:
    """latency_ms_* (the runtime) and torch_latency_ms_* (torch eager): medians of every sample."""

    def latency(name: str) -> List[float]:
        return [ms for r in measured.runs[name] for ms in r["latency_ms"]]

    torch_ms = measured.torch_ms
    return {
        "latency_ms_b1": median(latency("1")),
        "latency_ms_b32": median(latency("1_b32")),
        "latency_ms_b1_min": min(latency("1")),
        "latency_ms_b32_min": min(latency("1_b32")),
        "latency_ms_b1_foundation_only": median(latency("foundation")),
        "latency_ms_b32_foundation_only": median(latency("foundation_b32")),
        "torch_latency_ms_b1": median(torch_ms[("lora", 1)]),
        "torch_latency_ms_b32": median(torch_ms[("lora", 32)]),
        "torch_latency_ms_b1_foundation_only": median(torch_ms[("foundation", 1)]),
        "torch_latency_ms_b32_foundation_only": median(torch_ms[("foundation", 32)]),
        "latency_ms_b1_2threads": median(latency("1_2threads")),
        "latency_ms_b32_2threads": median(latency("1_b32_2threads")),
        "torch_latency_ms_b1_2threads": median(torch_ms[("lora_2threads", 1)]),
        "torch_latency_ms_b32_2threads": median(torch_ms[("lora_2threads", 32)]),
    }


def _sizes(exported: Exported, runs: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """File and weight sizes in MiB, and the weights cache's counters."""
    sizes = exported.result_b1
    return {
        "foundation_mb": sizes.shared_bytes / MIB,
        "foundation_file_mb": os.path.getsize(exported.foundation) / MIB,
        "adapter_mb": median([b / MIB for b in sizes.adapter_bytes.values()]),
        "program_file_mb": median([os.path.getsize(p) / MIB for p in exported.programs_b1]),
        "packed_entries_8_shared": runs["8_shared"][0]["packed_entries"],
        "packed_entries_8_unshared": runs["8_unshared"][0]["packed_entries"],
        "bytes_fetched_mb_8_shared": runs["8_shared"][0]["bytes_fetched"] / MIB,
        "bytes_fetched_mb_8_unshared": runs["8_unshared"][0]["bytes_fetched"] / MIB,
        "cache_released": all(r["packed_entries_released"] == 0 for rs in runs.values() for r in rs),
    }


# Ratio key -> (numerator key, denominator key).
_RATIOS = {
    "rss_2_shared_over_unshared": ("rss_mb_2_shared", "rss_mb_2_unshared"),
    "rss_8_shared_over_unshared": ("rss_mb_8_shared", "rss_mb_8_unshared"),
    "rss_8_shared_over_1": ("rss_mb_8_shared", "rss_mb_1"),
    "rss_8_unshared_over_1": ("rss_mb_8_unshared", "rss_mb_1"),
    "load_second_shared_over_first": ("load_ms_second_shared", "load_ms_first"),
    "load_second_shared_over_unshared": ("load_ms_second_shared", "load_ms_second_unshared"),
    "latency_b1_over_torch": ("latency_ms_b1", "torch_latency_ms_b1"),
    "latency_b32_over_torch": ("latency_ms_b32", "torch_latency_ms_b32"),
    "latency_b1_foundation_only_over_torch": ("latency_ms_b1_foundation_only", "torch_latency_ms_b1_foundation_only"),
    "latency_b32_foundation_only_over_torch": (
        "latency_ms_b32_foundation_only",
        "torch_latency_ms_b32_foundation_only",
    ),
    "latency_b32_2threads_over_torch": ("latency_ms_b32_2threads", "torch_latency_ms_b32_2threads"),
    "latency_b32_2threads_speedup": ("latency_ms_b32", "latency_ms_b32_2threads"),
    "lora_latency_overhead_b32": ("latency_ms_b32", "latency_ms_b32_foundation_only"),
    "torch_lora_latency_overhead_b32": ("torch_latency_ms_b32", "torch_latency_ms_b32_foundation_only"),
}


def _derived(out: Dict[str, Any]) -> Dict[str, float]:
    """The ratios, and the RSS each program after the first adds."""
    extra = NUM_ADAPTERS - 1
    derived = {key: ratio(out[a], out[b]) for key, (a, b) in _RATIOS.items()}
    derived["rss_mb_per_extra_program_shared"] = (out["rss_mb_8_shared"] - out["rss_mb_1"]) / extra
    derived["rss_mb_per_extra_program_unshared"] = (out["rss_mb_8_unshared"] - out["rss_mb_1"]) / extra
    derived["rss_trimmed_mb_per_extra_program_shared"] = (
        out["rss_trimmed_mb_8_shared"] - out["rss_trimmed_mb_1"]
    ) / extra
    return derived


def figures(description: str, exported: Exported, measured: Measured) -> Dict[str, Any]:
    """One model's figures: REQUIRED_KEYS of bench/lora.py and more (see its docstring).

    Args:
      description: the model's one-line description.
      exported: its files.
      measured: the raw samples.

    Returns:
      JSON-ready figures (NaN where a figure has no samples).
    """
    out: Dict[str, Any] = {"description": description}
    out.update(_memory(measured.runs))
    out.update(_load(measured.runs))
    out.update(_latency(measured))
    out.update(_sizes(exported, measured.runs))
    out.update(
        {
            "export_s": exported.export_s,
            "repeats": measured.repeats,
            "iterations_b1": measured.iterations_b1,
            "iterations_b32": measured.iterations_b32,
        }
    )
    out.update(_derived(out))
    out["not_measured"] = dict(NOT_MEASURED)
    return out
