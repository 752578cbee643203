"""The llama.cpp peer's rows and table from plain samples: medians, ratio orientation, token
agreement, formats edgeshare does not have yet, and option checks.

Runs without the peer (its venv is opt-in): the samples are what bench/llamacpp_peer.py and
tools/generate report; the real peer runs in `bench/llm --peer llamacpp`."""

import math
from typing import Any, Dict, List

import numpy as np
import pytest
from edgeshare.bench._llm_peer_llamacpp import (
    FORMATS,
    LlamacppOptions,
    format_llamacpp_table,
    llamacpp_rows,
    llamacpp_venv,
)
from edgeshare.bench._llm_peer_quality import cosine_figures
from edgeshare.bench._runner import BenchError

MIB = 1024 * 1024
TOKENS = [5, 7, 7, 1]
OPTIONS = LlamacppOptions(formats=("F32", "Q8_0"), n_ctx=(128,), threads=(1,), repeats=3)
FILES: Dict[str, Any] = {
    "gguf": {
        "models": {
            "f32": {"bytes": 400 * MIB, "logit_cosine_min": 0.975, "logit_cosine_median": 0.9987,
                    "foundation_logit_cosine_min": 0.991, "foundation_logit_cosine_median": 0.9993},
            "q8_0": {"bytes": 106 * MIB},
        },
        "adapters": {"adapter1": {"bytes": 2 * MIB}, "adapter2": {"bytes": 2 * MIB}},
    },
    "edgeshare": {
        "F32_128": {"foundation_bytes": 400 * MIB, "adapter_bytes": 3 * MIB, "logit_cosine_min": 0.9999,
                    "logit_cosine_median": 1.0, "foundation_logit_cosine_min": 0.9998,
                    "foundation_logit_cosine_median": 0.99995}
    },
}


def _runs(prefill: List[float], rate: List[float], tokens: List[int] = TOKENS) -> List[Dict[str, Any]]:
    return [
        {"tokens": list(tokens), "prefill_ms": p, "decode_tokens_per_s": r, "peak_rss_kib": 1024 * 500,
         "first_prefill_ms": 2 * p}
        for p, r in zip(prefill, rate)
    ]


def _rows(ours_tokens: List[int] = TOKENS, theirs_tokens: List[int] = TOKENS) -> List[Dict[str, Any]]:
    ours = {("F32", 128, 1): _runs([10.0, 11.0, 90.0], [30.0, 33.0, 1.0], ours_tokens)}
    theirs = {
        ("F32", 128, 1): _runs([20.0, 22.0, 21.0], [20.0, 22.0, 21.0], theirs_tokens),
        ("Q8_0", 128, 1): _runs([15.0, 15.0, 15.0], [40.0, 40.0, 40.0], theirs_tokens),
    }
    return llamacpp_rows(OPTIONS, FILES, ours, theirs, TOKENS)


def test_ratios_are_medians_edgeshare_over_llamacpp() -> None:
    f32 = _rows()[0]
    assert (f32["format"], f32["n_ctx"], f32["threads"]) == ("F32", 128, 1)
    assert f32["edgeshare_prefill_ms"] == 11.0 and f32["llamacpp_prefill_ms"] == 21.0
    assert f32["prefill_over_llamacpp"] == pytest.approx(11.0 / 21.0)
    assert f32["decode_rate_over_llamacpp"] == pytest.approx(30.0 / 21.0)
    assert f32["weights_over_llamacpp"] == pytest.approx(1.0)
    assert f32["llamacpp_first_prefill_ms"] == 42.0 and f32["edgeshare_first_prefill_ms"] == 22.0
    assert f32["edgeshare_peak_rss_mb"] == 500.0 and f32["llamacpp_adapter_mb"] == 2.0
    assert f32["edgeshare_logit_cosine_min"] == 0.9999 and f32["edgeshare_logit_cosine_median"] == 1.0
    assert f32["llamacpp_logit_cosine_min"] == 0.975 and f32["llamacpp_logit_cosine_median"] == 0.9987
    assert f32["edgeshare_foundation_logit_cosine_min"] == 0.9998
    assert f32["edgeshare_foundation_logit_cosine_median"] == 0.99995
    assert f32["llamacpp_foundation_logit_cosine_min"] == 0.991
    assert f32["llamacpp_foundation_logit_cosine_median"] == 0.9993
    assert f32["edgeshare_tokens_match_transformers"] is True
    assert f32["llamacpp_tokens_match_edgeshare"] is True


