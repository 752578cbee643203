"""The tiny-LLM benchmark's figures (medians, ratios, memory breakdown) and its table."""

import json
import os
import statistics
import subprocess
from typing import Any, Dict, List, Optional, Sequence

from edgeshare.bench._export import BenchError
from edgeshare.bench._llm_measure import LlmExported, LlmMeasured

__all__ = ["LLM_REQUIRED_KEYS", "format_llm_table", "llm_figures", "program_layout"]

MIB = 1024.0 * 1024.0

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

TABLE = (
    ("Export (export_hf_lora, XNNPACK: foundation + adapters)", None),
    ("  seconds", "export_s"),
    ("Forward, ms (1 thread)", None),
    ("  runtime, LoRA, T=1", "latency_ms_t1"),
    ("  transformers+PEFT eager, T=1", "torch_latency_ms_t1"),
    ("  runtime / eager, T=1", "latency_t1_over_torch"),
    ("  runtime, LoRA, T=32", "latency_ms_t32"),
    ("  transformers+PEFT eager, T=32", "torch_latency_ms_t32"),
    ("  runtime / eager, T=32", "latency_t32_over_torch"),
    ("  runtime, foundation, T=1", "latency_ms_t1_foundation"),
    ("  eager, foundation, T=1", "torch_latency_ms_t1_foundation"),
    ("  runtime, foundation, T=32", "latency_ms_t32_foundation"),
    ("  eager, foundation, T=32", "torch_latency_ms_t32_foundation"),
    ("RSS growth, MiB (foundation.pte + N adapter programs, one process)", None),
    ("  foundation program alone", "rss_mb_foundation"),
    ("  foundation + all adapters, shared", "rss_mb_all_shared"),
    ("  foundation + all adapters, unshared", "rss_mb_all_unshared"),
    ("  per extra adapter program, shared", "rss_mb_per_extra_adapter_shared"),
    ("    of it anonymous (heap, packed)", "rss_anon_mb_per_extra_adapter_shared"),
    ("    of it file-backed (mapped .pte)", "rss_file_mb_per_extra_adapter_shared"),
    ("  malloc'd per extra adapter program (touched or not)", "heap_mb_per_extra_adapter_shared"),
    ("  per extra adapter program, unshared", "rss_mb_per_extra_adapter_unshared"),
    ("  adapter weights (bytes in its .pte)", "adapter_mb"),
    ("  per extra adapter - adapter bytes (goal <= 0.5)", "rss_mb_per_extra_adapter_over_budget"),
    ("  adapter .pte file", "program_file_mb"),
    ("  planned memory per method (at max_seq_len)", "planned_mb_forward"),
    ("  all shared / all unshared", "rss_all_shared_over_unshared"),
    ("Sizes, MiB", None),
    ("  foundation.ptd", "foundation_mb"),
    ("Generation (issue 12; prompt 32, greedy, 1 thread)", None),
    ("  runtime prefill ms", "prefill_ms"),
    ("  eager (own KV cache) prefill ms", "torch_prefill_ms"),
    ("  runtime / eager prefill", "prefill_over_torch"),
    ("  runtime decode tokens/s", "decode_tokens_per_s"),
    ("  eager decode tokens/s", "torch_decode_tokens_per_s"),
    ("  runtime / eager decode tokens/s", "decode_rate_over_torch"),
    ("  tokens equal to eager", "generate_tokens_match"),
    ("Adapter swap (issue 12; Method::rebind_data, 1 thread)", None),
    ("  reference model, ms per swap (goal <= 0.15)", "adapter_swap_ms"),
    ("  the same, a data file's first bind (SHA-256 of its bytes)", "adapter_swap_ms_first_bind"),
    ("  the same, --no-verify (no SHA-256 of the new bytes)", "adapter_swap_ms_unverified"),
    ("  reference model, adapter .ptd MiB", "adapter_swap_mb"),
    ("  tiny LLM, ms per swap", "adapter_swap_ms_llm"),
    ("  RSS MiB, lora.pte + 8 swappable adapters", "rss_mb_8_swappable"),
    ("  RSS MiB, 8 adapter programs (shared)", "rss_mb_8_programs"),
    ("  swappable / programs", "rss_8_swappable_over_programs"),
    ("  swappable program forward ms, T=1", "swappable_latency_ms_t1"),
    ("  swappable program forward ms, T=32", "swappable_latency_ms_t32"),
)

