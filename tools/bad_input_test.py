"""//tools:generate and //tools:run given bad input: each case ends at once in one line on stderr
and exit status 1 (no signal, no hang, nothing half written), never in a kernel's message.

Programs: the generation fixture (//testing:generation_files: a tiny Llama exported with
--hf-model, vocabulary 256, --max-seq-len 48).
"""

import json
import os
import shutil
import subprocess
from typing import List, Sequence

import numpy as np
import pytest
from edgeshare.testing import bad_files

FILES = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])
TOOLS = os.path.dirname(os.path.abspath(__file__))
VOCAB = 256
MAX_SEQ_LEN = 48
# A guard against a hang, far above the fraction of a second these take.
TIMEOUT_S = 60


def _path(name: str) -> str:
    return os.path.join(FILES, name)


def _tool(name: str, args: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(TOOLS, name), *args], capture_output=True, check=False, timeout=TIMEOUT_S)


def _fails(name: str, args: Sequence[str], words: str) -> str:
    """Runs the tool, asserts exit 1 with one line on stderr holding `words`; returns the line."""
    proc = _tool(name, args)
    err = proc.stderr.decode("utf-8")  # Bytes from a file are escaped: the message decodes.
    assert proc.returncode == 1, (proc.returncode, err)
    assert err.count("\n") == 1 and err.startswith(f"{name}: error: "), err
    assert words in err, err
    return err


def _generate_args(prompt: str, *extra: str) -> List[str]:
    return ["--data", _path("foundation.ptd"), "--program", _path("a.pte"), "--prompt-ids", prompt, *extra]


def _run_args(inputs: str, *extra: str) -> List[str]:
    return ["--data", _path("foundation.ptd"), "--program", _path("a.pte"), "--inputs", inputs, *extra]


@pytest.fixture()
def prompt(tmp_path) -> str:
    path = str(tmp_path / "prompt.npy")
    np.save(path, np.array([[1, 5, 9, 14]], np.int64))
    return path


@pytest.mark.parametrize(
    "shape, words",
    [
        ("(100000, 100000)", "shape (100000, 100000) needs 80000000000 bytes of data; the file holds 32"),
        ("(1, 4000000000000)", "has a dim past 2147483647"),
        ("(2000000000, 2000000000, 2000000000, 2000000000)", "is too large"),
    ],
)
def test_a_npy_claiming_more_than_the_file_holds(tmp_path, shape, words):
    path = bad_files.npy_with_header(tmp_path / "huge.npy", "<i8", shape)
    _fails("generate", _generate_args(path), words)
    _fails("run", _run_args(path), words)


def test_a_npy_header_longer_than_the_file(tmp_path):
    path = bad_files.npy_with_header(tmp_path / "short.npy", "<i8", "(1, 4)", data_bytes=0)
    with open(path, "r+b") as f:
        f.truncate(40)
    _fails("generate", _generate_args(path), "its .npy header claims 118 bytes; the file has 30")


def test_bytes_of_a_file_are_escaped(tmp_path):
    path = bad_files.npy_with_header(tmp_path / "raw.npy", b"<\x1b[31m\xff\xfe", "(1, 4)")
    _fails("generate", _generate_args(path), r"dtype '<\x1b[31m\xff\xfe' is not supported")
    odd = bad_files.renamed_method_pte(_path("a.pte"), tmp_path / "odd.pte", "forward_cached", b"forward\xff\x1bcache")
    args = ["--data", _path("foundation.ptd"), "--program", odd, "--method", "nope"]
    _fails("run", args, r"(methods: odd.forward, odd.forward\xff\x1bcache)")


@pytest.mark.parametrize("flag", ["--data", "--program", "--prompt-ids", "--swap-adapter"])
def test_a_fifo_is_refused_without_blocking(tmp_path, prompt, flag):
    pipe = bad_files.fifo(tmp_path / "pipe")
    files = {"--data": _path("foundation.ptd"), "--program": _path("a.pte"), flag: pipe}
    argv = [arg for pair in files.items() for arg in pair]
    if flag != "--prompt-ids":
        _fails("generate", argv + ["--prompt-ids", prompt], "not a regular file")
        _fails("run", argv + ["--method", "forward", "--inputs", prompt], "not a regular file")
    else:
        _fails("generate", argv, "cannot read")


def test_a_fifo_as_run_inputs_is_refused(tmp_path):
    _fails("run", _run_args(bad_files.fifo(tmp_path / "pipe")), "cannot read")