def test_cosines_are_per_position_and_both_sides_are_in_the_table() -> None:
    reference = np.array([[[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]]])
    same_direction = reference * np.array([[[2.0], [0.5], [1.0]]])  # scaled rows: cosine 1 each
    assert cosine_figures(same_direction, reference) == pytest.approx(
        {"logit_cosine_min": 1.0, "logit_cosine_median": 1.0}
    )
    turned = np.array([[[1.0, 0.0], [2.0, 0.0], [3.0, 4.0]]])  # the second row at a right angle
    assert cosine_figures(turned, reference) == pytest.approx({"logit_cosine_min": 0.0, "logit_cosine_median": 1.0})
    with pytest.raises(ValueError, match="against a reference"):
        cosine_figures(reference[:, :2], reference)
    table = format_llamacpp_table({"rows": _rows(), "flash_attn": "off"})
    f32_line = next(line for line in table.splitlines() if line.split()[:1] == ["F32"])
    assert "lc cos" in table and f32_line.split()[17:19] == ["1.000", "0.975"]


def test_all_programs_rss_is_the_median_peak_against_the_gguf_its_adapters_and_64_mib() -> None:
    files = {"gguf": FILES["gguf"], "edgeshare": {"F32_128": dict(FILES["edgeshare"]["F32_128"], programs=["a", "b"])}}
    ours = {("F32", 128, 1): _runs([10.0, 11.0, 12.0], [30.0, 33.0, 31.0])}
    everything = {("F32", 128, 1): [{"peak_rss_kib": 1024 * mib} for mib in (450, 470, 900)]}
    f32, q8 = llamacpp_rows(OPTIONS, files, ours, {}, TOKENS, everything)
    assert f32["edgeshare_all_programs"] == 2 and f32["edgeshare_all_programs_peak_rss_mb"] == 470.0
    assert f32["rss_budget_mb"] == 400.0 + 2 * 2.0 + 64.0
    assert f32["all_programs_rss_over_budget"] == pytest.approx(470.0 / 468.0)
    assert q8["edgeshare_all_programs"] == 0 and math.isnan(q8["all_programs_rss_over_budget"])
    table = format_llamacpp_table({"rows": [f32, q8], "flash_attn": "off"})
    assert "RSS all" in table and "470" in table


def test_llamacpp_switch_is_the_median_after_each_runs_first_round() -> None:
    theirs = _runs([20.0, 22.0], [20.0, 22.0])
    # 5 rounds over 2 adapters: the first round (2 switches) builds llama.cpp's graphs, slower.
    theirs[0]["switch_ms"] = [9.0, 9.0] + [0.05] * 8
    theirs[1]["switch_ms"] = [9.0, 9.0] + [0.07] * 8
    rows = llamacpp_rows(OPTIONS, FILES, {}, {("F32", 128, 1): theirs}, TOKENS)
    assert rows[0]["llamacpp_switch_ms"] == pytest.approx(0.06)
    assert math.isnan(_rows()[0]["llamacpp_switch_ms"])  # runs without switches


