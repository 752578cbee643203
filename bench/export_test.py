"""Smoke test of the export case's plumbing on the very small model: every figure is there, the
stages add up to the export, and the generated tokens equal transformers'; never asserts on timings."""

import json
import os
import tempfile

import pytest
from edgeshare.bench import export


def test_small_model_figures_and_tokens() -> None:
    out = os.path.join(tempfile.mkdtemp(prefix="export_bench_test_"), "export.json")
    assert export.main(["--models", "small", "--json", out, "--new-tokens", "4"]) == 0
    with open(out) as f:
        figures = json.load(f)["small"]
    assert figures["tokens_match"] is True and len(figures["tokens"]) == 4
    assert figures["export_s"] > 0 and figures["peak_rss_mib"] > 0 and figures["weights_mib"] > 0
    stages = dict(figures["stages_s"])
    # The second adapter has the first one's structure: its lowered program is reused, not lowered again.
    assert any(line.startswith("adapter 'adapter2': the lowered program of an earlier model") for line in stages)
    assert not any(line.startswith("lowering adapter 'adapter2'") for line in stages)
    assert 0 < figures["further_adapter_s"] < figures["export_s"]
    assert sum(stages.values()) <= figures["export_s"]


def test_unknown_model_is_refused() -> None:
    with pytest.raises(SystemExit) as e:
        export.main(["--models", "tiny"])
    assert e.value.code == 2


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
