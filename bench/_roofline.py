"""The benchmark's bounds: the machine's read bandwidth and in-cache GFLOP/s (bench/roofline), and
each latency as a multiple of the bound it cannot beat.

A T=1 forward pass reads every weight once: its latency is at least weight bytes / single-core read
bandwidth. A T=32 pass is compute-bound: at least FLOPs / the in-cache fully connected GFLOP/s of
the same XNNPACK. Ratios are latency / bound (1.0 would be at the bound; higher is slower).
"""

import dataclasses
import json
import os
import subprocess
from typing import Any, Dict, List, Tuple

from torch import nn

from edgeshare.bench._export import BenchError, Exported
from edgeshare.bench._models import BenchModel

__all__ = ["ROOFLINE_KEYS", "RooflineOptions", "best_of", "bound_figures", "measure_machine", "model_work"]

# The keys every model's result has once the machine is measured (bench/lora_test.py checks them).
ROOFLINE_KEYS = (
    "machine_read_gbps",
    "machine_fc_gflops_1thread",
    "machine_fc_gflops_2threads",
    "weight_mb_b1_read",
    "gflop_b32",
    "bound_ms_b1_read",
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
      read_passes: passes over it (the best counts).
      fc_iterations: fully connected runs per thread count.
    """

    read_mib: int = 1024
    read_passes: int = 5
    fc_iterations: int = 50


def _roofline_path() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roofline")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //bench:lora_lib")
    return path


def measure_machine(options: RooflineOptions) -> Dict[str, float]:
    """Runs bench/roofline once -> its figures under "machine_" keys.

    Raises:
      BenchError: the binary failed or printed no report.
    """
    args = [_roofline_path(), "--read-mib", str(options.read_mib), "--read-passes", str(options.read_passes),
            "--fc-iterations", str(options.fc_iterations)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"roofline failed ({proc.returncode}): {proc.stderr.strip()}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"roofline printed no report: {proc.stdout!r}")
    return {f"machine_{key}": value for key, value in json.loads(lines[-1]).items()}


def best_of(runs: List[Dict[str, float]]) -> Dict[str, float]:
    """The highest of each figure over several roofline runs (a bound is the best the machine did:
    on a shared machine a busy neighbour only lowers it), and how many runs there were."""
    best = {key: max(run[key] for run in runs) for key in runs[0]}
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
    "torch_latency_b32_over_fc_bound": ("torch_latency_ms_b32", "bound_ms_b32_fc_1thread"),
    "torch_latency_b32_2threads_over_fc_bound": ("torch_latency_ms_b32_2threads", "bound_ms_b32_fc_2threads"),
    "peer_latency_b1_over_read_bound": ("peer_latency_ms_b1", "bound_ms_b1_read"),
    "peer_latency_b32_over_fc_bound": ("peer_latency_ms_b32", "bound_ms_b32_fc_1thread"),
    "peer_latency_b32_2threads_over_fc_bound": ("peer_latency_ms_b32_2threads", "bound_ms_b32_fc_2threads"),
}


def bound_figures(out: Dict[str, Any], machine: Dict[str, float]) -> Dict[str, Any]:
    """The machine's figures, the bounds of the model whose figures (with model_work's) are `out`,
    and every latency of `out` over its bound."""
    figures: Dict[str, Any] = dict(machine)
    read_bytes_per_ms = machine["machine_read_gbps"] * 1e6
    figures["bound_ms_b1_read"] = out["weight_mb_b1_read"] * 1024.0 * 1024.0 / read_bytes_per_ms
    for threads in ("1thread", "2threads"):
        gflop_per_ms = machine[f"machine_fc_gflops_{threads}"] / 1e3
        figures[f"bound_ms_b32_fc_{threads}"] = out["gflop_b32"] / gflop_per_ms
    merged = {**out, **figures}
    for key, (latency, bound) in _BOUND_RATIOS.items():
        if latency in merged:
            figures[key] = _over(merged, latency, bound)
    return figures