def test_swappable_figures_are_medians_against_the_own_program_and_llamacpps_switch() -> None:
    ours = {("F32", 128, 1): _runs([10.0, 11.0, 12.0], [30.0, 33.0, 31.0])}
    theirs = {("F32", 128, 1): _runs([20.0, 22.0], [20.0, 22.0])}
    theirs[("F32", 128, 1)][0]["switch_ms"] = [9.0, 9.0] + [0.08] * 8
    # Two adapters bound in turn: each process's first round (two binds) makes the adapters' tables.
    swaps = [{"swap_ms": [1.0, 1.0, 0.02, 0.04, 0.03, 0.03]}, {"swap_ms": [1.0, 1.0, 0.05, 0.02]}]
    generated = _runs([11.0, 12.0, 13.0], [30.0, 31.0, 29.0])
    swappable = {("F32", 128, 1): {"generate": generated, "swaps": swaps}}
    f32, q8 = llamacpp_rows(OPTIONS, FILES, ours, theirs, TOKENS, None, swappable)
    assert f32["edgeshare_swap_ms"] == pytest.approx(0.03)
    assert f32["swap_over_llamacpp_switch"] == pytest.approx(0.03 / 0.08)
    assert f32["swappable_prefill_over_own"] == pytest.approx(12.0 / 11.0)
    assert f32["swappable_decode_rate_over_own"] == pytest.approx(30.0 / 31.0)
    assert f32["swappable_tokens_match_own"] is True
    assert "edgeshare_swap_ms" not in q8
    table = format_llamacpp_table({"rows": [f32, q8], "flash_attn": "off"})
    swap_table = table.split("es swap ms", 1)[1].splitlines()[1:]
    assert [line.split()[0] for line in swap_table] == ["F32"]  # the row that measured it
    generated[1]["tokens"] = TOKENS[:3] + [0]
    assert llamacpp_rows(OPTIONS, FILES, ours, theirs, TOKENS, None, swappable)[0]["swappable_tokens_match_own"] is False


def test_a_format_edgeshare_lacks_has_llamacpp_figures_and_no_ratio() -> None:
    q8 = _rows()[1]
    assert q8["format"] == "Q8_0" and q8["llamacpp_decode_tokens_per_s"] == 40.0
    assert math.isnan(q8["edgeshare_prefill_ms"]) and math.isnan(q8["decode_rate_over_llamacpp"])
    assert q8["llamacpp_tokens_match_edgeshare"] is None
    table = format_llamacpp_table({"rows": _rows(), "flash_attn": "off"})
    q8_line = next(line for line in table.splitlines() if line.split()[:1] == ["Q8_0"])
    assert "n/a" in q8_line and "40.0" in q8_line


def test_other_tokens_are_a_mismatch_with_the_first_difference() -> None:
    other = TOKENS[:2] + [9, 9]
    f32 = _rows(theirs_tokens=other)[0]
    assert f32["llamacpp_tokens_match_transformers"] is False
    assert f32["llamacpp_tokens_match_edgeshare"] is False
    assert f32["llamacpp_first_difference"] == 2
    assert f32["edgeshare_tokens_match_transformers"] is True


def test_every_format_converts_or_quantizes_and_has_an_edgeshare_twin() -> None:
    assert [f.name for f in FORMATS][:2] == ["F32", "F16"]
    assert all((f.gguf is None) != (f.quantize is None) for f in FORMATS)
    assert [f.name for f in FORMATS if f.edgeshare is not None] == ["F32", "F16", "Q8_0", "Q4_0", "Q4_K_M"]


def test_the_avx2_build_is_its_own_venv_built_for_avx2_only_without_pips_wheel_cache() -> None:
    native, avx2 = llamacpp_venv("native"), llamacpp_venv("avx2")
    assert native.folder == "llamacpp-0.3.36" and avx2.folder == "llamacpp-0.3.36-avx2"
    assert dict(native.steps[-1].env)["CMAKE_ARGS"] == "-DGGML_NATIVE=ON"
    flags = dict(avx2.steps[-1].env)["CMAKE_ARGS"].split()
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags
    assert not any("AVX512" in f for f in flags)
    assert all("--no-cache-dir" in spec.steps[-1].args for spec in (native, avx2))


@pytest.mark.parametrize(
    "options, message",
    [
        (LlamacppOptions(formats=("F33",)), "unknown format"),
        (LlamacppOptions(swappable=("Q5",)), "unknown format"),
        (LlamacppOptions(n_ctx=(100,)), "must hold the prompt"),
        (LlamacppOptions(threads=(0,)), "at least 1"),
        (LlamacppOptions(flash_attn="maybe"), "flash attention"),
        (LlamacppOptions(build="avx3"), "llama.cpp build"),
    ],
)
def test_bad_options_are_one_line_errors(options: LlamacppOptions, message: str) -> None:
    with pytest.raises(BenchError, match=message):
        options.check()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
