"""The tiny-LLM case's report: its figures as labelled rows, the peers' rows when a peer ran."""

from typing import Any, Dict

from edgeshare.bench._report import format_rows

__all__ = ["format_llm_table"]

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
    ("Generation (prompt 32, greedy, 1 thread)", None),
    ("  runtime prefill ms", "prefill_ms"),
    ("  eager (own KV cache) prefill ms", "torch_prefill_ms"),
    ("  runtime / eager prefill", "prefill_over_torch"),
    ("  runtime decode tokens/s", "decode_tokens_per_s"),
    ("  eager decode tokens/s", "torch_decode_tokens_per_s"),
    ("  runtime / eager decode tokens/s", "decode_rate_over_torch"),
    ("  tokens equal to eager", "generate_tokens_match"),
    ("Adapter swap (Method::rebind_data, 1 thread)", None),
    ("  reference model, ms per swap (goal <= 0.15)", "adapter_swap_ms"),
    ("  the same, a data file's first bind (SHA-256 of its bytes)", "adapter_swap_ms_first_bind"),
    ("  the same, --no-verify (no SHA-256 of the new bytes)", "adapter_swap_ms_unverified"),
    ("  reference model, adapter .ptd MiB", "adapter_swap_mb"),
    ("  tiny LLM, ms per swap (an adapter bound before, file open)", "adapter_swap_ms_llm"),
    ("  tiny LLM, a data file's first bind", "adapter_swap_ms_llm_first_bind"),
    ("  RSS MiB, lora.pte + 8 swappable adapters", "rss_mb_8_swappable"),
    ("  RSS MiB, 8 adapter programs (shared)", "rss_mb_8_programs"),
    ("  swappable / programs", "rss_8_swappable_over_programs"),
    ("  swappable program forward ms, T=1", "swappable_latency_ms_t1"),
    ("  swappable program forward ms, T=32", "swappable_latency_ms_t32"),
    ("  swappable program prefill ms", "swappable_prefill_ms"),
    ("  the adapter's own program prefill ms", "own_prefill_ms"),
    ("  swappable / own prefill (goal <= 1.03)", "swappable_prefill_over_own"),
    ("  swappable program decode tokens/s", "swappable_decode_tokens_per_s"),
    ("  the adapter's own program decode tokens/s", "own_decode_tokens_per_s"),
    ("  swappable / own decode tokens/s (goal >= 0.97)", "swappable_decode_rate_over_own"),
    ("  swappable tokens equal to the own program's", "swappable_tokens_match_own"),
)

# Shown when the run had --peer executorch.
EXECUTORCH_TABLE = (
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


def format_llm_table(result: Dict[str, Any]) -> str:
    """The figures as a text table; rows not measured show '-', and why is listed below."""
    rows = TABLE + (EXECUTORCH_TABLE if str(result.get("peer", "")).startswith("executorch") else ())
    return format_rows(f"tiny-LLM: {result.get('description', '')}", rows, result)