def test_two_programs_of_one_name_are_an_error_not_a_lost_entry(tmp_path, prompt):
    os.makedirs(tmp_path / "other")
    shutil.copy(_path("b.pte"), tmp_path / "other" / "a.pte")
    out = tmp_path / "tokens.json"
    args = _generate_args(prompt, "--program", str(tmp_path / "other" / "a.pte"), "--json", str(out))
    _fails("generate", args, "are both named 'a'; --json keys programs by file name")
    assert not out.exists()
    run = ["--data", _path("foundation.ptd"), "--program", _path("a.pte"), "--program", str(tmp_path / "other" / "a.pte")]
    _fails("run", run + ["--outputs", str(tmp_path / "outs")], "are both named 'a'; --outputs keys programs")


def test_a_program_name_that_is_not_utf8_is_written_to_json(tmp_path, prompt):
    """The JSON library's strict UTF-8 check would throw out of main: the name is written with
    U+FFFD instead."""
    odd = tmp_path / b"a\xff.pte".decode("utf-8", "surrogateescape")
    shutil.copy(_path("a.pte"), odd)
    out = tmp_path / "tokens.json"
    args = ["--data", _path("foundation.ptd"), "--program", _path("b.pte"), "--program", str(odd)]
    proc = _tool("generate", args + ["--prompt-ids", prompt, "--max-new-tokens", "2", "--json", str(out)])
    assert proc.returncode == 0, proc.stderr
    with open(out) as f:
        assert sorted(json.load(f)) == ["a\ufffd", "b"]


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--eos-id", "300"], "end token id 300 is outside the vocabulary of 256"),
        (["--eos-id", "-3"], "--eos-id: -3 is not in 0.."),
        (["--max-new-tokens", "3.7"], "--max-new-tokens: 3.7 is not an integer"),
        (["--max-new-tokens", "-1"], "--max-new-tokens: -1 is not in 0..1000000"),
        (["--threads", "1.5"], "--threads: 1.5 is not an integer"),
        (["--top-p", "1.5"], "--top-p: Value 1.5 not in range"),
        (["--temperature", "-1"], "--temperature: Value -1 not in range"),
        (["--top-k", "-2"], "--top-k: -2 is not in 0.."),
        (["--prompt", "hi"], "--prompt-ids excludes --prompt"),
    ],
)
def test_flags_out_of_range(prompt, flags, words):
    _fails("generate", _generate_args(prompt, *flags), words)


def test_a_text_prompt_without_a_tokenizer_beside_the_program():
    args = ["--data", _path("foundation.ptd"), "--program", _path("a.pte"), "--prompt", "hi"]
    _fails("generate", args, "--prompt: there is no tokenizer.json or tokenizer.model beside")


def test_iterations_must_be_an_integer(prompt):
    _fails("run", _run_args(prompt, "--iterations", "2.5"), "--iterations: 2.5 is not an integer")


@pytest.mark.parametrize("new_tokens", ["0", "1"])
def test_a_prompt_past_max_seq_len_is_refused_even_with_no_new_tokens(tmp_path, new_tokens):
    path = str(tmp_path / "long.npy")
    np.save(path, np.ones((1, MAX_SEQ_LEN + 1), np.int64))
    words = f"a prompt of {MAX_SEQ_LEN + 1} tokens is longer than the {MAX_SEQ_LEN}"
    _fails("generate", _generate_args(path, "--max-new-tokens", new_tokens), words)


def test_a_token_outside_the_vocabulary(tmp_path):
    path = str(tmp_path / "oov.npy")
    np.save(path, np.array([[1, 300, 5]], np.int64))
    words = "token id 300 is outside the vocabulary of 256"
    err = _fails("generate", _generate_args(path), words)
    assert "aten::" not in err
    _fails("run", _run_args(path, "--method", "forward"), words)


@pytest.mark.parametrize("start, words", [(46, "start position 46 with 4 token(s)"), (-1, "start position -1")])
def test_a_start_position_outside_the_kv_cache(tmp_path, prompt, start, words):
    path = str(tmp_path / "start.npy")
    np.save(path, np.array(start, np.int64))
    err = _fails("run", _run_args(f"{prompt},{path}", "--method", "forward_cached"), words)
    assert f"outside the KV cache of {MAX_SEQ_LEN} positions" in err


def test_a_start_position_inside_the_kv_cache_runs(tmp_path, prompt):
    path = str(tmp_path / "start.npy")
    np.save(path, np.array(MAX_SEQ_LEN - 4, np.int64))
    proc = _tool("run", _run_args(f"{prompt},{path}", "--method", "forward_cached"))
    assert proc.returncode == 0, proc.stderr


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
