"""The benchmark's bounds: the machine's read bandwidth and in-cache GFLOP/s (bench/roofline), and
each latency as a multiple of the bound it cannot beat.

A T=1 forward pass reads every weight once: its latency is at least weight bytes / single-core read
bandwidth, from memory (a buffer well past the LLC) or, when the weights fit the LLC and the pass
runs again and again, from the LLC (a buffer of the weights' size, read repeatedly). A T=32 pass is
compute-bound: at least FLOPs / the in-cache fully connected GFLOP/s of the same XNNPACK. Ratios are
latency / bound (1.0 would be at the bound; higher is slower).
"""

import dataclasses
import math
import os
from typing import Any, Dict, List, Tuple

from edgeshare.bench._lora_export import Exported
from edgeshare.bench._lora_model import BenchModel
from edgeshare.bench._runner import json_report, run_process
from torch import nn

__all__ = [
    "ROOFLINE_KEYS",
    "RooflineOptions",
    "add_bounds",
    "best_of",
    "bound_figures",
    "measure_machine",
    "model_work",
]

# The keys every model's result has once the machine is measured (bench/lora_test.py checks them).
ROOFLINE_KEYS = (
    "machine_read_gbps",
    "machine_fc_gflops_1thread",
    "machine_fc_gflops_2threads",
    "weight_mb_b1_read",
    "gflop_b32",
    "bound_ms_b1_read",
    "read_gbps_at_weight_size",
    "bound_ms_b1_cached_read",
    "latency_b1_over_cached_read_bound",
    "torch_latency_b1_over_cached_read_bound",
    "bound_ms_b32_fc_1thread",
    "bound_ms_b32_fc_2threads",
    "latency_b1_over_read_bound",
    "latency_b32_over_fc_bound",
    "latency_b32_2threads_over_fc_bound",
    "torch_latency_b1_over_read_bound",
    "torch_latency_b32_over_fc_bound",
)


@dataclasses.dataclass
class RooflineOptions:
    """How long bench/roofline measures.

    Attributes:
      read_mib: the buffer summed for the read bandwidth (default 1 GiB, past any LLC here).
      cached_read_mib: a buffer read the same way (a model's weight size: found in the LLC if it fits).
      read_passes: passes over each buffer (the best counts).
      fc_iterations: fully connected runs per thread count.
    """

    read_mib: int = 1024
    cached_read_mib: int = 64
    read_passes: int = 5
    fc_iterations: int = 50


def _roofline_path() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roofline")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //bench:roofline")
    return path


def measure_machine(options: RooflineOptions) -> Dict[str, float]:
    """Runs bench/roofline once -> its figures under "machine_" keys.

    Raises:
      BenchError: the binary failed or printed no report.
    """
    args = [
        _roofline_path(),
        "--read-mib",
        str(options.read_mib),
        "--cached-read-mib",
        str(options.cached_read_mib),
        "--read-passes",
        str(options.read_passes),
        "--fc-iterations",
        str(options.fc_iterations),
    ]
    report = json_report(run_process(args), "roofline")
    del report["peak_rss_kib"]  # the binary's own memory bounds nothing
    return {f"machine_{key}": value for key, value in report.items()}


def best_of(runs: List[Dict[str, float]]) -> Dict[str, float]:
    """The highest of each figure over several roofline runs (a bound is the best the machine did:
    on a shared machine a busy neighbour only lowers it), and how many runs there were. The cached
    read, measured at each model's own size, is left to bound_figures."""
    best = {key: max(run[key] for run in runs) for key in runs[0] if not key.startswith("machine_cached_read")}
    best["machine_runs"] = len(runs)
    return best


def model_work(model: BenchModel, exported: Exported) -> Dict[str, float]:
    """Bytes a T=1 pass reads (foundation + the first adapter) and GFLOPs of a T=32 pass (2 per
    multiply-add of every 2-D weight: the Linears and LoRA's A and B; norms and activations are
    left out, a few thousandths of the total)."""
    first = next(iter(model.adapters))
    sizes = exported.result_b1
    module: nn.Module = sizes.modules[first]
    macs_per_token = sum(p.numel() for p in module.parameters() if p.dim() == 2)
    return {
        "weight_mb_b1_read": (sizes.shared_bytes + sizes.adapter_bytes[first]) / (1024.0 * 1024.0),
        "gflop_b32": 2.0 * 32 * macs_per_token / 1e9,
    }


