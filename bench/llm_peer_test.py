"""The tiny LLM's peer generation figures from plain samples: medians, ratio orientation, the
token check, table rows.

Runs without the peer (its venv is opt-in): the samples are what bench/executorch_peer.py and
tools/generate report; the real peer runs in `bench/llm --peer executorch`."""

import math
from typing import Any, Dict, List

import pytest
from edgeshare.bench._llm_peer_executorch import LLM_PEER_GENERATE_KEYS, generate_figures
from edgeshare.bench._llm_report import format_llm_table

TOKENS = [5, 7, 7, 1]
INFO = {"max_abs_error": 1e-5, "export_s": 30.0, "pte_bytes": 3 * 1024 * 1024}


def _runs(prefill: List[float], rate: List[float], tokens: List[int] = TOKENS) -> List[Dict[str, Any]]:
    return [{"tokens": list(tokens), "prefill_ms": p, "decode_tokens_per_s": r} for p, r in zip(prefill, rate)]


def test_ratios_are_medians_oriented_so_edgeshare_faster_is_below_one_for_prefill_above_one_for_decode() -> None:
    ours = _runs([10.0, 11.0, 90.0], [30.0, 33.0, 1.0])  # One slow run each: the median ignores it.
    theirs = _runs([20.0, 22.0, 21.0], [20.0, 22.0, 21.0])
    warm = _runs([15.0, 16.0, 17.0], [25.0, 26.0, 27.0])
    out = generate_figures(INFO, ours, theirs, warm, TOKENS)
    for key in LLM_PEER_GENERATE_KEYS:
        assert isinstance(out[key], float) and math.isfinite(out[key]), key
    assert out["peer_edgeshare_prefill_ms"] == 11.0 and out["peer_prefill_ms"] == 21.0
    assert out["prefill_over_peer"] == pytest.approx(11.0 / 21.0)
    assert out["decode_rate_over_peer"] == pytest.approx(30.0 / 21.0)
    assert out["peer_prefill_ms_warm"] == 16.0 and out["peer_decode_tokens_per_s_warm"] == 26.0
    assert out["peer_generate_tokens_match"] is True
    assert out["peer_pte_mb_cached"] == 3.0


def test_one_run_with_other_tokens_is_a_mismatch() -> None:
    runs = _runs([1.0], [1.0])
    other = _runs([1.0], [1.0], TOKENS[:-1] + [2])
    assert generate_figures(INFO, runs, runs, other, TOKENS)["peer_generate_tokens_match"] is False
    assert generate_figures(INFO, other, runs, runs, TOKENS)["peer_generate_tokens_match"] is False
    assert generate_figures(INFO, runs, runs, runs, [9] + TOKENS[1:])["peer_generate_tokens_match"] is False


def test_table_shows_the_generation_rows_with_the_peer() -> None:
    figures = generate_figures(INFO, _runs([10.0], [30.0]), _runs([20.0], [20.0]), _runs([15.0], [25.0]), TOKENS)
    table = format_llm_table({"peer": "executorch 1.5.1", **figures, "not_measured": {}})
    prefill = next(line for line in table.splitlines() if "ExecuTorch prefill (< 1" in line)
    assert prefill.split()[-1] == "0.500"
    decode = next(line for line in table.splitlines() if "ExecuTorch decode rate (> 1" in line)
    assert decode.split()[-1] == "1.500"
    assert "tokens equal (both sides" in table


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
