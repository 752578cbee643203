"""The int4k foundation (export_lora --quantize int4k --group-size 32) end to end through the
XNNPACK delegate: one program over int4 weights (qc4w) and int8 blocks (qb8w) at once. The in-repo
tiny Mistral (untied embedding) with two PEFT adapters, one of which adapts v_proj and one
down_proj:

- foundation.ptd holds every v_proj and down_proj as int8 in blocks of 32 (the quantizer's bytes),
  every other projection and the token embedding as int4, the lm_head as int8 per row; the
  summary says so;
- the Python runtime's logits equal exir/quantize.py's int4_reference with the INT4K mix (over
  transformers + PEFT) to float rounding, and its greedy tokens equal the reference's, for both
  adapters and the bare foundation;
- the v_proj/down_proj entries are int8's: an int8 (--quantize int8) export of the same model
  writes the same bytes for them.
"""

import contextlib
import io
import json
import os
from typing import Optional

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir.fc_formats import INT4K
from edgeshare.exir.quantize import int4_reference
from edgeshare.extension.python import DataFile, Program
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora
from edgeshare.tools import quantized_run_checks as checks

MAX_SEQ_LEN = 32
NEW_TOKENS = 16
INIT_STD = 0.2
GROUP = 32
FAMILY = "mistral"
PROMPT = np.random.default_rng(3).integers(0, hf_tiny.VOCAB, size=(6,), dtype=np.int64)
STEMS = (("a", "a"), ("b", "b"), ("foundation", None))
LAYERS = 2


def _without_end_token(model_dir: str) -> None:
    """Drops the model's eos_token_id, so that the runtime generates every token asked for, as the
    reference does (its min_new_tokens masks the end token; the runtime would stop at it)."""
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                config = json.load(f)
            config["eos_token_id"] = None
            with open(path, "w") as f:
                json.dump(config, f)


def _ptd(path: str):
    with open(path, "rb") as f:
        return deserialize_ptd(f.read(), path)


def _export(files: hf_tiny.TinyLoraFiles, out: str, quantize: str) -> None:
    argv = ["--hf-model", files.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN)]
    argv += [f"--adapter={n}={files.adapter_dirs[n]}" for n in ("a", "b")]
    assert export_lora.main(argv + ["--quantize", quantize, "--group-size", str(GROUP)]) == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("int4k"))
    files = hf_tiny.save_tiny_lora(FAMILY, os.path.join(root, "in"), initializer_range=INIT_STD)
    _without_end_token(files.model_dir)
    out = os.path.join(root, "out")
    summary = io.StringIO()
    with contextlib.redirect_stdout(summary):
        _export(files, out, "int4k")
    return files, out, summary.getvalue()


def test_projections_int8_in_blocks_the_rest_int4_and_the_summary_says_so(exported, tmp_path):
    files, out, summary = exported
    ptd = _ptd(os.path.join(out, "foundation.ptd"))
    blocks = sorted(k for k in ptd.named_data if k.endswith(".qb8w"))
    want = sorted(
        f"model.layers.{i}.{p}.weight.qb8w" for i in range(LAYERS) for p in ("self_attn.v_proj", "mlp.down_proj")
    )
    assert blocks == want
    int4 = [k for k in ptd.named_data if k.endswith(".qc4w")]
    # q, k, o, gate and up in each layer, and the untied token embedding.
    assert len(int4) == 5 * LAYERS + 1 and "model.embed_tokens.weight.qc4w" in int4, int4
    assert [k for k in ptd.named_data if k.endswith(".qc8w")] == ["lm_head.weight.qc8w"]
    assert "int4k: v_proj, down_proj int8 (qb8w), the rest int4" in summary, summary
    # The same bytes an int8 export writes for those weights.
    int8_out = str(tmp_path / "int8")
    argv = ["--hf-model", files.model_dir, "--out", int8_out, "--max-seq-len", str(MAX_SEQ_LEN), "--quantize", "int8"]
    assert export_lora.main(argv) == 0
    int8 = _ptd(os.path.join(int8_out, "foundation.ptd"))
    for key in want:
        for entry in (key, key + ".scales"):
            assert ptd.named_data[entry].data == int8.named_data[entry].data, entry


def _model(files: hf_tiny.TinyLoraFiles, adapter: Optional[str]) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, files.adapter_dirs[adapter]).eval()
    return int4_reference(model, group_size=GROUP, mix=INT4K)


def test_runtime_logits_and_tokens_equal_the_int4k_reference(exported):
    files, out, _ = exported
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    ids = torch.from_numpy(PROMPT).view(1, -1)
    tokens = {}
    for stem, adapter in STEMS:
        program = Program.load(os.path.join(out, f"{stem}.pte"), [foundation])
        reference = _model(files, adapter)
        # Each v_proj and down_proj runs int8 in blocks (PEFT's adapted ones under base_layer).
        names = ("v_proj", "down_proj", "v_proj.base_layer", "down_proj.base_layer")
        kinds = {type(m).__name__ for n, m in reference.named_modules() if n.endswith(names)}
        assert "_Int8BlockLinear" in kinds and "_Int4Linear" not in kinds, kinds
        (logits,) = program.method("forward").execute(ids.numpy())
        with torch.no_grad():
            want = reference(input_ids=ids).logits[0].numpy()
        got = np.asarray(logits).reshape(want.shape)
        scale = float(np.abs(want).max())
        err = float(np.abs(got - want).max())
        print(f"int4k {stem}: max |runtime - reference| {err:.3g} (max |logit| {scale:.3g})")
        assert err <= 1e-4 * max(1.0, scale), stem
        tokens[stem] = program.method("forward_cached").generate(PROMPT, NEW_TOKENS).tokens
        assert tokens[stem] == checks.reference_tokens(reference, PROMPT, NEW_TOKENS), stem
    assert tokens["a"] != tokens["foundation"] or tokens["b"] != tokens["foundation"]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
