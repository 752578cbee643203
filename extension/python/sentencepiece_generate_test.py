"""Text in, text out for a model whose tokenizer is a SentencePiece tokenizer.model
(//testing:sentencepiece_text_files: a tiny Llama with a tokenizer.model trained offline, no
tokenizer.json, exported with adapters a and b): greedy text from //tools:generate --prompt (C++
SentencePieceTokenizer) and from Python's generate_text equals transformers'
tokenizer.decode(generate(do_sample=False)) for both adapters and the bare foundation, from a prompt
transformers and the sentencepiece package encode differently, and stops at generation_config.json's
end token.
"""

import json
import os
import subprocess
from typing import Any, Dict

import pytest
from edgeshare.extension.python import DataFile, Program

FILES = os.path.dirname(os.environ["SENTENCEPIECE_TEXT_EXPECTED_JSON"])
NAMES = ("a", "b", "foundation")


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


def test_the_export_folder_has_a_sentencepiece_model_only():
    assert os.path.isfile(_path("tokenizer.model")) and not os.path.exists(_path("tokenizer.json"))


@pytest.mark.parametrize("name", NAMES)
def test_python_greedy_text_equals_transformers(programs, expected, name):
    want = expected["generated"][name]
    program = programs[name]
    assert program.tokenizer.encode(expected["prompt"]) == expected["prompt_ids"]
    out = program.method("forward_cached").generate_text(expected["prompt"], expected["new_tokens"])
    assert out.tokens == want["tokens"]
    assert out.text == want["text"]
    if name == "foundation":
        assert len(out.tokens) < expected["new_tokens"] and out.tokens[-1] in expected["end_token_ids"]
        assert out.stop_reason == "end_token"


@pytest.mark.parametrize("name", NAMES)
def test_tools_generate_prompt_text_equals_transformers(expected, tmp_path, name):
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
    # Streamed to stdout as it was generated: the same text.
    printed = proc.stdout.decode("utf-8")
    assert printed.startswith(f"{name}:\n{want['text']}\n  prefill "), printed
    # The C++ tokenizer's prompt is transformers' (its length here, its ids through the tokens).
    assert f" ms ({len(expected['prompt_ids'])} tokens)" in printed, printed


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
