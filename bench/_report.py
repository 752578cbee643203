"""The benchmark's report: the figures as a text table, and as JSON."""

import json
import math
from typing import Any, Dict

from edgeshare.bench._figures import NOT_MEASURED

__all__ = ["format_table", "to_json"]

TABLE = (
    ("RSS growth, MiB (T=1 programs)", None),
    ("  1 program", "rss_mb_1"),
    ("  2 programs, shared", "rss_mb_2_shared"),
    ("  2 programs, unshared", "rss_mb_2_unshared"),
    ("  8 programs, shared", "rss_mb_8_shared"),
    ("  8 programs, unshared", "rss_mb_8_unshared"),
    ("  8 shared / 8 unshared", "rss_8_shared_over_unshared"),
    ("  per extra program, shared", "rss_mb_per_extra_program_shared"),
    ("  per extra program, unshared", "rss_mb_per_extra_program_unshared"),
    ("  the same after malloc_trim, shared", "rss_trimmed_mb_per_extra_program_shared"),
    ("  bare foundation, no adapter", "rss_mb_foundation_only"),
    ("  peak, 8 programs, shared", "peak_mb_8_shared"),
    ("  peak, 8 programs, unshared", "peak_mb_8_unshared"),
    ("Load, ms", None),
    ("  program 1 (with opening the .ptd)", "load_ms_first"),
    ("  program 2, shared", "load_ms_second_shared"),
    ("  program 2, unshared", "load_ms_second_unshared"),
    ("  programs 2..8, shared", "load_ms_rest_shared"),
    ("  programs 2..8, unshared", "load_ms_rest_unshared"),
    ("  program 2 shared / program 1", "load_second_shared_over_first"),
    ("Latency, ms (1 thread)", None),
    ("  runtime, T=1", "latency_ms_b1"),
    ("  torch eager, T=1", "torch_latency_ms_b1"),
    ("  runtime / torch, T=1", "latency_b1_over_torch"),
    ("  runtime, T=32", "latency_ms_b32"),
    ("  torch eager, T=32", "torch_latency_ms_b32"),
    ("  runtime / torch, T=32", "latency_b32_over_torch"),
    ("  bare foundation: runtime, T=32", "latency_ms_b32_foundation_only"),
    ("  bare foundation: torch, T=32", "torch_latency_ms_b32_foundation_only"),
    ("  bare foundation: runtime / torch", "latency_b32_foundation_only_over_torch"),
    ("Sizes, MiB", None),
    ("  foundation weights (shared)", "foundation_mb"),
    ("  adapter weights per program", "adapter_mb"),
    ("  .pte file per program", "program_file_mb"),
    ("  fetched from data maps, 8 shared", "bytes_fetched_mb_8_shared"),
    ("  fetched from data maps, 8 unshared", "bytes_fetched_mb_8_unshared"),
)


def _format(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "n/a"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def format_table(results: Dict[str, Dict[str, Any]]) -> str:
    """The figures of every model as a text table, one column per model."""
    names = list(results)
    width = max(len(label) for label, _ in TABLE) + 2
    lines = [" " * width + "".join(f"{n:>14}" for n in names)]
    for label, key in TABLE:
        if key is None:
            lines.append(label)
            continue
        lines.append(f"{label:<{width}}" + "".join(f"{_format(results[n].get(key)):>14}" for n in names))
    for name in names:
        r = results[name]
        lines.append(
            f"{name}: {r['description']}; medians of {r['repeats']} fresh processes per configuration, "
            f"{r['iterations_b1']} (T=1) / {r['iterations_b32']} (T=32) timed runs per process; "
            f"export {r['export_s']:.1f} s; cache empty after release: {r['cache_released']}"
        )
    for what, why in NOT_MEASURED.items():
        lines.append(f"not measured: {what}: {why}")
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """value with every NaN replaced by None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def to_json(results: Dict[str, Dict[str, Any]]) -> str:
    """The figures of every model as indented JSON with sorted keys (NaN written as null)."""
    return json.dumps(_finite(results), indent=2, sort_keys=True)

