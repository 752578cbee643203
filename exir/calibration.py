"""How much each input of each Linear layer matters, measured on calibration text: the mean square
of that input over the text's tokens, as llama.cpp's importance matrix (llama-imatrix) holds it.
A quantizer that weighs it (int4's scale search) spends its error where inputs are small, so the
layer's outputs move least on text like the calibration text.

    ids = calibration_ids("model_dir", "calibration.txt")
    importance = importance_from_ids(model, ids)       # {"model.layers.0.mlp.up_proj.weight": [in]}
    partitioner = XnnpackPartitioner(quantize="int4").weighing(importance)

Keys are "<module name>.weight" in the model given, which for a Hugging Face model are the keys its
foundation weights are stored under.
"""

import os
from typing import Dict

import torch
from edgeshare.exir.errors import ExportError
from torch import nn

__all__ = [
    "CALIBRATION_CTX",
    "CALIBRATION_TOKENS",
    "CalibrationError",
    "calibration_ids",
    "check_calibration_file",
    "importance_from_ids",
]

# Tokens of calibration text used at most, and the window they are run in: a few thousand tokens
# are what llama-imatrix's users feed too; more moves the means little and costs export time.
CALIBRATION_TOKENS = 8192
CALIBRATION_CTX = 512


class CalibrationError(ExportError):
    """Calibration text that cannot be used (unreadable, not UTF-8, too short, no tokenizer)."""


def check_calibration_file(path: str) -> None:
    """Refuses a calibration path that is not a readable file, before anything slow runs."""
    if not os.path.isfile(path):
        raise CalibrationError(f"calibration text {path}: no such file")
    if not os.access(path, os.R_OK):
        raise CalibrationError(f"calibration text {path}: not readable")


def calibration_ids(model_dir: str, path: str, max_tokens: int = CALIBRATION_TOKENS) -> torch.Tensor:
    """The first max_tokens token ids of a UTF-8 text file, by the model directory's tokenizer.

    Raises:
      CalibrationError: the file is missing, unreadable or not UTF-8, the directory has no
        tokenizer transformers can load, or the text is shorter than 2 tokens.
    """
    check_calibration_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise CalibrationError(f"calibration text {path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise CalibrationError(f"calibration text {path}: {e.strerror}") from None
    from transformers import AutoTokenizer  # noqa: PLC0415 (only a calibrated export needs it)

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # noqa: BLE001 (transformers raises many kinds; each is one line here)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CalibrationError(f"calibration needs the model's tokenizer in {model_dir}: {first}") from None
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]
    if len(ids) < 2:
        raise CalibrationError(f"calibration text {path}: {len(ids)} token(s); at least 2 are needed")
    return torch.tensor(ids, dtype=torch.int64)


def importance_from_ids(model: nn.Module, ids: torch.Tensor, ctx: int = CALIBRATION_CTX) -> Dict[str, torch.Tensor]:
    """The mean square of every input of every nn.Linear in model over ids, run in windows of ctx.

    Args:
      model: a causal LM taking input_ids [1, T] (its outputs are not read).
      ids: int64 [N] token ids, N >= 1.
      ctx: the window length (at most the model's context).

    Returns:
      "<module name>.weight" -> float32 [in_features], finite and >= 0.
    """
    sums: Dict[str, torch.Tensor] = {}
    counts: Dict[str, int] = {}

    def hook(name: str):
        def record(module: nn.Module, args: tuple) -> None:
            x = args[0].detach().reshape(-1, args[0].shape[-1]).to(torch.float64)
            sums[name] = sums.get(name, torch.zeros(x.shape[-1], dtype=torch.float64)) + (x * x).sum(dim=0)
            counts[name] = counts.get(name, 0) + x.shape[0]

        return record

    handles = [
        module.register_forward_pre_hook(hook(f"{name}.weight"))
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    ]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, ids.numel(), ctx):
                model(ids[start : start + ctx].view(1, -1))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return {name: (total / counts[name]).to(torch.float32) for name, total in sums.items()}
