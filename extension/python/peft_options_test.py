"""The LoRA options PEFT saves, exported from disk and run by the C++ runtime, each equal to PEFT
eager: logits within 1e-4 at two token counts from one export, and 32 greedy tokens.

One tiny Llama with biases (attention and MLP) and one adapter per option: rsLoRA, rank and alpha
patterns, layers_to_transform, a trained bias on lora_B (lora_bias), and base-layer biases trained
with bias="lora_only" and bias="all". With a bias-training adapter loaded beside another, every
foundation weight is fetched and packed once. Options that cannot be exported are refused before
anything is lowered, naming the option.
"""

import copy
import json
import os
import re
import subprocess
import sys

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import export_hf_lora
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.peft_options import UnsupportedOptionError
from edgeshare.extension.python import DataFile, Program
from edgeshare.models import hf_tiny

TOLERANCE = 1e-4
MAX_SEQ_LEN = 48
TOKENS = (5, 11)
NEW_TOKENS = 32
TARGETS = ["q_proj", "v_proj"]

OPTIONS = {
    "rslora": dict(r=4, lora_alpha=8, target_modules=TARGETS, use_rslora=True),
    "patterns": dict(
        r=2,
        lora_alpha=4,
        target_modules=["q_proj", "v_proj", "down_proj"],
        rank_pattern={"v_proj": 6},
        alpha_pattern={"down_proj": 16},
    ),
    "layers": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], layers_to_transform=[1]),
    "lora_bias": dict(r=4, lora_alpha=8, target_modules=TARGETS, lora_bias=True),
    "bias_lora_only": dict(r=4, lora_alpha=8, target_modules=TARGETS, bias="lora_only"),
    "bias_all": dict(r=4, lora_alpha=8, target_modules=TARGETS + ["gate_proj"], bias="all"),
    "modules_to_save": dict(r=4, lora_alpha=8, target_modules=TARGETS, modules_to_save=["down_proj"]),
    "dora": dict(r=4, lora_alpha=8, target_modules=TARGETS + ["down_proj"], use_dora=True),
    "embedding": dict(r=4, lora_alpha=8, target_modules=["q_proj", "embed_tokens"]),
}
REFUSED = {
    "dora_embedding": (dict(r=4, lora_alpha=8, target_modules=["embed_tokens"], use_dora=True), "DoRA (use_dora)"),
    "replication": (dict(r=4, lora_alpha=8, target_modules=TARGETS, layer_replication=[[0, 2], [1, 2]]), "layer_replication"),
}


def _model() -> torch.nn.Module:
    config = hf_tiny.tiny_config("llama")
    config.attention_bias = True
    config.mlp_bias = True
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):  # zeros from the config: give every bias its own values
                param.copy_(torch.randn(param.shape, generator=g) * 0.1)
    return model


def _save_adapter(base, path, options, seed):
    model = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(task_type="CAUSAL_LM", **options)).eval()
    g = torch.Generator().manual_seed(seed)
    trains_bias = options.get("bias", "none") != "none"
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=g) * 0.1
            if ".lora_magnitude_vector." in name:  # DoRA's magnitude: the column norm, trained a little
                param.mul_(1 + noise)
            elif ".lora_" in name or ".modules_to_save." in name or (trains_bias and name.endswith(".bias")):
                param.copy_(noise)
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("options"))
    base = _model()
    model_dir = os.path.join(root, "model")
    base.save_pretrained(model_dir)
    adapters = {}
    for seed, (name, options) in enumerate(OPTIONS.items(), start=10):
        adapters[name] = os.path.join(root, name)
        _save_adapter(base, adapters[name], options, seed)
    out = os.path.join(root, "out")
    export_hf_lora(model_dir, adapters, out, MAX_SEQ_LEN, XnnpackPartitioner())
    return model_dir, adapters, out


def _eager(model_dir, adapter_dir):
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return peft.PeftModel.from_pretrained(base, adapter_dir).eval()


def _ids(tokens):
    return np.random.default_rng(tokens).integers(0, hf_tiny.VOCAB, size=(1, tokens), dtype=np.int64)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_option_equals_peft_eager(exported, name):
    model_dir, adapters, out = exported
    eager = _eager(model_dir, adapters[name])
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    program = Program.load(os.path.join(out, f"{name}.pte"), [foundation])
    bare = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for tokens in TOKENS:
        ids = _ids(tokens)
        with torch.no_grad():
            want = eager(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
            plain = bare(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
        assert not np.allclose(want, plain, atol=1e-3), f"{name} should change the logits"
        (got,) = program.method("forward").execute(ids)
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0, err_msg=f"{name}, T={tokens}")
    prompt = _ids(TOKENS[0])
    with torch.no_grad():
        generated = eager.generate(
            input_ids=torch.from_numpy(prompt), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
        )
    want_tokens = generated[0, prompt.shape[1] :].tolist()
    assert program.method("forward_cached").generate(prompt, NEW_TOKENS).tokens == want_tokens, name


@pytest.mark.parametrize("name", list(REFUSED))
def test_option_that_cannot_be_exported_is_refused_before_lowering_naming_it(tmp_path, name):
    options, words = REFUSED[name]
    base = _model()
    model_dir = str(tmp_path / "model")
    base.save_pretrained(model_dir)
    _save_adapter(base, str(tmp_path / name), options, 1)
    lines = []
    with pytest.raises(UnsupportedOptionError, match=re.escape(words)):
        export_hf_lora(model_dir, {name: str(tmp_path / name)}, str(tmp_path / "out"), MAX_SEQ_LEN, progress=lines.append)
    assert not any(line.startswith(("exporting", "lowering")) for line in lines), lines
    assert not os.path.exists(tmp_path / "out")


_LOAD_BOTH = """
import json, sys
from edgeshare.extension.python import DataFile, Program, weights_cache_stats
foundation = DataFile.open(sys.argv[1])
programs = [Program.load(path, [foundation]) for path in sys.argv[2:]]
stats = weights_cache_stats()
print(json.dumps({"fetches": stats["named_data_fetches"], "packed_entries": stats["packed_entries"]}))
"""


def _load_in_fresh_process(foundation, *programs):
    """The weights cache's counters after loading programs in a process of their own."""
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_BOTH, foundation, *programs], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bias_training_adapter_beside_another_fetches_and_packs_each_foundation_weight_once(exported):
    _, _, out = exported
    path = os.path.join(out, "foundation.ptd")
    with open(path, "rb") as f:
        keys = list(deserialize_ptd(f.read(), path).named_data)
    weights = [k for k in keys if k.endswith("_proj.weight")]
    plain, biased = (os.path.join(out, f"{n}.pte") for n in ("rslora", "bias_all"))
    both = _load_in_fresh_process(path, plain, biased)
    assert all(both["fetches"].get(k) == 1 for k in weights), {k: both["fetches"].get(k) for k in weights}
    assert all(both["fetches"].get(k, 0) <= 1 for k in keys)
    # Every packed operator of the bias-training program is the other program's, or its own LoRA's.
    alone = _load_in_fresh_process(path, plain)
    assert both["packed_entries"] == alone["packed_entries"] + _lora_linears(biased)


def _lora_linears(program):
    """The fully connected operators a program packs that hold no foundation weight: its distinct
    lora_A and lora_B weights (the methods of a program share them)."""
    with open(program, "rb") as f:
        named = deserialize_pte(f.read(), program).named_data
    return len({blob.digest for key, blob in named.items() if ".lora_A." in key or ".lora_B." in key})


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