def _over(out: Dict[str, Any], latency: str, bound: str) -> float:
    value, limit = out.get(latency), out.get(bound)
    if not isinstance(value, (int, float)) or not isinstance(limit, (int, float)) or limit <= 0:
        return float("nan")
    return float(value) / float(limit)


# Ratio key -> (latency key, bound key); latencies that are absent (no peer) are skipped.
_BOUND_RATIOS: Dict[str, Tuple[str, str]] = {
    "latency_b1_over_read_bound": ("latency_ms_b1", "bound_ms_b1_read"),
    "latency_b32_over_fc_bound": ("latency_ms_b32", "bound_ms_b32_fc_1thread"),
    "latency_b32_2threads_over_fc_bound": ("latency_ms_b32_2threads", "bound_ms_b32_fc_2threads"),
    "torch_latency_b1_over_read_bound": ("torch_latency_ms_b1", "bound_ms_b1_read"),
    "latency_b1_over_cached_read_bound": ("latency_ms_b1", "bound_ms_b1_cached_read"),
    "torch_latency_b1_over_cached_read_bound": ("torch_latency_ms_b1", "bound_ms_b1_cached_read"),
    "peer_latency_b1_over_cached_read_bound": ("peer_latency_ms_b1", "bound_ms_b1_cached_read"),
    "torch_latency_b32_over_fc_bound": ("torch_latency_ms_b32", "bound_ms_b32_fc_1thread"),
    "torch_latency_b32_2threads_over_fc_bound": ("torch_latency_ms_b32_2threads", "bound_ms_b32_fc_2threads"),
    "peer_latency_b1_over_read_bound": ("peer_latency_ms_b1", "bound_ms_b1_read"),
    "peer_latency_b32_over_fc_bound": ("peer_latency_ms_b32", "bound_ms_b32_fc_1thread"),
    "peer_latency_b32_2threads_over_fc_bound": ("peer_latency_ms_b32_2threads", "bound_ms_b32_fc_2threads"),
}


def bound_figures(out: Dict[str, Any], machine: Dict[str, float], cached_read_gbps: float) -> Dict[str, Any]:
    """The machine's figures, the bounds of the model whose figures (with model_work's) are `out`,
    and every latency of `out` over its bound.

    Args:
      out: the model's figures.
      machine: best_of the roofline runs.
      cached_read_gbps: the read bandwidth over a buffer of the model's weight size.
    """
    figures: Dict[str, Any] = dict(machine)
    weight_bytes = out["weight_mb_b1_read"] * 1024.0 * 1024.0
    figures["bound_ms_b1_read"] = weight_bytes / (machine["machine_read_gbps"] * 1e6)
    figures["read_gbps_at_weight_size"] = cached_read_gbps
    figures["bound_ms_b1_cached_read"] = weight_bytes / (cached_read_gbps * 1e6)
    for threads in ("1thread", "2threads"):
        gflop_per_ms = machine[f"machine_fc_gflops_{threads}"] / 1e3
        figures[f"bound_ms_b32_fc_{threads}"] = out["gflop_b32"] / gflop_per_ms
    merged = {**out, **figures}
    for key, (latency, bound) in _BOUND_RATIOS.items():
        if latency in merged:
            figures[key] = _over(merged, latency, bound)
    return figures


def add_bounds(results: Dict[str, Dict[str, Any]], options: RooflineOptions, before: Dict[str, float]) -> None:
    """Measures the machine again once per model (the cached read at that model's weight size), then
    adds every model's bound figures, with the best of those runs and `before`.

    Raises:
      BenchError: a roofline run failed.
    """
    runs = {
        name: measure_machine(
            dataclasses.replace(options, cached_read_mib=max(1, math.ceil(figures["weight_mb_b1_read"])))
        )
        for name, figures in results.items()
    }
    machine = best_of([before, *runs.values()])
    for name, figures in results.items():
        figures.update(bound_figures(figures, machine, runs[name]["machine_cached_read_gbps"]))
