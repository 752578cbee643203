"""The LoRA case's report: its figures as a text table, one column per model."""

from typing import Any, Dict

from edgeshare.bench._lora_figures import NOT_MEASURED
from edgeshare.bench._report import format_columns, present

__all__ = ["format_table"]

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

# Rows shown only when some model has the key (the peer is opt-in).
PEER_TABLE = (
    ("Against the peer, interleaved, ms", None),
    ("  peer", "peer"),
    ("  runtime, T=1, 1 thread", "peer_edgeshare_latency_ms_b1"),
    ("  peer, T=1, 1 thread", "peer_latency_ms_b1"),
    ("  runtime / peer, T=1, 1 thread", "latency_b1_over_peer"),
    ("  runtime, T=32, 1 thread", "peer_edgeshare_latency_ms_b32"),
    ("  peer, T=32, 1 thread", "peer_latency_ms_b32"),
    ("  runtime / peer, T=32, 1 thread", "latency_b32_over_peer"),
    ("  runtime, T=1, 2 threads", "peer_edgeshare_latency_ms_b1_2threads"),
    ("  peer, T=1, 2 threads", "peer_latency_ms_b1_2threads"),
    ("  runtime / peer, T=1, 2 threads", "latency_b1_2threads_over_peer"),
    ("  runtime, T=32, 2 threads", "peer_edgeshare_latency_ms_b32_2threads"),
    ("  peer, T=32, 2 threads", "peer_latency_ms_b32_2threads"),
    ("  runtime / peer, T=32, 2 threads", "latency_b32_2threads_over_peer"),
    ("  peer binding overhead (4x4 Linear)", "peer_binding_overhead_ms"),
    ("  runtime / (peer - binding), T=1", "latency_b1_over_peer_without_binding"),
    ("  peer weights in a .ptd", "peer_data_separation"),
    ("  peer foundation.ptd, MiB", "peer_ptd_mb"),
    ("  peer .pte (T=1), MiB", "peer_pte_mb_b1"),
    ("  peer export, s", "peer_export_s"),
    ("  peer max |error| vs torch, T=1", "peer_max_abs_error_b1"),
    ("  peer max |error| vs torch, T=32", "peer_max_abs_error_b32"),
    ("  peer stage (venv, export, timing), s", "peer_stage_s"),
)

BOUNDS_TABLE = (
    ("Bounds of this machine", None),
    ("  read bandwidth, 1 core, GB/s", "machine_read_gbps"),
    ("  XNNPACK FC in cache, 1 thread, GFLOP/s", "machine_fc_gflops_1thread"),
    ("  XNNPACK FC in cache, 2 threads, GFLOP/s", "machine_fc_gflops_2threads"),
    ("  weights read at T=1, MiB", "weight_mb_b1_read"),
    ("  T=1 read bound, ms", "bound_ms_b1_read"),
    ("  read bandwidth at the weights' size, GB/s", "read_gbps_at_weight_size"),
    ("  T=1 read bound from the LLC, ms", "bound_ms_b1_cached_read"),
    ("  GFLOP at T=32", "gflop_b32"),
    ("  T=32 compute bound, 1 thread, ms", "bound_ms_b32_fc_1thread"),
    ("  T=32 compute bound, 2 threads, ms", "bound_ms_b32_fc_2threads"),
)

BOUND_RATIO_TABLE = (
    ("Latency / bound (1.0 = at the bound)", None),
    ("  runtime, T=1", "latency_b1_over_read_bound"),
    ("  torch eager, T=1", "torch_latency_b1_over_read_bound"),
    ("  peer, T=1", "peer_latency_b1_over_read_bound"),
    ("  runtime, T=1, weights from the LLC", "latency_b1_over_cached_read_bound"),
    ("  torch eager, T=1, weights from the LLC", "torch_latency_b1_over_cached_read_bound"),
    ("  peer, T=1, weights from the LLC", "peer_latency_b1_over_cached_read_bound"),
    ("  runtime, T=32, 1 thread", "latency_b32_over_fc_bound"),
    ("  torch eager, T=32, 1 thread", "torch_latency_b32_over_fc_bound"),
    ("  peer, T=32, 1 thread", "peer_latency_b32_over_fc_bound"),
    ("  runtime, T=32, 2 threads", "latency_b32_2threads_over_fc_bound"),
    ("  torch eager, T=32, 2 threads", "torch_latency_b32_2threads_over_fc_bound"),
    ("  peer, T=32, 2 threads", "peer_latency_b32_2threads_over_fc_bound"),
)


def format_table(results: Dict[str, Dict[str, Any]]) -> str:
    """The figures of every model as a text table, one column per model."""
    models = list(results.values())
    rows = TABLE + present(PEER_TABLE, models) + present(BOUNDS_TABLE, models) + present(BOUND_RATIO_TABLE, models)
    lines = [format_columns(rows, results)]
    for name, r in results.items():
        lines.append(
            f"{name}: {r['description']}; medians of {r['repeats']} fresh processes per configuration, "
            f"{r['iterations_b1']} (T=1) / {r['iterations_b32']} (T=32) timed runs per process; "
            f"export {r['export_s']:.1f} s; cache empty after release: {r['cache_released']}"
        )
    if any("peer" in r for r in results.values()):
        lines.append(
            "peer: times Method.execute() through ExecuTorch's Python binding (portable_lib), outputs "
            "cloned; the 4x4 Linear row is that call's cost at least. Runtime: lora_runner in C++."
        )
    for what, why in NOT_MEASURED.items():
        lines.append(f"not measured: {what}: {why}")
    return "\n".join(lines)


