"""How close each format's logits stay to the fp32 model's: the peer stage's prompt through the
first adapter's program (`forward`, every position at once, in this process through the Python
runtime) against transformers + PEFT in fp32, as the cosine of the two logit vectors per position;
and the same figure for llama.cpp's logits of the same prompt (llamacpp_peer.py logits), so that a
format's loss is read against the peer's on the same weights.
"""

from typing import Dict

import numpy as np

__all__ = ["cosine_figures", "logit_cosines"]


def cosine_figures(logits: np.ndarray, reference: np.ndarray) -> Dict[str, float]:
    """{"logit_cosine_min", "logit_cosine_median"} of the cosines per position of logits [.., T, vocab]
    against reference (the same shape)."""
    ours = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    theirs = reference.reshape(-1, reference.shape[-1]).astype(np.float64)
    if ours.shape != theirs.shape:
        raise ValueError(f"logits {tuple(ours.shape)} against a reference of {tuple(theirs.shape)}")
    cos = (ours * theirs).sum(-1) / (np.linalg.norm(ours, axis=-1) * np.linalg.norm(theirs, axis=-1))
    return {"logit_cosine_min": float(cos.min()), "logit_cosine_median": float(np.median(cos))}


def logit_cosines(program: str, foundation: str, prompt_ids: np.ndarray, reference: np.ndarray) -> Dict[str, float]:
    """Cosine per position of the program's logits against `reference`.

    Args:
      program: an adapter's .pte (with a `forward` method of token ids -> logits [1, T, vocab]).
      foundation: the foundation.ptd it loads over.
      prompt_ids: int64 [1, T].
      reference: float [1, T, vocab], the fp32 model's logits for the same ids.

    Returns:
      {"logit_cosine_min", "logit_cosine_median"} over the T positions.
    """
    from edgeshare.extension.python import DataFile, Program  # noqa: PLC0415 (the runtime's extension)

    loaded = Program.load(program, [DataFile.open(foundation)])
    (logits,) = loaded.method("forward").execute(prompt_ids)
    return cosine_figures(logits, reference)
