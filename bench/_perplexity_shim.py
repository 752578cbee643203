"""SHIM, to delete at merge: a thin stand-in for edgeshare.extension.python.perplexity (written on
another branch), with the same score() / program_perplexity() signatures and the PerplexityResult
fields the quality bench reads. bench/quality.py imports the real module when it exists.

Windows of `ctx` tokens start every `stride` tokens (default ctx: disjoint) and the last one ends at
the sequence's end; the first window scores every token but its first, each later one only the
tokens past the previous window's end. Log-likelihoods are float64.
"""

import dataclasses
import math
from typing import Callable, List, Optional, Tuple

import numpy as np

__all__ = ["PerplexityResult", "program_perplexity", "score"]

Logits = Callable[[np.ndarray], np.ndarray]
_ROWS = 64


@dataclasses.dataclass(frozen=True)
class PerplexityResult:
    """perplexity = exp(mean_nll) over tokens_scored tokens; with a reference, the mean per-position
    KL(reference || this) in nats and the share of positions whose argmax equals the reference's."""

    perplexity: float
    mean_nll: float
    tokens_scored: int
    windows: int
    kl_divergence: Optional[float] = None
    top1_agreement: Optional[float] = None
    reference_perplexity: Optional[float] = None


def _windows(n: int, ctx: int, stride: int) -> List[Tuple[int, int]]:
    """(start, first scored position) of each window."""
    if n < 2 or ctx < 2 or not 1 <= stride <= ctx:
        raise ValueError(
            f"perplexity: {n} tokens, ctx {ctx}, stride {stride}: need n >= 2, ctx >= 2, 1 <= stride <= ctx"
        )
    ctx = min(ctx, n)
    out, end, start = [], 0, 0
    while end < n:
        start = min(start, n - ctx)
        first = max(end, start + 1)
        out.append((start, first - start))
        end = start + ctx
        start += stride
    return out


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float64)
    shifted = rows - rows.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def score(
    token_ids: np.ndarray,
    ctx: int,
    logits: Logits,
    stride: Optional[int] = None,
    reference: Optional[Logits] = None,
    progress: bool = False,
) -> PerplexityResult:
    """Perplexity of `logits` (window int64 [1, T] -> float [1, T, vocab]) over token_ids."""
    ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    nll: List[float] = []
    kl: List[float] = []
    ref_nll: List[float] = []
    agree = 0
    plan = _windows(len(ids), ctx, stride or ctx)
    for number, (start, skip) in enumerate(plan):
        window = ids[start : start + min(ctx, len(ids))][None, :]
        ours = np.asarray(logits(window))[0]
        theirs = np.asarray(reference(window))[0] if reference is not None else None
        for lo in range(skip - 1, window.shape[1] - 1, _ROWS):
            hi = min(lo + _ROWS, window.shape[1] - 1)
            targets = window[0, lo + 1 : hi + 1]
            mine = _log_softmax(ours[lo:hi])
            nll += list(-mine[np.arange(hi - lo), targets])
            if theirs is not None:
                ref = _log_softmax(theirs[lo:hi])
                ref_nll += list(-ref[np.arange(hi - lo), targets])
                kl += list((np.exp(ref) * (ref - mine)).sum(axis=-1))
                agree += int((mine.argmax(axis=-1) == ref.argmax(axis=-1)).sum())
        if progress:
            print(f"perplexity: window {number + 1} of {len(plan)}", flush=True)
    mean = float(np.mean(nll))
    extra = {}
    if reference is not None:
        extra = {
            "kl_divergence": float(np.mean(kl)),
            "top1_agreement": agree / len(nll),
            "reference_perplexity": math.exp(float(np.mean(ref_nll))),
        }
    return PerplexityResult(math.exp(mean), mean, len(nll), len(plan), **extra)


def program_perplexity(program, token_ids, ctx=None, stride=None, method="forward", reference=None, progress=False):
    """score() over an edgeshare Program's method (ctx: required by this shim)."""
    run = program.method(method)
    return score(token_ids, ctx, lambda w: run.execute(w)[0], stride, reference, progress)
