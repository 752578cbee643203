"""The Python runtime given bad input: each case raises at once a TypeError or an EdgeshareError
(or NpyFileError) with a one-line message, never hangs, crashes or quotes a kernel.

Programs: the generation fixture (//testing:generation_files: a tiny Llama exported with
--hf-model, vocabulary 256, --max-seq-len 48).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from edgeshare.extension.python import DataFile, EdgeshareError, NpyFileError, Program, generate_cli, load_npy
from edgeshare.testing import bad_files

FILES = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])
VOCAB = 256
MAX_SEQ_LEN = 48
PROMPT = np.array([1, 5, 9, 14], np.int64)


def _path(name: str) -> str:
    return os.path.join(FILES, name)


@pytest.fixture(scope="module")
def program():
    return Program.load(_path("a.pte"), [DataFile.open(_path("foundation.ptd"))])


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


def test_fifos_are_refused_without_blocking(tmp_path):
    """Run in a child with a timeout: a blocking open would hang the test, not fail it."""
    pipe = bad_files.fifo(tmp_path / "pipe")
    code = f"""
from edgeshare.extension.python import DataFile, EdgeshareError, NpyFileError, Program, load_npy
cases = [
    lambda: DataFile.open({pipe!r}),
    lambda: Program.load({pipe!r}, []),
    lambda: Program.load({_path("a.pte")!r}, [{pipe!r}]),
    lambda: load_npy({pipe!r}),
]
for case in cases:
    try:
        case()
    except (EdgeshareError, NpyFileError) as e:
        assert "not a regular file" in str(e), e
    else:
        raise SystemExit("no error")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=os.environ)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "shape, words",
    [
        ("(100000, 100000)", "80000000000 bytes; the file holds 32"),
        ("(2000000000, 2000000000, 2000000000, 2000000000)", "128000000000000000000000000000000000000 bytes"),
    ],
)
def test_a_npy_claiming_more_than_the_file_holds(tmp_path, shape, words):
    path = bad_files.npy_with_header(tmp_path / "huge.npy", "<i8", shape)
    with pytest.raises(NpyFileError) as e:
        load_npy(path)
    assert words in _one_line(e.value) and path in str(e.value)


def test_a_token_outside_the_vocabulary(program):
    with pytest.raises(EdgeshareError) as e:
        program.method("forward_cached").generate(np.array([1, 300, 5], np.int64), 4)
    assert "token id 300 is outside the vocabulary of 256" in _one_line(e.value)
    with pytest.raises(EdgeshareError) as e:
        program.method("forward").execute(np.array([[1, 300, 5]], np.int64))
    assert "token id 300 is outside the vocabulary of 256" in _one_line(e.value)
    assert "aten::" not in str(e.value)


@pytest.mark.parametrize("eos_id, error, words", [
    (300, EdgeshareError, "end token id 300 is outside the vocabulary of 256"),
    (-3, EdgeshareError, "eos_id is -3"),
    (2.0, TypeError, "eos_id must be an int, not float"),
])
def test_an_end_token_outside_the_vocabulary(program, eos_id, error, words):
    with pytest.raises(error) as e:
        program.method("forward_cached").generate(PROMPT, 4, eos_id=eos_id)
    assert words in _one_line(e.value)


@pytest.mark.parametrize("count", [3.7, "5", True, None])
def test_max_new_tokens_must_be_an_int(program, count):
    with pytest.raises(TypeError, match="max_new_tokens must be an int"):
        program.method("forward_cached").generate(PROMPT, count)


def test_numpy_integers_are_ints(program):
    assert len(program.method("forward_cached").generate(PROMPT, np.int64(2)).tokens) == 2


@pytest.mark.parametrize("count", [0, 1])
def test_a_prompt_past_max_seq_len_is_refused_even_with_no_new_tokens(program, count):
    with pytest.raises(EdgeshareError) as e:
        program.method("forward_cached").generate(np.ones(MAX_SEQ_LEN + 1, np.int64), count)
    assert f"a prompt of {MAX_SEQ_LEN + 1} tokens is longer than the {MAX_SEQ_LEN}" in _one_line(e.value)


@pytest.mark.parametrize("start", [MAX_SEQ_LEN - 2, MAX_SEQ_LEN + 10, -1])
def test_a_start_position_outside_the_kv_cache(program, start):
    with pytest.raises(EdgeshareError) as e:
        program.method("forward_cached").execute(PROMPT.reshape(1, -1), np.array(start, np.int64))
    assert f"start position {start} with 4 token(s) is outside the KV cache of {MAX_SEQ_LEN}" in _one_line(e.value)
    assert e.value.code == "InvalidArgument"


def test_bytes_of_a_file_are_escaped(tmp_path):
    odd = bad_files.renamed_method_pte(_path("a.pte"), tmp_path / "odd.pte", "forward_cached", b"forward\xff\x1bcache")
    loaded = Program.load(odd, [DataFile.open(_path("foundation.ptd"))])
    with pytest.raises(EdgeshareError) as e:
        loaded.method("nope")
    assert r"(methods: forward, forward\xff\x1bcache)" in _one_line(e.value)


def _cli_fails(capsys, argv, words: str) -> None:
    assert generate_cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("edgeshare-generate: error: ") and words in err, err


def test_edgeshare_generate_errors_are_one_line(capsys, tmp_path):
    prompt = str(tmp_path / "prompt.npy")
    np.save(prompt, PROMPT)
    base = ["--data", _path("foundation.ptd"), "--program", _path("a.pte")]
    _cli_fails(capsys, base + ["--prompt-ids", bad_files.fifo(tmp_path / "pipe")], "not a regular file")
    huge = bad_files.npy_with_header(tmp_path / "huge.npy", "<i8", "(100000, 100000)")
    _cli_fails(capsys, base + ["--prompt-ids", huge], "80000000000 bytes; the file holds 32")
    _cli_fails(capsys, base + ["--prompt-ids", prompt, "--max-new-tokens", "3.7"], "'3.7' is not an integer")
    _cli_fails(capsys, base + ["--prompt-ids", prompt, "--eos-id", "300"], "end token id 300 is outside the vocabulary")
    _cli_fails(capsys, base + ["--prompt-ids", prompt, "--method", "nope"], "has no method 'nope'")
    twice = base + ["--program", _path("a.pte"), "--prompt-ids", prompt, "--json", str(tmp_path / "t.json")]
    _cli_fails(capsys, twice, "are both named 'a'")
    assert generate_cli.main(base + ["--prompt-ids", prompt, "--max-new-tokens", "3"]) == 0


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
