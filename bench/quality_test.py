"""The quality bench's scoring and table from plain logits (the real model is bench/real_model_test's)."""

import math
import sys

import numpy as np
import pytest
from edgeshare.bench.quality import CTX, Cell, format_markdown, score


def test_uniform_logits_score_the_vocabulary_size_over_disjoint_windows():
    ids = np.arange(4 * 16, dtype=np.int64) % 10
    result = score(ids, 16, lambda w: np.zeros((1, w.shape[1], 10), np.float32))
    assert result.tokens_scored == 4 * 15  # a window's first token has no context inside it
    assert math.isclose(result.perplexity, 10.0, rel_tol=1e-12)


def test_a_reference_gives_kl_and_top1_agreement():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(32, 7)).astype(np.float32)
    ids = rng.integers(0, 7, size=32)
    same = score(ids, 8, lambda w: table[None, : w.shape[1]], reference=lambda w: table[None, : w.shape[1]])
    assert same.kl_divergence == pytest.approx(0.0, abs=1e-12)
    assert same.top1_agreement == 1.0
    other = score(
        ids, 8, lambda w: np.zeros((1, w.shape[1], 7), np.float32), reference=lambda w: table[None, : w.shape[1]]
    )
    assert other.kl_divergence > 0.0


def test_the_table_has_a_row_per_cell_and_blank_for_what_was_not_measured():
    cells = [
        Cell(
            "original", False, "edgeshare", "fp32", 24.9, 0.0, tokens_per_s=50.0, weights_mib=513.0, tokens_scored=4088
        ),
        Cell("original", True, "edgeshare", "int4", 26.0, 4.4, 0.05, 0.9, 60.0, 100.0, 4088),
    ]
    report = {
        "model": "m",
        "text": "t",
        "tokens_scored": 4088,
        "windows": 8,
        "ctx": CTX,
        "threads": 1,
        "cells": [c.__dict__ for c in cells],
    }
    lines = format_markdown(report).splitlines()
    assert lines[-2] == "| original | no | edgeshare | fp32 | 513.0 | 24.900 | +0.00% |  |  | 50 |"
    assert lines[-1] == "| original | yes | edgeshare | int4 | 100.0 | 26.000 | +4.40% | 0.0500 | 90.0% | 60 |"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
