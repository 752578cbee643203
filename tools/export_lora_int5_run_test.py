"""The int5 and int5k foundations (export_lora --quantize int5 / int5k) end to end through the
XNNPACK delegate: 5-bit weights in blocks of 32 (qb5w), with int5k's v_proj/down_proj in int8
blocks (qb8w) in the same program. The in-repo tiny Mistral (untied embedding) with two PEFT
adapters, one of which adapts v_proj and one down_proj:

- int5k's foundation.ptd holds every v_proj and down_proj as int8 in blocks of 32 (an int8
  export's bytes), every other projection and the untied token embedding as 5-bit bytes equal to
  quantize_qb5w's (the table gathered by edgeshare::embedding_qb5w), the lm_head as int8 per row;
  the summary says so;
- the Python runtime's logits equal exir/quantize.py's int5_reference (with the INT5K mix for
  int5k) over transformers + PEFT to float rounding, and its greedy tokens equal the reference's,
  for both adapters and the bare foundation.
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
from edgeshare.exir._quantizers import quantize_qb5w
from edgeshare.exir.fc_formats import INT5K
from edgeshare.exir.quantize import int5_reference
from edgeshare.extension.python import DataFile, Program
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora
from edgeshare.tools import quantized_run_checks as checks

MAX_SEQ_LEN = 32
NEW_TOKENS = 16
INIT_STD = 0.2
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
    assert export_lora.main(argv + ["--quantize", quantize]) == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("int5"))
    files = hf_tiny.save_tiny_lora(FAMILY, os.path.join(root, "in"), initializer_range=INIT_STD)
    _without_end_token(files.model_dir)
    outs, summaries = {}, {}
    for quantize in ("int5", "int5k"):
        outs[quantize] = os.path.join(root, quantize)
        summary = io.StringIO()
        with contextlib.redirect_stdout(summary):
            _export(files, outs[quantize], quantize)
        summaries[quantize] = summary.getvalue()
    return files, outs, summaries


def test_int5k_projections_int8_in_blocks_the_rest_5_bit_and_the_summary_says_so(exported, tmp_path):
    files, outs, summaries = exported
    ptd = _ptd(os.path.join(outs["int5k"], "foundation.ptd"))
    blocks = sorted(k for k in ptd.named_data if k.endswith(".qb8w"))
    want = sorted(
        f"model.layers.{i}.{p}.weight.qb8w" for i in range(LAYERS) for p in ("self_attn.v_proj", "mlp.down_proj")
    )
    assert blocks == want
    int5 = sorted(k for k in ptd.named_data if k.endswith(".qb5w"))
    # q, k, o, gate and up in each layer, and the untied token embedding.
    assert len(int5) == 5 * LAYERS + 1 and "model.embed_tokens.weight.qb5w" in int5, int5
    assert [k for k in ptd.named_data if k.endswith(".qc8w")] == ["lm_head.weight.qc8w"]
    summary = summaries["int5k"]
    assert "int5k: v_proj, down_proj int8 (qb8w), the rest int5" in summary, summary
    assert "token embedding: model.embed_tokens.weight int5" in summary, summary
    assert "int5 " in summary.split("by format:")[1], summary
    # The 5-bit bytes are the quantizer's, and the 8-bit ones an int8 export's.
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True)
    weights = model.state_dict()
    for key in int5:
        q, scales = quantize_qb5w(weights[key[: -len(".qb5w")]].to(torch.float32))
        assert ptd.named_data[key].data == q.numpy().tobytes(), key
        assert ptd.named_data[key + ".scales"].data == scales.numpy().tobytes(), key
    int8_out = str(tmp_path / "int8")
    argv = ["--hf-model", files.model_dir, "--out", int8_out, "--max-seq-len", str(MAX_SEQ_LEN), "--quantize", "int8"]
    assert export_lora.main(argv) == 0
    int8 = _ptd(os.path.join(int8_out, "foundation.ptd"))
    for key in want:
        for entry in (key, key + ".scales"):
            assert ptd.named_data[entry].data == int8.named_data[entry].data, entry


def test_int5_stores_every_projection_in_5_bits(exported):
    _, outs, _ = exported
    ptd = _ptd(os.path.join(outs["int5"], "foundation.ptd"))
    assert len([k for k in ptd.named_data if k.endswith(".qb5w")]) == 7 * LAYERS + 1
    assert not [k for k in ptd.named_data if k.endswith(".qb8w")]


def _model(files: hf_tiny.TinyLoraFiles, adapter: Optional[str], quantize: str) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, files.adapter_dirs[adapter]).eval()
    return int5_reference(model, mix=INT5K if quantize == "int5k" else None)


@pytest.mark.parametrize("quantize", ["int5", "int5k"])
def test_runtime_logits_and_tokens_equal_the_reference(exported, quantize):
    files, outs, _ = exported
    out = outs[quantize]
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    ids = torch.from_numpy(PROMPT).view(1, -1)
    tokens = {}
    for stem, adapter in STEMS:
        program = Program.load(os.path.join(out, f"{stem}.pte"), [foundation])
        reference = _model(files, adapter, quantize)
        # int5k's v_proj and down_proj run int8 in blocks (PEFT's adapted ones under base_layer).
        names = ("v_proj", "down_proj", "v_proj.base_layer", "down_proj.base_layer")
        kinds = {type(m).__name__ for n, m in reference.named_modules() if n.endswith(names)}
        own, other = ("_Int8BlockLinear", "_Int5Linear") if quantize == "int5k" else ("_Int5Linear", "_Int8BlockLinear")
        assert own in kinds and other not in kinds, kinds
        (logits,) = program.method("forward").execute(ids.numpy())
        with torch.no_grad():
            want = reference(input_ids=ids).logits[0].numpy()
        got = np.asarray(logits).reshape(want.shape)
        scale = float(np.abs(want).max())
        err = float(np.abs(got - want).max())
        print(f"{quantize} {stem}: max |runtime - reference| {err:.3g} (max |logit| {scale:.3g})")
        assert err <= 1e-4 * max(1.0, scale), stem
        tokens[stem] = program.method("forward_cached").generate(PROMPT, NEW_TOKENS).tokens
        assert tokens[stem] == checks.reference_tokens(reference, PROMPT, NEW_TOKENS), stem
    assert tokens["a"] != tokens["foundation"] or tokens["b"] != tokens["foundation"]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
