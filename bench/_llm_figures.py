"""The tiny-LLM case's figures (medians, ratios, memory breakdown)."""

import os
from typing import Any, Dict, List

from edgeshare.bench._llm_measure import LlmExported, LlmMeasured
from edgeshare.bench._runner import program_layout
from edgeshare.bench._stats import MIB, median, median_of_medians, mib_delta, ratio

__all__ = ["LLM_REQUIRED_KEYS", "llm_figures"]

# Keys every run has (bench/llm_test.py checks them); generation and swap keys come when measured.
LLM_REQUIRED_KEYS = (
    "export_s",
    "latency_ms_t1",
    "latency_ms_t32",
    "torch_latency_ms_t1",
    "torch_latency_ms_t32",
    "latency_t1_over_torch",
    "latency_t32_over_torch",
    "rss_mb_all_shared",
    "rss_mb_all_unshared",
    "rss_mb_foundation",
    "rss_mb_per_extra_adapter_shared",
    "rss_mb_per_extra_adapter_unshared",
    "adapter_mb",
    "foundation_mb",
)



def _memory(runs: Dict[str, List[Dict[str, Any]]], extra: int) -> Dict[str, float]:
    """RSS figures from the all-programs runs: step 0 is foundation.pte, steps 1.. the adapters."""
    out: Dict[str, float] = {}
    for share in ("shared", "unshared"):
        reports = runs[f"all_{share}"]
        last = len(reports[0]["rss_after_kib"]) - 1
        out[f"rss_mb_all_{share}"] = median(mib_delta(r, "rss_loaded_kib") for r in reports)
        out[f"rss_trimmed_mb_all_{share}"] = median(mib_delta(r, "rss_trimmed_kib") for r in reports)
        out[f"peak_mb_all_{share}"] = median(mib_delta(r, "hwm_loaded_kib") for r in reports)
        for series, name in (
            ("rss_after_kib", "rss"),
            ("rss_anon_after_kib", "rss_anon"),
            ("rss_file_after_kib", "rss_file"),
            ("heap_after_kib", "heap"),
        ):
            # From the first adapter to the last: what each further adapter program adds.
            out[f"{name}_mb_per_extra_adapter_{share}"] = median(
                [(r[series][last] - r[series][1]) / 1024.0 / extra for r in reports]
            )
        out[f"load_ms_first_adapter_{share}"] = median([r["load_ms"][1] for r in reports])
        out[f"load_ms_foundation_{share}"] = median([r["load_ms"][0] for r in reports])
        out[f"bytes_fetched_mb_all_{share}"] = median([r["bytes_fetched"] / MIB for r in reports])
    out["rss_mb_foundation"] = median((r["rss_after_kib"][0] - r["rss_before_kib"]) / 1024.0 for r in runs["all_shared"])
    out["rss_all_shared_over_unshared"] = ratio(out["rss_mb_all_shared"], out["rss_mb_all_unshared"])
    return out


def _generation(measured: LlmMeasured) -> Dict[str, Any]:
    if not measured.generate:
        return {}
    out: Dict[str, Any] = {
        "prefill_ms": median([g["prefill_ms"] for g in measured.generate]),
        "decode_tokens_per_s": median([g["decode_tokens_per_s"] for g in measured.generate]),
        "torch_prefill_ms": median([g["prefill_ms"] for g in measured.torch_generate]),
        "torch_decode_tokens_per_s": median([g["decode_tokens_per_s"] for g in measured.torch_generate]),
        "generate_tokens_match": measured.generate[0]["tokens"] == measured.torch_generate[0]["tokens"],
    }
    out["prefill_over_torch"] = ratio(out["prefill_ms"], out["torch_prefill_ms"])
    out["decode_rate_over_torch"] = ratio(out["decode_tokens_per_s"], out["torch_decode_tokens_per_s"])
    return out


def llm_figures(description: str, exported: LlmExported, measured: LlmMeasured) -> Dict[str, Any]:
    """Medians and ratios of one run (compare ratios only within it)."""
    runs = measured.runs
    out: Dict[str, Any] = {"description": description, "export_s": exported.export_s}
    for tokens in (1, 32):
        out[f"latency_ms_t{tokens}"] = median_of_medians(runs[f"lora_t{tokens}"], "latency_ms")
        out[f"latency_ms_t{tokens}_foundation"] = median_of_medians(runs[f"foundation_t{tokens}"], "latency_ms")
        out[f"torch_latency_ms_t{tokens}"] = median(measured.torch_ms[("lora", tokens)])
        out[f"torch_latency_ms_t{tokens}_foundation"] = median(measured.torch_ms[("foundation", tokens)])
        out[f"latency_t{tokens}_over_torch"] = ratio(out[f"latency_ms_t{tokens}"], out[f"torch_latency_ms_t{tokens}"])
        out[f"latency_t{tokens}_foundation_over_torch"] = ratio(
            out[f"latency_ms_t{tokens}_foundation"], out[f"torch_latency_ms_t{tokens}_foundation"]
        )
        out[f"rss_ran_mb_t{tokens}"] = median(mib_delta(r, "rss_ran_kib", "rss_trimmed_kib") for r in runs[f"lora_t{tokens}"])
    out.update(_memory(runs, len(exported.programs) - 1))
    first = next(iter(exported.result.adapter_bytes))
    out["adapter_mb"] = exported.result.adapter_bytes[first] / MIB
    out["foundation_mb"] = os.path.getsize(exported.foundation) / MIB
    out["program_file_mb"] = os.path.getsize(exported.programs[0]) / MIB
    out["rss_mb_per_extra_adapter_over_budget"] = out["rss_mb_per_extra_adapter_shared"] - out["adapter_mb"]
    layout = program_layout(exported.programs[0])
    planned = {m["name"]: m["planned_bytes"] / MIB for m in layout["methods"]}
    for name, mb in planned.items():
        out[f"planned_mb_{name}"] = mb
    out["methods"] = sorted(planned)
    out.update(_generation(measured))
    out["not_measured"] = {}
    return out
