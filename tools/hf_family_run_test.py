"""One tiny Hugging Face family (EDGESHARE_HF_FAMILY) with its two PEFT LoRA adapters, exported by
export_hf_lora (XNNPACK) and run by //tools:run at T=1 and T=6 from the same files: logits equal
transformers + PEFT eager within 1e-4; each foundation key fetched once across the three programs
(a tied embedding / lm_head key: hf_tied_fetch_run_test). Generation with forward_cached (the KV
cache and edgeshare::cached_attention) gives transformers' greedy tokens for each program."""

import os

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import CausalLMLogits, export_hf_lora, load_hf_model, load_peft_adapter
from edgeshare.exir.hf import tied_keys
from edgeshare.extension.python import DataFile, Program
from edgeshare.models import hf_tiny
from edgeshare.testing.run_binary import run_programs

FAMILY = os.environ.get("EDGESHARE_HF_FAMILY", "llama")
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp(FAMILY)
    files = hf_tiny.save_tiny_lora(FAMILY, str(root / "in"))
    result = export_hf_lora(files.model_dir, files.adapter_dirs, str(root / "out"), 16, XnnpackPartitioner())
    base = load_hf_model(files.model_dir)
    models = {"foundation": CausalLMLogits(base)}
    for name, path in files.adapter_dirs.items():
        models[name] = CausalLMLogits(load_peft_adapter(base, name, path))
    return result, models, tied_keys(base)


def test_generation_equals_transformers_greedy_tokens(exported):
    result, models, _ = exported
    prompt = np.random.default_rng(7).integers(0, hf_tiny.VOCAB, size=(1, 5), dtype=np.int64)
    foundation = DataFile.open(result.foundation_path)
    paths = {"a": result.program_paths["a"], "b": result.program_paths["b"], "foundation": result.foundation_program}
    for name, path in paths.items():
        ids = torch.from_numpy(prompt)
        with torch.no_grad():
            want = models[name].model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=8, min_new_tokens=8
            )[0, 5:].tolist()
        got = Program.load(path, [foundation]).method("forward_cached").generate(prompt, 8).tokens
        assert got == want, f"{FAMILY} {name}"


@pytest.mark.parametrize("tokens", [1, 6])
def test_family_matches_eager_and_shares_the_foundation(exported, tokens):
    result, models, tied = exported
    ids = np.random.default_rng(tokens).integers(0, hf_tiny.VOCAB, size=(1, tokens), dtype=np.int64)
    programs = [result.program_paths["a"], result.program_paths["b"], result.foundation_program]
    run = run_programs(programs, [result.foundation_path], [ids], extra_args=["--method", "forward"])
    for name, model in models.items():
        with torch.no_grad():
            want = model(torch.from_numpy(ids)).numpy()
        (got,) = run.outputs[f"{name}.forward"]
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=TOLERANCE, err_msg=f"{FAMILY} {name} T={tokens}")
    fetches = run.stats["data_map_fetches"]
    assert sorted(fetches) == sorted(result.shared_keys)
    # A tied embedding / lm_head key is read by the delegate and a kernel: hf_tied_fetch_run_test.
    once = {key: n for key, n in fetches.items() if n != 1 and key not in tied}
    assert once == {}, "foundation keys fetched more than once"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
