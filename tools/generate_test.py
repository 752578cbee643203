"""//tools:generate over export_lora --hf-model programs: greedy tokens equal transformers' generate.

The in-repo tiny Llama (weights std 0.2, so that greedy decoding gives varied tokens, not one
repeated token) with two PEFT adapters is exported once; one generate process loads a.pte, b.pte
and foundation.pte over foundation.ptd and generates 32 tokens with each program's
"forward_cached" (its KV cache). Each equals transformers' generate(do_sample=False) of
PeftModel.from_pretrained (or the bare model) token for token. Then the errors, each one line and
exit 1, and one light run of a second family (GPT-2: learned positions, no GQA, Conv1D adapters).
Generation reaching --max-seq-len stops there (finish reason "length", said on stderr). Over the
text fixture (//testing:text_files): --stop cuts the text, unseeded sampling draws and reports a
seed that --seed repeats, and a tokenizer that cannot be read does not block --prompt-ids.
"""

import json
import os
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.exir import to_edge
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora

MAX_SEQ_LEN = 48
NEW_TOKENS = 32
INIT_STD = 0.2
PROMPT = np.random.default_rng(1).integers(0, hf_tiny.VOCAB, size=(6,), dtype=np.int64)


def _generate_path() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, "tools", "generate")


def _run(args: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run([_generate_path(), *args], capture_output=True, text=True, check=False)


def _export(family: str, root: str, adapters: Sequence[str], max_seq_len: int) -> hf_tiny.TinyLoraFiles:
    files = hf_tiny.save_tiny_lora(family, os.path.join(root, "in"), initializer_range=INIT_STD)
    argv = ["--hf-model", files.model_dir, "--out", os.path.join(root, "out"), "--max-seq-len", str(max_seq_len)]
    for name in adapters:
        argv += ["--adapter", f"{name}={files.adapter_dirs[name]}"]
    assert export_lora.main(argv) == 0
    return files


def _transformers_tokens(files: hf_tiny.TinyLoraFiles, adapter: Optional[str], prompt: np.ndarray, n: int) -> List[int]:
    """What a user gets from transformers + PEFT, from the saved directories."""
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, files.adapter_dirs[adapter]).eval()
    ids = torch.from_numpy(prompt).view(1, -1)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
        )
    return out[0, ids.shape[1] :].tolist()


def _generate(out: str, stems: Sequence[str], prompt_path: str, n: int, json_path: str) -> Dict[str, dict]:
    args = ["--data", os.path.join(out, "foundation.ptd"), "--prompt-ids", prompt_path]
    args += ["--max-new-tokens", str(n), "--json", json_path]
    for stem in stems:
        args += ["--program", os.path.join(out, f"{stem}.pte")]
    proc = _run(args)
    assert proc.returncode == 0, proc.stderr
    with open(json_path) as f:
        result = json.load(f)
    return result if len(stems) > 1 else {stems[0]: result}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("llama"))
    files = _export("llama", root, ["a", "b"], MAX_SEQ_LEN)
    prompt_path = os.path.join(root, "prompt.npy")
    np.save(prompt_path, PROMPT)
    return files, os.path.join(root, "out"), prompt_path


def test_tokens_equal_transformers_generate_for_two_adapters_and_the_foundation(llama, tmp_path):
    files, out, prompt_path = llama
    got = _generate(out, ["a", "b", "foundation"], prompt_path, NEW_TOKENS, str(tmp_path / "g.json"))
    for stem, adapter in (("a", "a"), ("b", "b"), ("foundation", None)):
        result = got[stem]
        want = _transformers_tokens(files, adapter, PROMPT, NEW_TOKENS)
        assert result["tokens"] == want, stem
        assert result["prefill_ms"] > 0 and result["decode_tokens_per_s"] > 0, result
    # The check only means something if decoding depends on the history and on the adapter.
    assert len(set(got["foundation"]["tokens"])) > NEW_TOKENS // 2
    assert got["a"]["tokens"] != got["foundation"]["tokens"] != got["b"]["tokens"]