# Shown when the run had --peer.
PEER_TABLE = (
    ("Against ExecuTorch 1.5.1, interleaved, forward ms (1 thread)", None),
    ("  peer", "peer"),
    ("  runtime, T=1", "peer_edgeshare_latency_ms_t1"),
    ("  ExecuTorch, T=1", "peer_latency_ms_t1"),
    ("  runtime / ExecuTorch, T=1", "latency_t1_over_peer"),
    ("  runtime, T=32", "peer_edgeshare_latency_ms_t32"),
    ("  ExecuTorch, T=32", "peer_latency_ms_t32"),
    ("  runtime / ExecuTorch, T=32", "latency_t32_over_peer"),
    ("  ExecuTorch max abs error vs eager, T=32", "peer_max_abs_error_t32"),
    ("Against ExecuTorch 1.5.1, generation (KV cache; prompt 32, greedy, 1 thread)", None),
    ("  runtime prefill ms (tools/generate, fresh process)", "peer_edgeshare_prefill_ms"),
    ("  ExecuTorch prefill ms (fresh method, its first call)", "peer_prefill_ms"),
    ("  ExecuTorch prefill ms, warm (the same method again)", "peer_prefill_ms_warm"),
    ("  runtime / ExecuTorch prefill (< 1: runtime faster)", "prefill_over_peer"),
    ("  runtime decode tokens/s", "peer_edgeshare_decode_tokens_per_s"),
    ("  ExecuTorch decode tokens/s", "peer_decode_tokens_per_s"),
    ("  ExecuTorch decode tokens/s, warm", "peer_decode_tokens_per_s_warm"),
    ("  runtime / ExecuTorch decode rate (> 1: runtime faster)", "decode_rate_over_peer"),
    ("  tokens equal (both sides, every run, transformers)", "peer_generate_tokens_match"),
    ("  ExecuTorch max abs error vs eager, prefill logits", "peer_max_abs_error_cached"),
)


def _median_of_medians(reports: Sequence[Dict[str, Any]], key: str) -> float:
    return statistics.median(statistics.median(r[key]) for r in reports)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _kib_delta(report: Dict[str, Any], series: str, before: str, i: int) -> float:
    return (report[series][i] - report[before]) / 1024.0


def _memory(runs: Dict[str, List[Dict[str, Any]]], extra: int) -> Dict[str, float]:
    """RSS figures from the all-programs runs: step 0 is foundation.pte, steps 1.. the adapters."""
    out: Dict[str, float] = {}
    for share in ("shared", "unshared"):
        reports = runs[f"all_{share}"]
        last = len(reports[0]["rss_after_kib"]) - 1
        out[f"rss_mb_all_{share}"] = _median([(r["rss_loaded_kib"] - r["rss_before_kib"]) / 1024.0 for r in reports])
        out[f"rss_trimmed_mb_all_{share}"] = _median(
            [(r["rss_trimmed_kib"] - r["rss_before_kib"]) / 1024.0 for r in reports]
        )
        out[f"peak_mb_all_{share}"] = _median([(r["hwm_loaded_kib"] - r["rss_before_kib"]) / 1024.0 for r in reports])
        for series, name in (
            ("rss_after_kib", "rss"),
            ("rss_anon_after_kib", "rss_anon"),
            ("rss_file_after_kib", "rss_file"),
            ("heap_after_kib", "heap"),
        ):
            # From the first adapter to the last: what each further adapter program adds.
            out[f"{name}_mb_per_extra_adapter_{share}"] = _median(
                [(r[series][last] - r[series][1]) / 1024.0 / extra for r in reports]
            )
        out[f"load_ms_first_adapter_{share}"] = _median([r["load_ms"][1] for r in reports])
        out[f"load_ms_foundation_{share}"] = _median([r["load_ms"][0] for r in reports])
        out[f"bytes_fetched_mb_all_{share}"] = _median([r["bytes_fetched"] / MIB for r in reports])
    out["rss_mb_foundation"] = _median(
        [_kib_delta(r, "rss_after_kib", "rss_before_kib", 0) for r in runs["all_shared"]]
    )
    out["rss_all_shared_over_unshared"] = out["rss_mb_all_shared"] / out["rss_mb_all_unshared"]
    return out


