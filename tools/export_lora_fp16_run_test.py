"""fp16 fully connected weights (export_lora --fc-weight-dtype fp16) end to end through the XNNPACK
delegate's f32 x f16w kernels: the in-repo tiny Llama (tied embedding / lm_head) with two PEFT
adapters.

The delegate rounds nothing but the weights (activations and sums stay float32), so the reference is
transformers + PEFT with every Linear weight and bias (LoRA A/B and lm_head included) rounded to
half and run in float32; the embedding gather keeps its float32 table:

- 32 greedy tokens from //tools:generate and from the Python runtime equal that reference's, for
  both adapters and the bare foundation;
- the runtime's logits equal the reference's to float rounding at every position.
"""

import os
from typing import List, Optional

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.extension.python import DataFile, Program
from edgeshare.models import hf_tiny
from edgeshare.testing.generate_binary import generate_programs
from edgeshare.tools import export_lora
from torch import nn

MAX_SEQ_LEN = 48
NEW_TOKENS = 32
INIT_STD = 0.2
PROMPT = np.random.default_rng(1).integers(0, hf_tiny.VOCAB, size=(6,), dtype=np.int64)
STEMS = (("a", "a"), ("b", "b"), ("foundation", None))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fp16"))
    files = hf_tiny.save_tiny_lora("llama", os.path.join(root, "in"), initializer_range=INIT_STD)
    out = os.path.join(root, "out")
    argv = ["--hf-model", files.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN)]
    for name in ("a", "b"):
        argv += ["--adapter", f"{name}={files.adapter_dirs[name]}"]
    assert export_lora.main(argv + ["--fc-weight-dtype", "fp16"]) == 0
    prompt_path = os.path.join(root, "prompt.npy")
    np.save(prompt_path, PROMPT)
    return files, out, prompt_path


def _fp16_reference(files: hf_tiny.TinyLoraFiles, adapter: Optional[str]) -> nn.Module:
    """The model with every Linear's weight and bias rounded to half, computing in float32."""
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()
    # lm_head reads the tied table as a fully connected weight (half); the gather keeps float32.
    model.lm_head.weight = nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, files.adapter_dirs[adapter]).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(module.weight.half().float())
                if module.bias is not None:
                    module.bias.copy_(module.bias.half().float())
    return model


def _reference_tokens(files: hf_tiny.TinyLoraFiles, adapter: Optional[str]) -> List[int]:
    model = _fp16_reference(files, adapter)
    ids = torch.from_numpy(PROMPT).view(1, -1)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
        )
    return out[0, ids.shape[1] :].tolist()


def test_generate_tokens_equal_the_fp16_weight_reference_for_two_adapters_and_the_foundation(exported, tmp_path):
    files, out, prompt_path = exported
    got = generate_programs(out, [stem for stem, _ in STEMS], prompt_path, NEW_TOKENS, str(tmp_path / "g.json"))
    for stem, adapter in STEMS:
        assert got[stem]["tokens"] == _reference_tokens(files, adapter), stem
    assert len(set(got["foundation"]["tokens"])) > NEW_TOKENS // 2
    assert got["a"]["tokens"] != got["foundation"]["tokens"] != got["b"]["tokens"]


def test_python_tokens_and_logits_equal_the_fp16_weight_reference(exported):
    files, out, _ = exported
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    ids = torch.from_numpy(PROMPT).view(1, -1)
    for stem, adapter in STEMS:
        program = Program.load(os.path.join(out, f"{stem}.pte"), [foundation])
        assert program.method("forward_cached").generate(PROMPT, NEW_TOKENS).tokens == _reference_tokens(
            files, adapter
        ), stem
        (logits,) = program.method("forward").execute(ids.numpy())
        with torch.no_grad():
            reference = _fp16_reference(files, adapter)(input_ids=ids).logits[0].numpy()
        logits = np.asarray(logits).reshape(reference.shape)
        scale = float(np.abs(reference).max())
        err = float(np.abs(logits - reference).max())
        print(f"{stem}: max |runtime - fp16-weight reference| {err:.3g} (max |logit| {scale:.3g})")
        assert err <= 1e-4 * max(1.0, scale), stem


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
