"""A few steps of training for the tiny-LLM case's model, on text this machine has offline.

Seeded random weights make logits that are small, structureless differences, on which any 4-bit
scheme (ours and llama.cpp's Q4_0 alike) scores a low logit cosine against fp32; a model that has
learned something is what a quantized format is for. Nothing can be downloaded here, so the text is
the docstrings and comments of the running interpreter's standard library (English prose about
code, a few MB), cut into a training part and a held-out part by module, and the tokenizer is a
byte-level BPE trained on the training part with the model's own vocabulary size, so that the ids
in use spread over the whole vocabulary as a real tokenizer's do. AdamW on one thread with seeded
batches: the same steps give the same weights on one machine.
"""

import ast
import dataclasses
import functools
import io
import math
import os
import sysconfig
import time
import tokenize
from typing import List, Sequence, Tuple

import torch
from edgeshare.models.tiny_tokenizer import train_byte_level_bpe
from tokenizers import Tokenizer
from torch import nn

__all__ = ["Training", "stdlib_text", "train_llm", "train_lora"]

# Folders of the standard library that hold tests or generated tables rather than prose.
_SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3"})
_HELD_OUT_FRACTION = 0.05
_BATCH = 4
_LEARNING_RATE = 2e-3
_WARMUP_STEPS = 10
# A LoRA fine-tune starts from lora_B = 0, so it needs no warmup; its rate is the common one for
# adapters of small models.
_LORA_LEARNING_RATE = 1e-3
_HELD_OUT_WINDOWS = 8


@dataclasses.dataclass(frozen=True)
class Training:
    """What train_llm did.

    Attributes:
      steps: optimizer steps taken.
      seconds: wall time of the steps.
      loss_before, loss_after: mean cross-entropy on held-out text before and after.
      held_out_ids: int64 [N], the held-out text's token ids (prompts that are text the model never saw).
    """

    steps: int
    seconds: float
    loss_before: float
    loss_after: float
    held_out_ids: torch.Tensor


def _module_texts(path: str) -> List[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        source = f.read()
    try:
        tree = ast.parse(source)
        comments = [
            t.string.lstrip("#").strip()
            for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.COMMENT
        ]
    except (SyntaxError, tokenize.TokenError):
        return []
    texts = [
        doc
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for doc in [ast.get_docstring(node)]
        if doc
    ]
    prose = " ".join(c for c in comments if c and not c.startswith("!") and "-*-" not in c)
    return texts + ([prose] if prose else [])


@functools.lru_cache(maxsize=1)
def stdlib_text() -> Tuple[str, ...]:
    """The docstrings and comments of the running interpreter's standard library, one string per
    module, in sorted path order.

    Returns:
      The modules' texts (modules with none are left out).

    Raises:
      ValueError: the standard library has no Python sources here.
    """
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        paths += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    texts = ["\n\n".join(t) for t in (_module_texts(p) for p in sorted(paths)) if t]
    if len(texts) < 20:
        raise ValueError(f"the standard library at {root} has {len(texts)} modules with docstrings; need 20")
    return tuple(texts)


@functools.lru_cache(maxsize=2)
def _tokenizer(vocab: int) -> Tuple[Tokenizer, int]:
    """A byte-level BPE of `vocab` ids trained on the training modules, and how many modules those
    are (the rest of stdlib_text() is held out)."""
    texts = stdlib_text()
    cut = len(texts) - max(1, int(len(texts) * _HELD_OUT_FRACTION))
    return train_byte_level_bpe(["\n\n".join(texts[:cut])], vocab), cut


def _ids(tok: Tokenizer, texts: Sequence[str]) -> torch.Tensor:
    return torch.tensor(tok.encode("\n\n".join(texts)).ids, dtype=torch.int64)


def _held_out_loss(model: nn.Module, ids: torch.Tensor, seq_len: int) -> float:
    windows = min(_HELD_OUT_WINDOWS, (len(ids) - 1) // seq_len)
    x = ids[: windows * seq_len].view(windows, seq_len)
    y = ids[1 : windows * seq_len + 1].view(windows, seq_len)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=x).logits
    return float(nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))