def test_a_warm_up_generation_leaves_the_timed_tokens_unchanged(llama, tmp_path):
    # The warm-up generates other tokens into the KV cache; the timed run must start from a reset one.
    files, out, prompt_path = llama
    json_path = str(tmp_path / "w.json")
    args = ["--data", os.path.join(out, "foundation.ptd"), "--program", os.path.join(out, "a.pte")]
    args += ["--prompt-ids", prompt_path, "--max-new-tokens", str(NEW_TOKENS), "--json", json_path]
    proc = _run(args + ["--warmup-tokens", "3"])
    assert proc.returncode == 0, proc.stderr
    with open(json_path) as f:
        result = json.load(f)
    assert result["tokens"] == _transformers_tokens(files, "a", PROMPT, NEW_TOKENS)
    assert result["first_prefill_ms"] > 0


def test_prompt_as_a_1xp_array_and_the_longest_fit(llama, tmp_path):
    files, out, _ = llama
    prompt = np.random.default_rng(2).integers(0, hf_tiny.VOCAB, size=(1, MAX_SEQ_LEN - 7), dtype=np.int64)
    path = str(tmp_path / "long.npy")
    np.save(path, prompt)
    got = _generate(out, ["a"], path, 8, str(tmp_path / "g.json"))  # prompt + 8 - 1 = MAX_SEQ_LEN fed
    assert got["a"]["tokens"] == _transformers_tokens(files, "a", prompt[0], 8)


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("generate: error: "), proc.stderr
    return lines[0]


def test_generation_reaching_max_seq_len_stops_there_with_finish_reason_length(llama, tmp_path):
    files, out, prompt_path = llama
    fit = MAX_SEQ_LEN + 1 - len(PROMPT)  # the last new token is never fed back
    args = ["--program", os.path.join(out, "a.pte"), "--data", os.path.join(out, "foundation.ptd")]
    args += ["--prompt-ids", prompt_path, "--json", str(tmp_path / "g.json")]
    proc = _run(args + ["--max-new-tokens", str(fit + 5)])
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "g.json") as f:
        result = json.load(f)
    assert result["finish_reason"] == "length"
    assert result["tokens"] == _transformers_tokens(files, "a", PROMPT, fit)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "finish reason length" in lines[0] and f"the {MAX_SEQ_LEN} tokens" in lines[0], lines
    proc = _run(args + ["--max-new-tokens", "3"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    with open(tmp_path / "g.json") as f:
        assert json.load(f)["finish_reason"] == "length"


# The generation fixture (//testing:generation_files): swap/ holds adapters a and c of one
# structure exported with --swappable, expected.json transformers' tokens for each.
FIXTURE = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])


def test_swap_adapter_generates_as_transformers_after_each_swap(tmp_path):
    with open(os.path.join(FIXTURE, "expected.json")) as f:
        expected = json.load(f)
    swap = os.path.join(FIXTURE, "swap")
    order = ["c", "a", "c"]
    args = ["--program", os.path.join(swap, "lora.pte"), "--data", os.path.join(swap, "foundation.ptd")]
    args += ["--data", os.path.join(swap, "a.ptd"), "--prompt-ids", os.path.join(FIXTURE, "prompt.npy")]
    for name in order:
        args += ["--swap-adapter", os.path.join(swap, f"{name}.ptd")]
    out_json = str(tmp_path / "swaps.json")
    proc = _run(args + ["--max-new-tokens", str(expected["new_tokens"]), "--json", out_json])
    assert proc.returncode == 0, proc.stderr
    with open(out_json) as f:
        got = json.load(f)
    assert got["tokens"] == expected["tokens"]["a"]
    assert [s["adapter"].rsplit("/", 1)[-1] for s in got["swaps"]] == [f"{name}.ptd" for name in order]
    for name, swapped in zip(order, got["swaps"]):
        assert swapped["program"] == "lora"
        assert swapped["tokens"] == expected["tokens"][name], name