def program_layout(path: str) -> Dict[str, Any]:
    """//tools:inspect --json of one .pte: its size and each method's planned bytes."""
    tool = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "inspect")
    proc = subprocess.run([tool, "--json", path], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"tools/inspect failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)[path]


def _generation(measured: LlmMeasured) -> Dict[str, Any]:
    if not measured.generate:
        return {}
    out: Dict[str, Any] = {
        "prefill_ms": _median([g["prefill_ms"] for g in measured.generate]),
        "decode_tokens_per_s": _median([g["decode_tokens_per_s"] for g in measured.generate]),
        "torch_prefill_ms": _median([g["prefill_ms"] for g in measured.torch_generate]),
        "torch_decode_tokens_per_s": _median([g["decode_tokens_per_s"] for g in measured.torch_generate]),
        "generate_tokens_match": measured.generate[0]["tokens"] == measured.torch_generate[0]["tokens"],
    }
    out["prefill_over_torch"] = out["prefill_ms"] / out["torch_prefill_ms"]
    out["decode_rate_over_torch"] = out["decode_tokens_per_s"] / out["torch_decode_tokens_per_s"]
    return out


def llm_figures(description: str, exported: LlmExported, measured: LlmMeasured) -> Dict[str, Any]:
    """Medians and ratios of one run (compare ratios only within it)."""
    runs = measured.runs
    out: Dict[str, Any] = {"description": description, "export_s": exported.export_s}
    for tokens in (1, 32):
        out[f"latency_ms_t{tokens}"] = _median_of_medians(runs[f"lora_t{tokens}"], "latency_ms")
        out[f"latency_ms_t{tokens}_foundation"] = _median_of_medians(runs[f"foundation_t{tokens}"], "latency_ms")
        out[f"torch_latency_ms_t{tokens}"] = _median(measured.torch_ms[("lora", tokens)])
        out[f"torch_latency_ms_t{tokens}_foundation"] = _median(measured.torch_ms[("foundation", tokens)])
        out[f"latency_t{tokens}_over_torch"] = out[f"latency_ms_t{tokens}"] / out[f"torch_latency_ms_t{tokens}"]
        out[f"latency_t{tokens}_foundation_over_torch"] = (
            out[f"latency_ms_t{tokens}_foundation"] / out[f"torch_latency_ms_t{tokens}_foundation"]
        )
        out[f"rss_ran_mb_t{tokens}"] = _median(
            [(r["rss_ran_kib"] - r["rss_trimmed_kib"]) / 1024.0 for r in runs[f"lora_t{tokens}"]]
        )
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


def _cell(value: Optional[Any]) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def format_llm_table(result: Dict[str, Any]) -> str:
    """The figures as a text table; rows not measured show '-', and why is listed below."""
    lines = [f"tiny-LLM: {result.get('description', '')}"]
    for label, key in TABLE + (PEER_TABLE if "peer" in result else ()):
        lines.append(label if key is None else f"{label:58s} {_cell(result.get(key)):>10}")
    for what, why in result.get("not_measured", {}).items():
        lines.append(f"not measured: {what}: {why}")
    return "\n".join(lines)
