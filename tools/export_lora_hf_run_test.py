"""export_lora --hf-model DIR --adapter a=DIR --adapter b=DIR, then //tools:run --method forward.

A tiny Llama made from a config (seeded, never downloaded) with two PEFT LoRA adapters of different
target modules and ranks. The three programs (a.pte, b.pte, foundation.pte) run in one process over
foundation.ptd, from the same files at two token counts; their logits equal transformers + PEFT
eager (PeftModel.from_pretrained) within 1e-4 and every foundation key is fetched once (the tied
embedding / lm_head key: hf_tied_fetch_run_test).
"""

import os

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.exir import load_hf_model
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir.hf import tied_keys
from edgeshare.models import hf_tiny
from edgeshare.testing.run_binary import RunError, run_programs
from edgeshare.tools import export_lora

TOLERANCE = 1e-4
MAX_SEQ_LEN = 32


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    files = hf_tiny.save_tiny_lora("llama", str(root / "in"))
    out = str(root / "out")
    argv = ["--hf-model", files.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN)]
    for name, path in files.adapter_dirs.items():
        argv += ["--adapter", f"{name}={path}"]
    assert export_lora.main(argv) == 0
    return files, out


def _eager(files: hf_tiny.TinyLoraFiles, ids: np.ndarray):
    """Logits of transformers + PEFT as a user runs them: from the saved directories."""

    def logits(model):
        with torch.no_grad():
            return model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()

    def load():
        return transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()

    want = {"foundation": logits(load())}
    for name, path in files.adapter_dirs.items():
        want[name] = logits(peft.PeftModel.from_pretrained(load(), path).eval())
    return want


def test_cli_prints_progress_and_the_summary(tmp_path, capsys):
    files = hf_tiny.save_tiny_lora("llama", str(tmp_path / "in"))
    # The model's tokenizer files and generation_config.json land beside the programs.
    tokenizer = b'{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}'
    with open(os.path.join(files.model_dir, "tokenizer.json"), "wb") as f:
        f.write(tokenizer)
    with open(os.path.join(files.model_dir, "generation_config.json"), "w") as f:
        f.write('{"eos_token_id": [2, 5]}')
    argv = ["--hf-model", files.model_dir, "--adapter", f"a={files.adapter_dirs['a']}", "--out", str(tmp_path / "o")]
    assert export_lora.main(argv + ["--max-seq-len", "8"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    for step in ("loading model", "loading adapter 'a'", "exporting", "lowering", "writing"):
        assert f"export_lora: {step}" in captured.err, captured.err  # plain lines: stderr is no terminal
    assert "shared foundation weights" in out and "adapter 'a' (method 'forward'" in out
    assert "foundation (method 'forward' of" in out
    assert "tokenizer and generation config: tokenizer.json, generation_config.json" in out
    with open(tmp_path / "o" / "tokenizer.json", "rb") as f:
        assert f.read() == tokenizer
    with open(tmp_path / "o" / "generation_config.json") as f:
        assert f.read() == '{"eos_token_id": [2, 5]}'


@pytest.mark.parametrize("tokens", [3, 17])
def test_programs_match_peft_eager_at_any_length_and_fetch_each_key_once(exported, tokens):
    files, out = exported
    ids = np.random.default_rng(tokens).integers(0, hf_tiny.VOCAB, size=(1, tokens), dtype=np.int64)
    stems = ["a", "b", "foundation"]
    programs = [os.path.join(out, f"{s}.pte") for s in stems]
    ptd = os.path.join(out, "foundation.ptd")
    run = run_programs(programs, [ptd], [ids], extra_args=["--method", "forward"])
    want = _eager(files, ids)
    for stem in stems:
        (got,) = run.outputs[f"{stem}.forward"]
        assert got.shape == (1, tokens, hf_tiny.VOCAB), (stem, got.shape)
        np.testing.assert_allclose(got, want[stem], atol=TOLERANCE, rtol=TOLERANCE, err_msg=stem)
    assert not np.allclose(want["a"], want["foundation"], atol=1e-3)
    with open(ptd, "rb") as f:
        keys = list(deserialize_ptd(f.read(), ptd).named_data)
    fetches = run.stats["data_map_fetches"]
    assert sorted(fetches) == sorted(keys)
    # The tied embedding / lm_head key is read by the delegate (lm_head) and by the embedding
    # kernel: its fetch count is hf_tied_fetch_run_test's.
    tied = tied_keys(load_hf_model(files.model_dir))
    assert "model.embed_tokens.weight" in tied
    once = {key: n for key, n in fetches.items() if n != 1 and key not in tied}
    assert once == {}, "foundation keys fetched more than once"


def test_a_bare_model_exports_without_adapters_as_the_same_foundation_files(exported, tmp_path):
    files, out = exported
    bare = str(tmp_path / "bare")
    argv = ["--hf-model", files.model_dir, "--out", bare, "--max-seq-len", str(MAX_SEQ_LEN)]
    assert export_lora.main(argv) == 0
    assert sorted(f for f in os.listdir(bare) if f.endswith((".pte", ".ptd"))) == ["foundation.ptd", "foundation.pte"]
    # The same bytes as the foundation files of the export with adapters: the same program.
    for name in ("foundation.pte", "foundation.ptd"):
        with open(os.path.join(bare, name), "rb") as f, open(os.path.join(out, name), "rb") as g:
            assert f.read() == g.read(), name
    ids = np.random.default_rng(5).integers(0, hf_tiny.VOCAB, size=(1, 9), dtype=np.int64)
    run = run_programs(
        [os.path.join(bare, "foundation.pte")], [os.path.join(bare, "foundation.ptd")], [ids], extra_args=["--method", "forward"]
    )
    (got,) = run.outputs["foundation.forward"]
    np.testing.assert_allclose(got, _eager(files, ids)["foundation"], atol=TOLERANCE, rtol=TOLERANCE)


def test_token_count_beyond_max_seq_len_is_an_error_not_a_wrong_answer(exported):
    _, out = exported
    ids = np.zeros((1, MAX_SEQ_LEN + 1), dtype=np.int64)
    with pytest.raises(RunError, match=rf"dim 1 is {MAX_SEQ_LEN + 1}, outside the 1\.\.{MAX_SEQ_LEN}"):
        run_programs([os.path.join(out, "a.pte")], [os.path.join(out, "foundation.ptd")], [ids])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