def test_swap_adapter_of_another_structure_is_one_line_exit_1(llama):
    _, out, prompt_path = llama
    swap = os.path.join(FIXTURE, "swap")
    args = ["--program", os.path.join(swap, "lora.pte"), "--data", os.path.join(swap, "foundation.ptd")]
    args += ["--data", os.path.join(swap, "a.ptd"), "--prompt-ids", prompt_path, "--max-new-tokens", "2"]
    line = _one_line_error(_run(args + ["--swap-adapter", os.path.join(swap, "foundation.ptd")]))
    assert "foundation.ptd" in line
    line = _one_line_error(
        _run(
            [
                "--program",
                os.path.join(out, "a.pte"),
                "--data",
                os.path.join(out, "foundation.ptd"),
                "--prompt-ids",
                prompt_path,
                "--max-new-tokens",
                "2",
                "--swap-adapter",
                os.path.join(swap, "c.ptd"),
            ]
        )
    )
    assert "c.ptd" in line


class _Stateless(torch.nn.Module):
    """(input_ids, start_pos) -> logits, the generation signature, but no KV cache."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(hf_tiny.VOCAB, 8)
        self.head = torch.nn.Linear(8, hf_tiny.VOCAB)

    def forward(self, input_ids: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.head(self.embed(input_ids)) + start_pos.to(torch.float32)


def test_a_method_without_state_is_refused(llama, tmp_path):
    _, out, prompt_path = llama
    t = torch.export.Dim("T", min=1, max=16)
    ep = torch.export.export(
        _Stateless(), (torch.zeros(1, 3, dtype=torch.long), torch.tensor(0)), dynamic_shapes=({1: t}, None)
    )
    to_edge(ep).to_executorch().write_to_dir(str(tmp_path), "stateless")
    program = ["--program", str(tmp_path / "stateless.pte"), "--prompt-ids", prompt_path]
    line = _one_line_error(_run(program + ["--method", "forward", "--max-new-tokens", "2"]))
    assert "method 'forward' keeps no state (no KV cache)" in line
    # The stateless "forward" of an export takes input_ids only.
    args = ["--program", os.path.join(out, "a.pte"), "--data", os.path.join(out, "foundation.ptd")]
    line = _one_line_error(_run(args + ["--prompt-ids", prompt_path, "--method", "forward"]))
    assert "method 'forward' takes 1 inputs" in line
    line = _one_line_error(_run(args + ["--prompt-ids", prompt_path, "--method", "nope"]))
    assert "has no method 'nope' (methods: forward, forward_cached)" in line


@pytest.mark.parametrize("kind", ["not_npy", "float", "2x3", "empty"])
def test_a_bad_prompt_file_is_one_line_exit_1(llama, tmp_path, kind):
    _, out, _ = llama
    path = str(tmp_path / "prompt.npy")
    if kind == "not_npy":
        with open(path, "wb") as f:
            f.write(b"these are not token ids")
    else:
        shapes = {
            "float": np.zeros((3,), np.float32),
            "2x3": np.zeros((2, 3), np.int64),
            "empty": np.zeros((0,), np.int64),
        }
        np.save(path, shapes[kind])
    args = ["--program", os.path.join(out, "a.pte"), "--data", os.path.join(out, "foundation.ptd")]
    line = _one_line_error(_run(args + ["--prompt-ids", path]))
    assert path in line, line
    expected = {
        "not_npy": "",
        "float": "prompt ids must be int64",
        "2x3": "must have shape [P] or [1, P]",
        "empty": "the prompt is empty",
    }[kind]
    assert expected in line, line


def test_a_second_family_gpt2_equals_transformers(tmp_path):
    files = _export("gpt2", str(tmp_path), ["a"], 24)
    prompt = PROMPT[:5]
    path = str(tmp_path / "prompt.npy")
    np.save(path, prompt)
    got = _generate(str(tmp_path / "out"), ["a", "foundation"], path, 16, str(tmp_path / "g.json"))
    assert got["a"]["tokens"] == _transformers_tokens(files, "a", prompt, 16)
    assert got["foundation"]["tokens"] == _transformers_tokens(files, None, prompt, 16)
    assert got["a"]["tokens"] != got["foundation"]["tokens"]



# The text fixture: a tiny Llama with its tokenizer, chat template and end tokens beside the programs.
TEXT = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])


@pytest.fixture(scope="module")
def text_expected():
    with open(os.path.join(TEXT, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def _text_run(tmp_path, *flags: str, program: str = os.path.join(TEXT, "a.pte")):
    json_path = str(tmp_path / "t.json")
    args = ["--program", program, "--data", os.path.join(TEXT, "foundation.ptd"), "--json", json_path, *flags]
    proc = _run(args)
    assert proc.returncode == 0, proc.stderr
    with open(json_path, encoding="utf-8") as f:
        return proc, json.load(f)


def test_an_end_token_gives_finish_reason_stop(tmp_path, text_expected):
    _, result = _text_run(tmp_path, "--prompt", text_expected["prompt"], "--max-new-tokens", "24",
                          program=os.path.join(TEXT, "foundation.pte"))
    assert result["tokens"] == text_expected["generated"]["foundation"]["tokens"]
    assert result["tokens"][-1] in text_expected["end_token_ids"] and result["finish_reason"] == "stop"


def test_stop_text_cuts_the_text_and_ends_generation(tmp_path, text_expected):
    want = text_expected["generated"]["a"]
    stop = want["text"][6:9]
    cut = want["text"].find(stop)
    assert cut > 0 and stop.strip()
    proc, result = _text_run(tmp_path, "--prompt", text_expected["prompt"], "--max-new-tokens", "24",
                             "--stop", "never appears", "--stop", stop)
    assert result["text"] == want["text"][:cut]
    assert result["finish_reason"] == "stop"
    assert len(result["tokens"]) < len(want["tokens"]) and result["tokens"] == want["tokens"][: len(result["tokens"])]
    assert proc.stdout.startswith("a:\n" + want["text"][:cut] + "\n  prefill")


def test_unseeded_sampling_draws_a_seed_that_seed_repeats(tmp_path, text_expected):
    sampling = ["--prompt", text_expected["prompt"], "--max-new-tokens", "16", "--temperature", "1.5"]
    proc, first = _text_run(tmp_path, *sampling, "--verbose")
    _, second = _text_run(tmp_path, *sampling)
    assert first["seed"] != second["seed"]
    assert f"seed {first['seed']}" in proc.stderr
    _, again = _text_run(tmp_path, *sampling, "--seed", str(first["seed"]))
    assert again["tokens"] == first["tokens"] and again["seed"] == first["seed"]
    _, greedy = _text_run(tmp_path, "--prompt", text_expected["prompt"], "--max-new-tokens", "4", "--seed", "9")
    assert "seed" not in greedy and greedy["tokens"] == text_expected["generated"]["a"]["tokens"][:4]


def test_an_unreadable_tokenizer_does_not_block_prompt_ids(tmp_path, text_expected):
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(os.path.join(TEXT, "a.pte"), folder)
    shutil.copy(os.path.join(TEXT, "generation_config.json"), folder)
    (folder / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}')
    prompt = str(tmp_path / "p.npy")
    np.save(prompt, np.asarray(text_expected["prompt_ids"], dtype=np.int64))
    proc, result = _text_run(tmp_path, "--prompt-ids", prompt, "--max-new-tokens", "6",
                             program=str(folder / "a.pte"))
    assert result["tokens"] == text_expected["generated"]["a"]["tokens"][:6] and "text" not in result
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("generate: warning: ") and "text is unavailable" in lines[0]
    args = ["--program", str(folder / "a.pte"), "--data", os.path.join(TEXT, "foundation.ptd")]
    assert "tokenizer.json" in _one_line_error(_run(args + ["--prompt", "hello"]))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
