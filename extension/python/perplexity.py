"""Perplexity of a causal LM over a token sequence, and its divergence from a reference model, as
llama.cpp's llama-perplexity reports them.

    from edgeshare.extension.python import DataFile, Program, program_perplexity

    foundation = DataFile.open("out/foundation.ptd")
    a = Program.load("out/a.pte", [foundation], methods=["forward"])
    ids = np.asarray(a.tokenizer.encode(text), dtype=np.int64)
    print(program_perplexity(a, ids, ctx=128, stride=64).perplexity)

score() takes any function from window ids [1, T] to logits [1, T, vocab], so transformers or
llama.cpp logits are scored the same way as a program's. Windows follow Hugging Face's strided
scheme (its "Perplexity of fixed-length models" guide): windows of `ctx` tokens start every `stride`
tokens and the last one ends at the sequence's end; the first window scores every token but its
first, each later window only the tokens past the previous window's end (the rest is context). With
stride < ctx every token but token 0 is scored exactly once; with stride == ctx (disjoint windows,
the default) a window's first token has no context inside the window and is not scored either, as in
transformers. Log-likelihoods are float64 over a stable log-softmax, a few rows at a time so a long
window over a large vocabulary holds one extra copy of a few rows only.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Tuple

import numpy as np

if TYPE_CHECKING:  # score() runs without the runtime's extension module.
    from edgeshare.extension.python.runtime import Program

__all__ = ["PerplexityError", "PerplexityResult", "program_perplexity", "score", "windows"]

Logits = Callable[[np.ndarray], np.ndarray]

# Rows of logits turned into float64 log-probabilities at once: 64 rows of a 128k vocabulary are 64 MiB.
_ROWS = 64


class PerplexityError(ValueError):
    """Token ids, a window length, logits or a method that perplexity cannot score; the message names it."""


@dataclasses.dataclass(frozen=True)
class PerplexityResult:
    """What score() measured.

    Attributes:
      perplexity: exp(mean_nll).
      mean_nll: the mean negative log-likelihood (natural log) of the scored tokens.
      tokens_scored: how many tokens were scored.
      windows: how many windows ran.
      perplexity_stderr: the perplexity's standard error, perplexity * sqrt(var(nll) / (n - 1)), as
        llama-perplexity prints it after "+/-" (0 for a single scored token).
      kl_divergence: with a reference, the mean over scored positions of KL(reference || this), in nats.
      kl_divergence_stderr: its standard error.
      kl_divergence_max: the largest KL at one position.
      kl_divergence_p99: the 99th percentile of the per-position KL.
      kl_divergence_median: the median per-position KL.
      top1_agreement: the share of scored positions whose argmax equals the reference's.
      reference_perplexity: the reference's perplexity over the same tokens.
    """

    perplexity: float
    mean_nll: float
    tokens_scored: int
    windows: int
    perplexity_stderr: float = 0.0
    kl_divergence: Optional[float] = None
    kl_divergence_stderr: Optional[float] = None
    kl_divergence_max: Optional[float] = None
    kl_divergence_p99: Optional[float] = None
    kl_divergence_median: Optional[float] = None
    top1_agreement: Optional[float] = None
    reference_perplexity: Optional[float] = None


def windows(tokens: int, ctx: int, stride: Optional[int] = None) -> List[Tuple[int, int, int]]:
    """The windows score() runs over a sequence of `tokens` ids.

    Args:
      tokens: the sequence's length (at least 2).
      ctx: the window's length (at least 2).
      stride: how far each window starts after the previous one (1..ctx; None: ctx).

    Returns:
      (begin, end, first_scored) per window: the window is ids[begin:end] and it scores the tokens
      at first_scored..end-1 (each predicted by the logits one position before it). A window that
      would score nothing (a last window of one token after disjoint ones) is left out.

    Raises:
      PerplexityError: a length, ctx or stride out of range, naming it.
    """
    stride = ctx if stride is None else stride
    _check(tokens, ctx, stride)
    out: List[Tuple[int, int, int]] = []
    scored_to = 0
    for begin in range(0, tokens, stride):
        end = min(begin + ctx, tokens)
        # Position 0 of a window has no logits predicting it; a last window of one token scores nothing.
        first = max(scored_to, begin + 1)
        if first < end:
            out.append((begin, end, first))
        scored_to = end
        if end == tokens:
            break
    return out


def score(
    token_ids: np.ndarray,
    ctx: int,
    logits: Logits,
    stride: Optional[int] = None,
    reference: Optional[Logits] = None,
    progress: bool = False,
) -> PerplexityResult:
    """Scores a token sequence window by window (see the module's docstring for the windows).

    Args:
      token_ids: int token ids of shape [N] or [1, N], N >= 2.
      ctx: the window's length in tokens (at least 2).
      logits: window ids (int64 [1, T]) -> float logits [1, T, vocab] or [T, vocab].
      stride: how far each window starts after the previous one (1..ctx; None: ctx, disjoint windows).
      reference: a second model's logits function; each window runs through both and the result
        carries KL(reference || this) and top-1 agreement over the scored positions.
      progress: show a progress bar on stderr (tqdm when installed, else a one-line counter).

    Returns:
      The perplexity and, with a reference, its divergence statistics.

    Raises:
      PerplexityError: token ids of another shape, ctx or stride out of range, logits of the wrong shape
        or not finite, a reference with another vocabulary.
    """
    ids = _ids(token_ids)
    plan = windows(ids.size, ctx, stride)
    nll: List[np.ndarray] = []
    kl: List[np.ndarray] = []
    agree = 0
    ref_nll: List[np.ndarray] = []
    with _Progress(len(plan), progress) as bar:
        for begin, end, first in plan:
            window = ids[begin:end].reshape(1, -1)
            rows = slice(first - begin - 1, end - begin - 1)
            targets = ids[first:end]
            out = _rows(logits(window), end - begin, "logits")[rows]
            if reference is None:
                nll.append(_nll(out, targets))
            else:
                ref = _rows(reference(window), end - begin, "reference logits")[rows]
                if ref.shape[-1] != out.shape[-1]:
                    raise PerplexityError(
                        f"the reference's vocabulary has {ref.shape[-1]} tokens and the model's {out.shape[-1]}: "
                        "KL divergence compares two models of one vocabulary"
                    )
                window_nll, window_ref_nll, window_kl, window_agree = _compare(out, ref, targets)
                nll.append(window_nll)
                ref_nll.append(window_ref_nll)
                kl.append(window_kl)
                agree += window_agree
            bar.update()
    all_nll = np.concatenate(nll)
    mean = float(all_nll.mean())
    ppl = math.exp(mean)
    n = all_nll.size
    result = PerplexityResult(
        perplexity=ppl,
        mean_nll=mean,
        tokens_scored=n,
        windows=len(plan),
        perplexity_stderr=ppl * math.sqrt(float(all_nll.var()) / (n - 1)) if n > 1 else 0.0,
    )
    if reference is None:
        return result
    all_kl = np.concatenate(kl)
    return dataclasses.replace(
        result,
        kl_divergence=float(all_kl.mean()),
        kl_divergence_stderr=math.sqrt(float(all_kl.var()) / (n - 1)) if n > 1 else 0.0,
        kl_divergence_max=float(all_kl.max()),
        kl_divergence_p99=float(np.percentile(all_kl, 99)),
        kl_divergence_median=float(np.median(all_kl)),
        top1_agreement=agree / n,
        reference_perplexity=math.exp(float(np.concatenate(ref_nll).mean())),
    )


def program_perplexity(
    program: Program,
    token_ids: np.ndarray,
    ctx: Optional[int] = None,
    stride: Optional[int] = None,
    method: str = "forward",
    reference: Optional[Program] = None,
    progress: bool = False,
) -> PerplexityResult:
    """score() over a loaded program's method (token ids [1, T] -> logits [1, T, vocab]).

    Args:
      program: the runtime's Program, loaded with `method`.
      token_ids: int token ids of shape [N] or [1, N], N >= 2, each within the vocabulary.
      ctx: the window's length (None: the most tokens the method takes, its --max-seq-len).
      stride: as score()'s.
      method: the method to run, e.g. "forward"; it takes one int64 [1, T] input and returns every
        position's logits.
      reference: a Program whose `method` gives the reference logits (KL divergence, top-1 agreement).
      progress: as score()'s.

    Returns:
      As score().

    Raises:
      PerplexityError: a method without that signature, ctx beyond the method's bound, a reference of
        another vocabulary (checked before any window runs); as score().
      EdgeshareError: a program without the method (NotFound, listing its methods), a token id
        outside the vocabulary.
    """
    run, bound, vocab = _token_method(program, method)
    ctx = bound if ctx is None else ctx
    if ctx > bound:
        raise PerplexityError(f"ctx {ctx} is more than the {bound} tokens method '{method}' of {program.path} takes "
                         "(its --max-seq-len)")
    ref_run: Optional[Logits] = None
    if reference is not None:
        ref_run, ref_bound, ref_vocab = _token_method(reference, method)
        if ref_vocab != vocab:
            raise PerplexityError(f"the reference {reference.path} has a vocabulary of {ref_vocab} tokens and "
                             f"{program.path} one of {vocab}: KL divergence compares two models of one vocabulary")
        if ctx > ref_bound:
            raise PerplexityError(f"ctx {ctx} is more than the {ref_bound} tokens method '{method}' of the reference "
                             f"{reference.path} takes (its --max-seq-len)")
    return score(token_ids, ctx, run, stride=stride, reference=ref_run, progress=progress)


def _token_method(program: Program, name: str) -> Tuple[Logits, int, int]:
    """The method's logits function, its token bound and its vocabulary, checked against the
    signature perplexity needs."""
    method = program.method(name)
    specs = method.inputs
    outputs = method.outputs
    want = "perplexity runs a method of token ids int64 [1, T] -> logits [1, T, vocab] (an export's 'forward')"
    if len(specs) != 1 or specs[0] is None or specs[0].dtype != "int64" or len(specs[0].shape) != 2:
        raise PerplexityError(f"method '{name}' of {program.path} takes {len(specs)} inputs "
                         f"({', '.join(_spec(s) for s in specs)}); {want}")
    bound = specs[0].shape[-1]
    if not outputs or outputs[0] is None or len(outputs[0].shape) != 3 or outputs[0].shape[1] != bound:
        raise PerplexityError(f"method '{name}' of {program.path} returns {_spec(outputs[0] if outputs else None)}; "
                         f"{want}")
    return (lambda window: method.execute(window)[0]), bound, outputs[0].shape[-1]


def _spec(spec: Any) -> str:
    return "a non-tensor" if spec is None else f"{spec.dtype} {list(spec.shape)}"


def _check(tokens: int, ctx: int, stride: int) -> None:
    for name, value in (("ctx", ctx), ("stride", stride)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise PerplexityError(f"{name} must be an int, not {type(value).__name__} {value!r:.40}")
    if tokens < 2:
        raise PerplexityError(f"perplexity needs at least 2 tokens; the text has {tokens}")
    if ctx < 2:
        raise PerplexityError(f"ctx is {ctx}; a window needs at least 2 tokens")
    if not 1 <= stride <= ctx:
        raise PerplexityError(f"stride is {stride}; it must be in 1..ctx ({ctx})")


def _ids(token_ids: Any) -> np.ndarray:
    ids = np.asarray(token_ids)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise PerplexityError(
            f"token_ids must be integer ids of shape [N] or [1, N], not {ids.dtype} {list(ids.shape)}"
        )
    return ids.astype(np.int64)


def _rows(out: Any, length: int, what: str) -> np.ndarray:
    """The logits of one window as [T, vocab]."""
    array = np.asarray(out)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or array.shape[0] != length:
        raise PerplexityError(f"{what} of a window of {length} tokens have shape {list(np.shape(out))}; "
                         f"want [1, {length}, vocab] or [{length}, vocab]")
    return array


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    x = rows.astype(np.float64)
    if not np.isfinite(x).all():
        raise PerplexityError("logits hold a NaN or an infinity")
    x -= x.max(axis=-1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x


def _chunks(count: int) -> Iterator[slice]:
    for start in range(0, count, _ROWS):
        yield slice(start, min(start + _ROWS, count))


def _nll(rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    out = np.empty(len(targets))
    for part in _chunks(len(targets)):
        logp = _log_softmax(rows[part])
        out[part] = -logp[np.arange(logp.shape[0]), targets[part]]
    return out


def _compare(rows: np.ndarray, ref: np.ndarray, targets: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per scored position: this model's NLL, the reference's, KL(reference || this); and how many
    positions share the argmax."""
    nll, ref_nll, kl = np.empty(len(targets)), np.empty(len(targets)), np.empty(len(targets))
    agree = 0
    for part in _chunks(len(targets)):
        logp, logq = _log_softmax(rows[part]), _log_softmax(ref[part])
        at = np.arange(logp.shape[0])
        nll[part] = -logp[at, targets[part]]
        ref_nll[part] = -logq[at, targets[part]]
        # Rounding can leave a KL of identical rows a hair below 0.
        kl[part] = np.maximum((np.exp(logq) * (logq - logp)).sum(axis=-1), 0.0)
        agree += int((rows[part].argmax(axis=-1) == ref[part].argmax(axis=-1)).sum())
    return nll, ref_nll, kl, agree


class _Progress:
    """Windows done on stderr: a tqdm bar when tqdm is installed, else a counter redrawn in place."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._total = total
        self._done = 0
        self._bar: Any = None
        self._enabled = enabled
        if enabled:
            try:
                import tqdm  # noqa: PLC0415 (optional: the wheel's [text] extra brings it)

                self._bar = tqdm.tqdm(total=total, unit="window", file=sys.stderr, leave=False)
            except ImportError:
                self._bar = None

    def __enter__(self) -> _Progress:
        return self

    def update(self) -> None:
        self._done += 1
        if self._bar is not None:
            self._bar.update()
        elif self._enabled:
            print(f"\rperplexity: {self._done}/{self._total} windows", end="", file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._enabled and self._done:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
