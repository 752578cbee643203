"""Text in, text out from Python over the text fixture (//testing:text_files): a tiny Llama with a
byte-level BPE tokenizer trained offline, a chat template and generation_config.json's end tokens,
exported with adapters a and b; the tokenizer files sit beside the programs.

Greedy text equals transformers' decode of generate(do_sample=False) for both adapters and the bare
foundation and stops at generation_config's end token; top-k 1 is greedy; a seeded sampled run
repeats and equals //tools:generate's; streamed pieces concatenate to the decoded text without
splitting a character; the chat prompt equals transformers' apply_chat_template; a tokenizer.json
//tools:generate cannot read leaves --prompt-ids generating (no text, the reason on stderr) and
refuses --prompt with that reason.
"""

import json
import os
import subprocess
from typing import Any, Dict, List

import numpy as np
import pytest
from edgeshare.extension.python import DataFile, EdgeshareError, Program
from edgeshare.extension.python.text import TextDecoder, Tokenizer, TokenizerFileError

FILES = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])
NAMES = ("a", "b", "foundation")
SAMPLING = dict(temperature=0.9, top_k=40, top_p=0.9, repetition_penalty=1.2, seed=1234)


def _path(name: str) -> str:
    return os.path.join(FILES, name)


@pytest.fixture(scope="module")
def expected() -> Dict[str, Any]:
    with open(_path("expected.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def programs() -> Dict[str, Program]:
    foundation = DataFile.open(_path("foundation.ptd"))
    return {name: Program.load(_path(f"{name}.pte"), [foundation]) for name in NAMES}


def _tool_tokens(program: str, prompt_ids: List[int], tmp_path: Any, *flags: str) -> List[int]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prompt = str(tmp_path / "prompt.npy")
    np.save(prompt, np.asarray(prompt_ids, dtype=np.int64))
    out = str(tmp_path / "out.json")
    args = [os.path.join(root, "tools", "generate"), "--program", _path(program), "--data", _path("foundation.ptd"),
            "--prompt-ids", prompt, "--json", out, *flags]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    with open(out, encoding="utf-8") as f:
        return json.load(f)["tokens"]


def test_the_program_finds_its_tokenizer_and_end_tokens(programs, expected):
    program = programs["a"]
    assert program.end_token_ids == expected["end_token_ids"]
    tokenizer = program.tokenizer
    assert tokenizer is not None and tokenizer.vocab_size == 384
    assert tokenizer.encode(expected["prompt"]) == expected["prompt_ids"]
    for text, ids in zip(expected["corpus"], expected["corpus_ids"]):
        assert tokenizer.encode(text) == ids, text
        assert tokenizer.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("name", NAMES)
def test_greedy_text_equals_transformers_and_stops_at_the_end_token(programs, expected, name):
    want = expected["generated"][name]
    out = programs[name].method("forward_cached").generate_text(expected["prompt"], expected["new_tokens"])
    assert out.tokens == want["tokens"]
    assert out.text == want["text"]
    assert out.prompt_tokens == len(expected["prompt_ids"])
    if name == "foundation":
        # generation_config.json's second end token ends the bare model's run early, as in transformers.
        assert len(out.tokens) < expected["new_tokens"] and out.tokens[-1] in expected["end_token_ids"]
        assert out.stop_reason == "end_token"


def test_top_k_one_is_greedy(programs, expected):
    method = programs["a"].method("forward_cached")
    out = method.generate_text(expected["prompt"], expected["new_tokens"], temperature=1.5, top_k=1, seed=9)
    assert out.tokens == expected["generated"]["a"]["tokens"]


def test_seeded_sampling_repeats_and_equals_tools_generate(programs, expected, tmp_path):
    method = programs["b"].method("forward_cached")
    first = method.generate(expected["prompt_ids"], 20, **SAMPLING).tokens
    assert method.generate(expected["prompt_ids"], 20, **SAMPLING).tokens == first
    assert first != expected["generated"]["b"]["tokens"][: len(first)]
    other = method.generate(expected["prompt_ids"], 20, **{**SAMPLING, "seed": 1235}).tokens
    assert other != first
    flags = ["--max-new-tokens", "20", "--temperature", "0.9", "--top-k", "40", "--top-p", "0.9",
             "--repetition-penalty", "1.2", "--seed", "1234"]
    assert _tool_tokens("b.pte", expected["prompt_ids"], tmp_path, *flags) == first


@pytest.mark.parametrize("name", NAMES)
def test_tools_generate_prompt_text_equals_transformers_and_python(programs, expected, name, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = str(tmp_path / "out.json")
    args = [os.path.join(root, "tools", "generate"), "--program", _path(f"{name}.pte"), "--data",
            _path("foundation.ptd"), "--prompt", expected["prompt"], "--max-new-tokens", str(expected["new_tokens"]),
            "--json", out]
    proc = subprocess.run(args, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    want = expected["generated"][name]
    with open(out, encoding="utf-8") as f:
        got = json.load(f)
    assert got["tokens"] == want["tokens"] and got["text"] == want["text"]
    # Streamed to stdout under the program's name, then the timings.
    printed = proc.stdout.decode("utf-8")
    assert printed.startswith(f"{name}:\n{want['text']}\n  prefill "), printed
    python = programs[name].method("forward_cached").generate_text(expected["prompt"], expected["new_tokens"])
    assert python.text == got["text"]


def test_the_python_cli_samples_and_prints_text_as_the_cpp_tool(expected, tmp_path, capsys):
    from edgeshare.extension.python import generate_cli

    flags = ["--max-new-tokens", "12", "--temperature", "0.9", "--top-k", "40", "--seed", "7"]
    out = str(tmp_path / "py.json")
    argv = ["--program", _path("a.pte"), "--data", _path("foundation.ptd"), "--prompt", expected["prompt"]]
    assert generate_cli.main(argv + flags + ["--json", out]) == 0
    with open(out, encoding="utf-8") as f:
        got = json.load(f)
    printed = capsys.readouterr().out
    assert printed.startswith(f"a:\n{got['text']}\n  prefill "), printed
    assert _tool_tokens("a.pte", expected["prompt_ids"], tmp_path, *flags) == got["tokens"]


def test_the_python_cli_chats_with_the_models_template(programs, expected, tmp_path, capsys):
    from edgeshare.extension.python import generate_cli

    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(expected["chat"]["messages"]), encoding="utf-8")
    out = str(tmp_path / "chat.json")
    argv = ["--program", _path("b.pte"), "--data", _path("foundation.ptd"), "--chat", str(messages), "--json", out,
            "--max-new-tokens", "8"]
    assert generate_cli.main(argv) == 0
    with open(out, encoding="utf-8") as f:
        got = json.load(f)
    want = programs["b"].method("forward_cached").generate(expected["chat"]["ids"], 8)
    assert got["tokens"] == want.tokens
    messages.write_text('{"role": "user"}', encoding="utf-8")
    assert generate_cli.main(argv) == 1
    assert "must hold a list of" in capsys.readouterr().err


def test_tools_generate_stops_at_generation_config_end_tokens(expected, tmp_path):
    tokens = _tool_tokens("foundation.pte", expected["prompt_ids"], tmp_path, "--max-new-tokens", "24")
    assert tokens == expected["generated"]["foundation"]["tokens"]


def test_a_tokenizer_the_tool_cannot_read_leaves_ids_working_and_refuses_text(expected, tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    for name in ("a.pte", "foundation.ptd", "generation_config.json"):
        os.symlink(os.path.abspath(_path(name)), folder / name)
    unreadable = {"model": {"type": "WordPiece", "vocab": {"a": 0}}}
    (folder / "tokenizer.json").write_text(json.dumps(unreadable), encoding="utf-8")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prompt = str(tmp_path / "prompt.npy")
    np.save(prompt, np.asarray(expected["prompt_ids"], dtype=np.int64))
    out = str(tmp_path / "out.json")
    tool = [os.path.join(root, "tools", "generate"), "--program", str(folder / "a.pte"), "--data",
            str(folder / "foundation.ptd"), "--max-new-tokens", str(expected["new_tokens"])]
    proc = subprocess.run([*tool, "--prompt-ids", prompt, "--json", out], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "model 'WordPiece' is not supported" in proc.stderr and "text is unavailable" in proc.stderr
    with open(out, encoding="utf-8") as f:
        got = json.load(f)
    assert got["tokens"] == expected["generated"]["a"]["tokens"] and "text" not in got
    refused = subprocess.run([*tool, "--prompt", "Hello"], capture_output=True, text=True, check=False)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "model 'WordPiece' is not supported" in refused.stderr


def test_streamed_pieces_concatenate_to_the_decoded_text(programs, expected):
    method = programs["a"].method("forward_cached")
    pieces = list(method.stream_text(expected["prompt"], 20, **SAMPLING))
    out = method.generate_text(expected["prompt"], 20, **SAMPLING)
    assert "".join(pieces) == out.text == programs["a"].tokenizer.decode(out.tokens)
    assert list(method.stream(expected["prompt_ids"], 20, **SAMPLING)) == out.tokens


def test_the_decoder_never_splits_a_character(programs, expected):
    tokenizer = programs["a"].tokenizer
    for text, ids in zip(expected["corpus"], expected["corpus_ids"]):
        decoder = TextDecoder(tokenizer, skip_special_tokens=False)
        pieces = [decoder.add(i) for i in ids] + [decoder.finish()]
        assert "".join(pieces) == text
        assert not any("\ufffd" in p for p in pieces), pieces  # the corpus is valid UTF-8


def test_stop_strings_cut_the_text_before_them(programs, expected):
    method = programs["a"].method("forward_cached")
    full = expected["generated"]["a"]["text"]
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    out = method.generate_text(expected["prompt"], expected["new_tokens"], stop=[stop])
    assert out.text == full[: full.index(stop)] and out.stop_reason == "stop_string"
    pieces = list(method.stream_text(expected["prompt"], expected["new_tokens"], stop=[stop]))
    assert "".join(pieces) == out.text


def test_the_chat_prompt_equals_transformers_apply_chat_template(programs, expected):
    tokenizer = programs["a"].tokenizer
    chat = expected["chat"]
    assert tokenizer.apply_chat_template(chat["messages"]) == chat["text"]
    ids = tokenizer.apply_chat_template(chat["messages"], tokenize=True)
    assert ids == chat["ids"]
    reply = programs["b"].method("forward_cached").generate_text(ids, 8)
    assert len(reply.tokens) == 8 and reply.prompt_tokens == len(ids)


def test_another_use_of_the_method_ends_a_stream(programs, expected):
    method = programs["a"].method("forward_cached")
    stream = method.stream(expected["prompt_ids"], 10)
    next(stream)
    method.generate(expected["prompt_ids"], 2)
    with pytest.raises(EdgeshareError, match="interrupted") as e:
        next(stream)
    assert e.value.code == "InvalidState"


def test_bad_options_are_one_line_errors(programs, expected):
    method = programs["a"].method("forward_cached")
    with pytest.raises(EdgeshareError, match="top_p 1.5 is outside"):
        method.generate(expected["prompt_ids"], 4, top_p=1.5)
    with pytest.raises(EdgeshareError, match="temperature -1 is not"):
        method.generate(expected["prompt_ids"], 4, temperature=-1.0)
    with pytest.raises(TypeError, match="temperature must be a number"):
        method.generate(expected["prompt_ids"], 4, temperature="hot")
    with pytest.raises(TypeError, match="seed must be an int"):
        method.generate(expected["prompt_ids"], 4, seed=1.5)


def test_a_folder_without_a_tokenizer_takes_ids(tmp_path):
    assert Tokenizer.from_folder(str(tmp_path)) is None
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerFileError, match="tokenizer.json is not a tokenizers file"):
        Tokenizer.from_folder(str(tmp_path))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
