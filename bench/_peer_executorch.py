"""The LoRA case's peer (opt-in, `bench/lora --peer executorch`): ExecuTorch 1.5.1 from PyPI lowers
the same eager modules (same weights) with its XNNPACK flow and program-data separation, in its own
venv (bench/_peer.py; torch==2.13.0 executorch==1.5.1), as a long-lived bench/executorch_peer.py.
The bench interleaves: edgeshare (a fresh lora_runner process), then the peer, for each
configuration and repeat, so that slow phases of a shared machine hit both alike. Figures: medians
of the interleaved samples, edgeshare/peer ratios, the binding's cost.
"""

import dataclasses
import os
import time
from typing import Any, Callable, Dict, List, Tuple

import torch
from edgeshare.bench._lora_export import Exported
from edgeshare.bench._lora_model import BenchModel
from edgeshare.bench._peer import PeerProcess, VenvSpec, peer_python, peer_script, pip_install, save_program, write_manifest
from edgeshare.bench._runner import BenchError, RunnerConfig, run_runner
from edgeshare.bench._stats import MIB, median, ratio
from torch import nn

__all__ = ["CONFIGS", "PEERS", "PEER_KEYS", "VENV", "PeerMeasured", "measure_peer", "peer_figures", "save_peer_programs"]

VENV = VenvSpec("executorch-1.5.1", (pip_install("torch==2.13.0", "executorch==1.5.1"),))
PEERS = ("executorch",)
TINY = "tiny"  # A 4x4 Linear on one row: execute() of it estimates the Python binding's overhead.
# (tokens, threads) the peer is timed at, in this order within each repeat.
CONFIGS: Tuple[Tuple[int, int], ...] = ((1, 1), (32, 1), (1, 2), (32, 2))


def _save(module: nn.Module, x: torch.Tensor, out_dir: str, name: str, separate: bool) -> Dict[str, Any]:
    return {**save_program(module, (x,), out_dir, name, strict=True), "separate": separate}


def save_peer_programs(model: BenchModel, exported: Exported, out_dir: str) -> Dict[str, Dict[str, Any]]:
    """Saves what the peer lowers: the first adapter's eager module (the one edgeshare times) at
    T=1 and T=32, and the tiny module -> the manifest's "programs"."""
    os.makedirs(out_dir, exist_ok=True)
    module = exported.result_b1.modules[next(iter(model.adapters))].eval()
    specs = {f"b{t}": _save(module, model.make_input(t), out_dir, f"b{t}", True) for t in (1, 32)}
    tiny = nn.Linear(4, 4).eval()
    specs[TINY] = _save(tiny, torch.ones(1, 4), out_dir, TINY, False)
    return specs


@dataclasses.dataclass
class PeerMeasured:
    """Interleaved samples, keyed (tokens, threads).

    Attributes:
      name: the peer's name and version.
      edgeshare_ms: lora_runner samples taken just before the peer's.
      peer_ms: the peer's execute() samples.
      tiny_ms: execute() of the tiny module (1 thread): the binding's overhead.
      ready: the peer's ready line (file sizes, export times).
      wall_s: seconds the whole peer stage took (venv, export, timings).
    """

    name: str
    edgeshare_ms: Dict[Tuple[int, int], List[float]]
    peer_ms: Dict[Tuple[int, int], List[float]]
    tiny_ms: List[float]
    ready: Dict[str, Any]
    wall_s: float


def _interleave(
    peer: PeerProcess, exported: Exported, repeats: int, iterations: Dict[int, int], warmup: int
) -> Tuple[Dict[Tuple[int, int], List[float]], Dict[Tuple[int, int], List[float]]]:
    programs = {1: exported.programs_b1[0], 32: exported.program_b32}
    ours: Dict[Tuple[int, int], List[float]] = {c: [] for c in CONFIGS}
    theirs: Dict[Tuple[int, int], List[float]] = {c: [] for c in CONFIGS}
    for _ in range(repeats):
        for tokens, threads in CONFIGS:
            n = iterations[tokens]
            report = run_runner(RunnerConfig([programs[tokens]], [exported.foundation], True, n, warmup, threads))
            ours[(tokens, threads)] += report["latency_ms"]
            theirs[(tokens, threads)] += peer.time(f"b{tokens}", threads, n, warmup)
    return ours, theirs


