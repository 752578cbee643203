"""The benchmark's first-load figures: the first load (opening foundation.ptd and loading program 1,
which fetches, hashes and packs every foundation weight) with content verification on and off
(lora_runner --no-verify: trusted files), at 1 and 2 threads, in fresh processes, and what the
second thread buys (2 threads over 1, verified and unverified)."""

from typing import Any, Dict, List

from edgeshare.bench._lora_export import Exported
from edgeshare.bench._runner import BenchError, RunnerConfig, run_runner
from edgeshare.bench._stats import median

__all__ = ["VERIFICATION_KEYS", "format_verification", "measure_verification"]

# Keys this stage adds to each model's figures (bench/lora_test.py checks them).
VERIFICATION_KEYS = (
    "load_ms_first_verified",
    "load_ms_first_unverified",
    "load_first_verified_over_unverified",
    "load_ms_first_verified_2threads",
    "load_ms_first_unverified_2threads",
    "load_first_verified_over_unverified_2threads",
    "load_first_verified_2threads_over_1thread",
    "load_first_unverified_2threads_over_1thread",
)


def _first_load_ms(report: Dict[str, Any]) -> float:
    return float(report["data_open_ms"] + report["load_ms"][0])


def measure_verification(exported: Exported, repeats: int) -> Dict[str, float]:
    """First-load medians with verification on and off, and their ratios, at 1 and 2 threads.

    Args:
      exported: the model's files (its first T=1 program is loaded).
      repeats: fresh processes per configuration, round-robin.

    Returns:
      VERIFICATION_KEYS -> ms or ratio.

    Raises:
      BenchError: a runner process failed.
    """
    program = exported.programs_b1[:1]
    samples: Dict[str, List[float]] = {}
    for _ in range(repeats):
        for threads, suffix in ((1, ""), (2, "_2threads")):
            for verify in (True, False):
                name = f"load_ms_first_{'verified' if verify else 'unverified'}{suffix}"
                report = run_runner(RunnerConfig(program, [exported.foundation], threads=threads, verify=verify))
                if report.get("verify") is not verify:
                    raise BenchError(f"lora_runner reported verify={report.get('verify')}, asked {verify}")
                samples.setdefault(name, []).append(_first_load_ms(report))
    out = {name: median(values) for name, values in samples.items()}
    for suffix in ("", "_2threads"):
        out[f"load_first_verified_over_unverified{suffix}"] = (
            out[f"load_ms_first_verified{suffix}"] / out[f"load_ms_first_unverified{suffix}"]
        )
    for kind in ("verified", "unverified"):
        out[f"load_first_{kind}_2threads_over_1thread"] = (
            out[f"load_ms_first_{kind}_2threads"] / out[f"load_ms_first_{kind}"]
        )
    return out


def format_verification(results: Dict[str, Dict[str, Any]]) -> str:
    """One line per model: first-load ms verified / unverified and the ratio, 1 and 2 threads."""
    lines = ["First load, content verification on / off (ms, ratio):"]
    for name, r in results.items():
        lines.append(
            f"  {name}: 1 thread {r['load_ms_first_verified']:.1f} / {r['load_ms_first_unverified']:.1f}"
            f" = {r['load_first_verified_over_unverified']:.2f}x; 2 threads"
            f" {r['load_ms_first_verified_2threads']:.1f} / {r['load_ms_first_unverified_2threads']:.1f}"
            f" = {r['load_first_verified_over_unverified_2threads']:.2f}x; 2 threads over 1:"
            f" {r['load_first_verified_2threads_over_1thread']:.2f}x verified,"
            f" {r['load_first_unverified_2threads_over_1thread']:.2f}x unverified"
        )
    return "\n".join(lines)