def _fit(
    model: nn.Module,
    train_ids: torch.Tensor,
    held_ids: torch.Tensor,
    steps: int,
    seq_len: int,
    seed: int,
    lr: float,
    warmup: int,
) -> Training:
    """AdamW on model's trainable parameters over seeded windows of train_ids (one thread)."""
    if len(held_ids) < seq_len + 1 or len(train_ids) < seq_len + 1:
        raise ValueError(
            f"training: {len(train_ids)} training and {len(held_ids)} held-out tokens, fewer than a window of {seq_len}"
        )
    params = [p for p in model.parameters() if p.requires_grad]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same steps give the same weights
    try:
        loss_before = _held_out_loss(model, held_ids, seq_len)
        optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
        batches = torch.Generator().manual_seed(seed)
        model.train()
        start = time.perf_counter()
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = lr * min(1.0, (step + 1) / warmup)
            starts = torch.randint(0, len(train_ids) - seq_len - 1, (_BATCH,), generator=batches)
            x = torch.stack([train_ids[s : s + seq_len] for s in starts])
            y = torch.stack([train_ids[s + 1 : s + seq_len + 1] for s in starts])
            logits = model(input_ids=x).logits
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            if not math.isfinite(loss.item()):
                raise ValueError(f"training: the loss is {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
        seconds = time.perf_counter() - start
        loss_after = _held_out_loss(model, held_ids, seq_len)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return Training(steps, seconds, loss_before, loss_after, held_ids)


def _check(steps: int, seq_len: int, vocab: int) -> None:
    if steps < 1 or seq_len < 2 or vocab < 256:
        raise ValueError(f"training: steps {steps} must be >= 1, seq_len {seq_len} >= 2, vocab {vocab} >= 256")


def train_llm(model: nn.Module, vocab: int, steps: int, seq_len: int, seed: int = 0) -> Training:
    """Trains `model` in place for `steps` AdamW steps of next-token prediction on stdlib_text().

    Args:
      model: a causal LM taking input_ids and returning .logits over `vocab` ids (float32).
      vocab: its vocabulary size (the tokenizer is trained to it; at least 256, the byte alphabet).
      steps: optimizer steps, each of 4 windows of seq_len tokens.
      seq_len: tokens per window (at most the model's positions).
      seed: the batches' seed.

    Returns:
      What was done, with held-out losses before and after; the model is left in eval mode.

    Raises:
      ValueError: steps < 1, seq_len < 2, vocab < 256, or too little text for the windows.
    """
    _check(steps, seq_len, vocab)
    texts = stdlib_text()
    tok, cut = _tokenizer(vocab)
    return _fit(model, _ids(tok, texts[:cut]), _ids(tok, texts[cut:]), steps, seq_len, seed, _LEARNING_RATE, _WARMUP_STEPS)


def train_lora(model: nn.Module, vocab: int, steps: int, seq_len: int, part: int, parts: int) -> Training:
    """Fine-tunes the trainable (LoRA) weights of a PEFT model in place on one part of the training text.

    A shipped adapter is a fine-tune: its low-rank update is small beside the weights it adapts and
    moves the model towards its own text. The training modules are dealt into `parts` parts
    (module j goes to part j % parts); part `part` is this adapter's text, so each adapter learns
    something of its own.

    Args:
      model: a PEFT LoRA model over a causal LM (only the adapter's weights require gradients).
      vocab, steps, seq_len: as train_llm's.
      part: this adapter's part, 0 <= part < parts; also its batches' seed.
      parts: how many parts the text is dealt into.

    Returns:
      What was done; the held-out losses are on the part's own text (the model is left in eval mode).

    Raises:
      ValueError: bad counts, or too little text in the part.
    """
    _check(steps, seq_len, vocab)
    if not 0 <= part < parts:
        raise ValueError(f"train_lora: part {part} must be in [0, {parts})")
    tok, cut = _tokenizer(vocab)
    mine = stdlib_text()[:cut][part::parts]
    if len(mine) < 2:
        raise ValueError(f"train_lora: part {part} of {parts} has {len(mine)} modules of text; need 2")
    held = max(1, int(len(mine) * _HELD_OUT_FRACTION))
    train_ids, held_ids = _ids(tok, mine[:-held]), _ids(tok, mine[-held:])
    return _fit(model, train_ids, held_ids, steps, seq_len, part, _LORA_LEARNING_RATE, 1)