def measure_peer(
    peer_name: str,
    model: BenchModel,
    exported: Exported,
    work_dir: str,
    repeats: int,
    n1: int,
    n32: int,
    warmup: int,
    log: Callable[[str], None] = lambda message: None,
) -> PeerMeasured:
    """Lowers the model with the peer and times it interleaved with edgeshare.

    Raises:
      BenchError: the venv, the peer's export or load, or a timing failed (the message says which).
    """
    if peer_name not in PEERS:
        raise BenchError(f"unknown peer '{peer_name}'; choose from {', '.join(PEERS)}")
    start = time.perf_counter()
    python = peer_python(VENV, log)
    folder = os.path.join(work_dir, f"peer_{peer_name}")
    manifest_path = write_manifest(folder, {"out_dir": folder, "programs": save_peer_programs(model, exported, folder)})
    script = peer_script("executorch_peer.py")
    log(f"[{model.name}] peer {peer_name}: lowering with its XNNPACK flow")
    peer = PeerProcess(python, script, manifest_path, os.path.join(folder, "peer.log"))
    try:
        log(f"[{model.name}] peer {peer_name}: timing interleaved with edgeshare ({repeats} repeats)")
        ours, theirs = _interleave(peer, exported, repeats, {1: n1, 32: n32}, warmup)
        tiny = peer.time(TINY, 1, max(200, n1), max(warmup, 10))
    finally:
        peer.close()
    name = f"{peer_name} {str(peer.ready.get('executorch', '?')).split('+')[0]}"
    return PeerMeasured(name, ours, theirs, tiny, peer.ready, time.perf_counter() - start)


# (tokens, threads) -> the suffix of the latency keys (as in _figures: b1, b32, b1_2threads, ...).
_SUFFIX: Dict[Tuple[int, int], str] = {(1, 1): "b1", (32, 1): "b32", (1, 2): "b1_2threads", (32, 2): "b32_2threads"}

# The keys a model's result has with --peer (bench/lora_test.py checks none of them: opt-in).
PEER_KEYS = tuple(
    [f"peer_latency_ms_{s}" for s in _SUFFIX.values()]
    + [f"peer_edgeshare_latency_ms_{s}" for s in _SUFFIX.values()]
    + [f"latency_{s}_over_peer" for s in _SUFFIX.values()]
    + ["peer", "peer_binding_overhead_ms", "peer_data_separation", "peer_ptd_mb", "peer_pte_mb_b1", "peer_stage_s"]
)


def _latencies(measured: PeerMeasured) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for config, suffix in _SUFFIX.items():
        ours, theirs = median(measured.edgeshare_ms[config]), median(measured.peer_ms[config])
        out[f"peer_edgeshare_latency_ms_{suffix}"] = ours
        out[f"peer_latency_ms_{suffix}"] = theirs
        out[f"latency_{suffix}_over_peer"] = ratio(ours, theirs)
    return out


def _binding(measured: PeerMeasured, out: Dict[str, float]) -> Dict[str, float]:
    """The tiny method's execute() time, and the T=1 ratio with that much taken off the peer."""
    tiny = median(measured.tiny_ms)
    peer_b1 = out["peer_latency_ms_b1"] - tiny
    return {
        "peer_binding_overhead_ms": tiny,
        "peer_binding_overhead_ms_min": min(measured.tiny_ms) if measured.tiny_ms else float("nan"),
        "latency_b1_over_peer_without_binding": ratio(out["peer_edgeshare_latency_ms_b1"], max(peer_b1, 0.0)),
    }


def _files(ready: Dict[str, Any]) -> Dict[str, Any]:
    programs: Dict[str, Dict[str, Any]] = ready["programs"]
    b1 = programs["b1"]
    export_s: List[float] = [p["export_s"] for name, p in programs.items() if name != "tiny"]
    return {
        "peer_data_separation": b1["ptd"] is not None,
        "peer_ptd_mb": b1["ptd_bytes"] / MIB,
        "peer_pte_mb_b1": b1["pte_bytes"] / MIB,
        "peer_export_s": sum(export_s),
        "peer_max_abs_error_b1": float(b1.get("max_abs_error", float("nan"))),
        "peer_max_abs_error_b32": float(programs["b32"].get("max_abs_error", float("nan"))),
    }


def peer_figures(measured: PeerMeasured) -> Dict[str, Any]:
    """The peer's keys (PEER_KEYS and more) for one model.

    Ratios are edgeshare / peer over samples taken interleaved in the same run (below 1: edgeshare
    is faster). peer_binding_overhead_ms is execute() of a 4x4 Linear on one row: what calling
    through the Python binding (argument conversion, output copy) costs at least, per call.
    """
    out: Dict[str, Any] = {"peer": measured.name, "peer_stage_s": measured.wall_s}
    latencies = _latencies(measured)
    out.update(latencies)
    out.update(_binding(measured, latencies))
    out.update(_files(measured.ready))
    out["peer_samples_per_config"] = len(measured.peer_ms[(1, 1)])
    return out
