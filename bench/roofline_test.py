"""bench/roofline and the bounds built on it: the binary's report, its errors, and the bound arithmetic.

Never asserts on the machine's speed, only that the figures exist, are positive and combine right."""

import math
import subprocess

import pytest
from edgeshare.bench._runner import BenchError
from edgeshare.bench._roofline import RooflineOptions, _roofline_path, best_of, bound_figures, measure_machine


def test_tiny_run_reports_positive_bandwidth_and_gflops() -> None:
    """16 MiB, 2 FC runs: every figure is there and positive."""
    machine = measure_machine(RooflineOptions(read_mib=16, cached_read_mib=2, read_passes=2, fc_iterations=2))
    for key in (
        "machine_read_gbps",
        "machine_cached_read_gbps",
        "machine_fc_gflops_1thread",
        "machine_fc_gflops_2threads",
    ):
        assert machine[key] > 0 and math.isfinite(machine[key]), (key, machine[key])
    assert (machine["machine_fc_batch"], machine["machine_fc_in"], machine["machine_fc_out"]) == (32, 1024, 2048)
    assert (machine["machine_read_mib"], machine["machine_cached_read_mib"]) == (16, 2)


def test_unknown_flag_is_a_one_line_error() -> None:
    """A typo exits 1 and names the flag."""
    proc = subprocess.run([_roofline_path(), "--read-gib", "1"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "roofline: error: unknown flag --read-gib"


def test_best_of_keeps_the_highest_of_each_figure() -> None:
    """A busy neighbour only lowers a run's figures: the bound is the best run."""
    runs = [
        {"machine_read_gbps": 8.0, "machine_fc_gflops_1thread": 90.0, "machine_cached_read_gbps": 30.0},
        {"machine_read_gbps": 9.0, "machine_fc_gflops_1thread": 60.0, "machine_cached_read_gbps": 20.0},
    ]
    assert best_of(runs) == {"machine_read_gbps": 9.0, "machine_fc_gflops_1thread": 90.0, "machine_runs": 2}


def test_bounds_are_bytes_over_bandwidth_and_flops_over_throughput() -> None:
    """1 MiB at 1 GB/s is 1.048576 ms; 1 GFLOP at 100 GFLOP/s is 10 ms; ratios are latency / bound."""
    machine = {"machine_read_gbps": 1.0, "machine_fc_gflops_1thread": 100.0, "machine_fc_gflops_2threads": 200.0}
    out = {
        "weight_mb_b1_read": 1.0,
        "gflop_b32": 1.0,
        "latency_ms_b1": 2.097152,
        "latency_ms_b32": 20.0,
        "peer_latency_ms_b32": 10.0,
    }
    figures = bound_figures(out, machine, 2.0)
    assert figures["bound_ms_b1_read"] == pytest.approx(1.048576)
    assert figures["bound_ms_b32_fc_1thread"] == pytest.approx(10.0)
    assert figures["bound_ms_b32_fc_2threads"] == pytest.approx(5.0)
    assert figures["latency_b1_over_read_bound"] == pytest.approx(2.0)
    assert figures["bound_ms_b1_cached_read"] == pytest.approx(0.524288)
    assert figures["latency_b1_over_cached_read_bound"] == pytest.approx(4.0)
    assert figures["latency_b32_over_fc_bound"] == pytest.approx(2.0)
    assert figures["peer_latency_b32_over_fc_bound"] == pytest.approx(1.0)
    assert "peer_latency_b1_over_read_bound" not in figures  # No such latency, no ratio.


def test_failing_binary_raises_bench_error() -> None:
    """A flag the binary rejects comes back as BenchError with its message."""
    with pytest.raises(BenchError, match="must be a positive integer"):
        measure_machine(RooflineOptions(read_mib=0))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
