"""The peer's figures and table rows from interleaved samples: ratios, the binding's cost, file sizes.

Runs without the peer (its venv is opt-in): the samples are plain numbers as bench/_peer_executorch.py collects
them; the real peer runs in `bench/lora --peer executorch`."""

import math

import pytest
from edgeshare.bench._lora_report import format_table
from edgeshare.bench._peer_executorch import CONFIGS, PEER_KEYS, PeerMeasured, peer_figures

MIB = 1024 * 1024


def _measured() -> PeerMeasured:
    ours = {config: [2.0, 3.0, 100.0] for config in CONFIGS}  # Median 3.0: one slow outlier ignored.
    theirs = {config: [4.0, 4.0, 5.0] for config in CONFIGS}
    ready = {
        "programs": {
            "b1": {
                "ptd": "/x/foundation.ptd",
                "ptd_bytes": 80 * MIB,
                "pte_bytes": 2 * MIB,
                "export_s": 7.0,
                "max_abs_error": 1e-6,
            },
            "b32": {"ptd": "/y/foundation.ptd", "ptd_bytes": 80 * MIB, "pte_bytes": 2 * MIB, "export_s": 8.0},
            "tiny": {"ptd": None, "ptd_bytes": 0, "pte_bytes": 1000, "export_s": 1.0},
        }
    }
    return PeerMeasured("executorch 1.5.1", ours, theirs, [1.0, 1.0, 2.0], ready, 30.0)


def test_ratios_are_edgeshare_over_peer_medians() -> None:
    """3.0 / 4.0 in every configuration; T=1 without the binding's 1.0 ms: 3.0 / 3.0."""
    figures = peer_figures(_measured())
    assert set(PEER_KEYS) <= set(figures)
    for suffix in ("b1", "b32", "b1_2threads", "b32_2threads"):
        assert figures[f"latency_{suffix}_over_peer"] == pytest.approx(0.75)
    assert figures["peer_binding_overhead_ms"] == pytest.approx(1.0)
    assert figures["latency_b1_over_peer_without_binding"] == pytest.approx(1.0)


def test_files_say_whether_the_weights_were_separated() -> None:
    """A .ptd for b1 means data separation; export time leaves the tiny module out."""
    figures = peer_figures(_measured())
    assert figures["peer_data_separation"] is True
    assert (figures["peer_ptd_mb"], figures["peer_pte_mb_b1"], figures["peer_export_s"]) == (80.0, 2.0, 15.0)
    assert figures["peer_max_abs_error_b1"] == 1e-6
    assert math.isnan(figures["peer_max_abs_error_b32"])  # Not checked: NaN, never a made-up 0.
    measured = _measured()
    measured.ready["programs"]["b1"]["ptd"] = None
    assert peer_figures(measured)["peer_data_separation"] is False


def test_table_shows_peer_rows_only_with_a_peer() -> None:
    """The peer's heading and rows appear when a model has its keys, and never otherwise."""
    base = {
        "description": "d",
        "repeats": 1,
        "iterations_b1": 1,
        "iterations_b32": 1,
        "export_s": 1.0,
        "cache_released": True,
    }
    without = format_table({"m": dict(base)})
    assert "Against the peer" not in without and "Bounds of this machine" not in without
    with_peer = format_table({"m": {**base, **peer_figures(_measured())}})
    assert "Against the peer, interleaved, ms" in with_peer
    assert "executorch 1.5.1" in with_peer
    row = [line for line in with_peer.splitlines() if line.startswith("  runtime / peer, T=32, 2 threads")]
    assert len(row) == 1 and math.isclose(float(row[0].split()[-1]), 0.75)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
