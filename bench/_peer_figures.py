"""The peer's figures: medians of the interleaved samples, edgeshare/peer ratios, the binding's cost."""

import statistics
from typing import Any, Dict, List, Sequence, Tuple

from edgeshare.bench._peer import PeerMeasured

__all__ = ["PEER_KEYS", "peer_figures"]

MIB = 1024.0 * 1024.0
# (tokens, threads) -> the suffix of the latency keys (as in _figures: b1, b32, b1_2threads, ...).
_SUFFIX: Dict[Tuple[int, int], str] = {(1, 1): "b1", (32, 1): "b32", (1, 2): "b1_2threads", (32, 2): "b32_2threads"}

# The keys a model's result has with --peer (bench/lora_test.py checks none of them: opt-in).
PEER_KEYS = tuple(
    [f"peer_latency_ms_{s}" for s in _SUFFIX.values()]
    + [f"peer_edgeshare_latency_ms_{s}" for s in _SUFFIX.values()]
    + [f"latency_{s}_over_peer" for s in _SUFFIX.values()]
    + ["peer", "peer_binding_overhead_ms", "peer_data_separation", "peer_ptd_mb", "peer_pte_mb_b1", "peer_stage_s"]
)


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _latencies(measured: PeerMeasured) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for config, suffix in _SUFFIX.items():
        ours, theirs = _median(measured.edgeshare_ms[config]), _median(measured.peer_ms[config])
        out[f"peer_edgeshare_latency_ms_{suffix}"] = ours
        out[f"peer_latency_ms_{suffix}"] = theirs
        out[f"latency_{suffix}_over_peer"] = ours / theirs if theirs > 0 else float("nan")
    return out


def _binding(measured: PeerMeasured, out: Dict[str, float]) -> Dict[str, float]:
    """The tiny method's execute() time, and the T=1 ratio with that much taken off the peer."""
    tiny = _median(measured.tiny_ms)
    peer_b1 = out["peer_latency_ms_b1"] - tiny
    return {
        "peer_binding_overhead_ms": tiny,
        "peer_binding_overhead_ms_min": min(measured.tiny_ms) if measured.tiny_ms else float("nan"),
        "latency_b1_over_peer_without_binding": (
            out["peer_edgeshare_latency_ms_b1"] / peer_b1 if peer_b1 > 0 else float("nan")
        ),
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
