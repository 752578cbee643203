"""Smoke test of the LoRA benchmark: the demo only, minimal iterations, so that it cannot rot.

Checks that the report has every required key with a positive number; never asserts on timings."""

import json
import math
import os
import tempfile

import pytest
from edgeshare.bench import lora


def test_demo_report_has_every_key_with_positive_numbers() -> None:
    """One fresh process per configuration, one timed run each, a 16 MiB roofline: keys and signs
    only; without --peer, no peer key."""
    out = os.path.join(tempfile.mkdtemp(prefix="lora_bench_test_"), "bench.json")
    status = lora.main(
        [
            "--json",
            out,
            "--models",
            "demo",
            "--repeats",
            "1",
            "--iterations",
            "1",
            "--iterations-b32",
            "1",
            "--warmup",
            "0",
            "--roofline-read-mib",
            "16",
            "--roofline-fc-iterations",
            "2",
            "--quiet",
        ]
    )
    assert status == 0
    with open(out) as f:
        report = json.load(f)
    assert list(report) == ["demo"]
    demo = report["demo"]
    for key in lora.REQUIRED_KEYS:
        value = demo.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value), (key, value)
        assert value > 0, (key, value)
    for key in (
        "rss_8_shared_over_unshared",
        "latency_b32_over_torch",
        "latency_ms_b1_2threads",
        "latency_ms_b32_2threads",
        "torch_latency_ms_b32_2threads",
        "load_first_verified_over_unverified",
        "load_first_verified_over_unverified_2threads",
    ):
        assert isinstance(demo[key], float) and demo[key] > 0, (key, demo[key])
    for key in lora.ROOFLINE_KEYS:
        value = demo.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (key, value)
    assert not [key for key in lora.PEER_KEYS if key in demo], "the peer is opt-in (--peer)"
    assert demo["cache_released"] is True
    assert demo["not_measured"] == {}


def test_unknown_model_is_a_one_line_error(capsys: pytest.CaptureFixture) -> None:
    """A typo in --models exits 1 before exporting anything."""
    assert lora.main(["--models", "demo,nope", "--quiet"]) == 1
    assert "unknown model(s) nope" in capsys.readouterr().err


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
