"""Smoke test of the tiny-LLM case's plumbing: the --small model, one repeat, one timed run each.

Checks that the report has every required key with a positive number and that what is not measured
yet says why; never asserts on timings."""

import json
import math
import os
import tempfile

import pytest
from edgeshare.bench import llm


def test_small_report_has_every_key_with_positive_numbers() -> None:
    out = os.path.join(tempfile.mkdtemp(prefix="llm_bench_test_"), "llm.json")
    status = llm.main(
        [
            "--small",
            "--json",
            out,
            "--repeats",
            "1",
            "--iterations",
            "1",
            "--iterations-t32",
            "1",
            "--warmup",
            "0",
            "--new-tokens",
            "4",
            "--quiet",
        ]
    )
    assert status == 0
    with open(out) as f:
        report = json.load(f)
    assert list(report) == ["tiny-llm"]
    result = report["tiny-llm"]
    for key in llm.LLM_REQUIRED_KEYS:
        value = result.get(key)
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, (key, value)
    assert "forward" in result["methods"]
    assert result["planned_mb_forward"] > 0
    assert "forward_cached" in result["methods"]
    assert result["decode_tokens_per_s"] > 0 and result["prefill_ms"] > 0
    assert result["generate_tokens_match"] is True
    assert result["not_measured"] == {}
    assert result["adapter_swap_model"] == "demo"  # --small swaps the demo model's adapters
    for key in llm.SWAP_KEYS + ("adapter_swap_ms_unverified", "adapter_swap_ms_first_bind"):
        assert isinstance(result[key], float) and result[key] > 0, (key, result[key])
    for key in ("swappable_prefill_over_own", "swappable_decode_rate_over_own", "adapter_swap_ms_llm_first_bind"):
        assert isinstance(result[key], float) and result[key] > 0, (key, result[key])
    assert result["swappable_tokens_match_own"] is True


def test_bad_repeats_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        llm.main(["--small", "--repeats", "0", "--quiet"])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
