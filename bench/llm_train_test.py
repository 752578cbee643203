"""The tiny-LLM case's training (--trained-steps): the model learns from the offline text and each
adapter from its own part of it, the same steps give the same saved weights, and bad counts are
errors before anything runs."""

import dataclasses
import os
import tempfile

import pytest
import torch
from edgeshare.bench import llm
from edgeshare.bench._llm_model import save_llm
from edgeshare.bench._llm_train import train_llm, train_lora

# The smoke-test shape with a vocabulary that has BPE merges beyond the 256 bytes.
SPEC = dataclasses.replace(llm.SMALL, vocab=512, adapters=1, trained_steps=30)


def _weights(model_dir: str) -> bytes:
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        return f.read()


def test_training_lowers_held_out_loss_and_repeats_byte_for_byte() -> None:
    root = tempfile.mkdtemp(prefix="llm_train_test_")
    first = save_llm(SPEC, os.path.join(root, "a"))
    second = save_llm(SPEC, os.path.join(root, "b"))
    untrained = save_llm(dataclasses.replace(SPEC, trained_steps=0), os.path.join(root, "c"))
    assert first.training is not None and untrained.training is None
    assert first.training.steps == 30
    assert first.training.loss_after < first.training.loss_before - 0.5, first.training
    assert _weights(first.model_dir) == _weights(second.model_dir)
    assert _weights(first.model_dir) != _weights(untrained.model_dir)
    held = first.training.held_out_ids
    assert held.dtype == torch.int64 and len(held) >= 128 and int(held.max()) < SPEC.vocab
    assert len(set(held.tolist())) > 256  # the merges are in use, not only the byte alphabet
    tuned = first.adapter_training["adapter1"]
    assert tuned.steps == 6  # trained_steps // 5
    assert tuned.loss_after < tuned.loss_before, tuned  # on its own part's held-out text
    adapter = os.path.join(first.adapter_dirs["adapter1"], "adapter_model.safetensors")
    with open(adapter, "rb") as f, open(adapter.replace(os.sep + "a" + os.sep, os.sep + "b" + os.sep), "rb") as g:
        assert f.read() == g.read()
    assert not untrained.adapter_training


def test_bad_counts_are_errors() -> None:
    with pytest.raises(ValueError, match="steps 0"):
        train_llm(torch.nn.Linear(2, 2), 512, 0, 16)
    with pytest.raises(ValueError, match="part 3 must be in"):
        train_lora(torch.nn.Linear(2, 2), 512, 1, 16, 3, 3)
    with pytest.raises(SystemExit):
        llm.main(["--small", "--trained-steps", "-1", "--quiet"])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
