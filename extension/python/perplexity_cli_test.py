"""edgeshare-perplexity and //tools:perplexity over the text fixture (//testing:text_files, tokenizer
beside the programs): the same JSON from both for the same flags, the human-readable line per program,
and every bad input as one line on stderr with exit status 2 (a wrong flag) or 1 (a file or program
that cannot be used), no traceback and no --json file written.
"""

import json
import os
import subprocess
import sys
from typing import List

import pytest
from edgeshare.extension.python import perplexity_cli

FILES = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])
GENERATION = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "perplexity")


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> str:
    from edgeshare.models import tiny_tokenizer  # noqa: PLC0415

    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text("\n\n".join(tiny_tokenizer.CORPUS + tiny_tokenizer.HELD_OUT), encoding="utf-8")
    return str(path)


def _flags(text: str, *more: str) -> List[str]:
    return ["--program", os.path.join(FILES, "a.pte"), "--program", os.path.join(FILES, "b.pte"),
            "--data", os.path.join(FILES, "foundation.ptd"), "--text", text, *more]


def test_tool_and_console_script_print_the_same_json(text, capsys):
    flags = _flags(text, "--ctx", "48", "--stride", "32", "--max-tokens", "200",
                   "--kl-divergence", os.path.join(FILES, "foundation.pte"), "--json", "-")
    assert perplexity_cli.main(flags) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    report = json.loads(captured.out)
    tool = subprocess.run([TOOL, *flags], capture_output=True, text=True, check=False, timeout=300)
    assert tool.returncode == 0, tool.stderr
    assert json.loads(tool.stdout) == report
    assert report["text_tokens"] == 200 and report["method"] == "forward"
    assert [r["program"] for r in report["results"]] == [os.path.join(FILES, f"{n}.pte") for n in "ab"]
    for result in report["results"]:
        assert result["ctx"] == 48 and result["stride"] == 32 and result["tokens_scored"] == 199
        assert result["kl_divergence"] > 0 and 0 < result["top1_agreement"] <= 1
    # Both adapters are scored against the same reference over the same tokens.
    assert report["results"][0]["reference_perplexity"] == report["results"][1]["reference_perplexity"]


def test_a_line_per_program_and_the_json_file(text, tmp_path, capsys):
    out = tmp_path / "ppl.json"
    assert perplexity_cli.main(_flags(text, "--ctx", "64", "--max-tokens", "150", "--json", str(out))) == 0
    lines = capsys.readouterr().out.splitlines()
    report = json.loads(out.read_text(encoding="utf-8"))
    assert len(lines) == 2
    for line, result in zip(lines, report["results"]):
        assert line.startswith(f"{result['program']}: PPL = {result['perplexity']:.4f} +/- ")
        assert f"over {result['tokens_scored']} tokens ({result['windows']} windows of 64, stride 64)" in line
    assert report["reference"] is None and "kl_divergence" in report["results"][0]


def test_ctx_defaults_to_the_export_length(text, capsys):
    assert perplexity_cli.main(_flags(text, "--max-tokens", "170", "--json", "-", "--no-progress")) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["ctx"] == 160 and result["stride"] == 160 and result["windows"] == 2


def _bad_inputs(text: str, tmp: str) -> List[tuple]:
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    latin1 = os.path.join(tmp, "latin1.txt")
    with open(latin1, "wb") as f:
        f.write("Grüße".encode("latin-1"))
    other = ["--kl-divergence", os.path.join(GENERATION, "foundation.pte"),
             "--kl-data", os.path.join(GENERATION, "foundation.ptd")]
    return [
        (_flags(os.path.join(tmp, "missing.txt")), 1, "missing.txt"),
        (_flags(tmp), 1, "Is a directory"),
        (_flags(latin1), 1, "is not UTF-8 text"),
        (_flags(empty), 1, "perplexity needs at least 2"),
        (_flags(text, "--ctx", "1"), 2, "--ctx: 1 is less than 2"),
        (_flags(text, "--ctx", "161"), 1, "ctx 161 is more than the 160 tokens method 'forward'"),
        (_flags(text, "--ctx", "4.5"), 2, "'4.5' is not an integer"),
        (_flags(text, "--stride", "0"), 2, "--stride: 0 is less than 1"),
        (_flags(text, "--ctx", "32", "--stride", "33"), 2, "--stride 33 is more than --ctx 32"),
        (_flags(text, "--stride", "161"), 1, "stride is 161; it must be in 1..ctx (160)"),
        (_flags(text, "--method", "nonesuch"), 1, "nonesuch"),
        (_flags(text, *other), 1, "vocabulary of 256 tokens"),
        (_flags(text, "--kl-data", os.path.join(FILES, "foundation.ptd")), 2, "--kl-data goes with --kl-divergence"),
        (_flags(text, "--frobnicate"), 2, "unrecognized arguments: --frobnicate"),
        (_flags(text, "--max-tokens", "1"), 2, "--max-tokens: 1 is less than 2"),
        (_flags(text, "--threads", "0"), 2, "--threads: 0 is less than 1"),
        (_flags(text, "--threads", "257"), 2, "--threads: 257 is more than 256"),
        (_flags(text, "--tokenizer", tmp), 1, "no tokenizer.json or tokenizer.model in --tokenizer"),
        (_flags(text, "--data", os.path.join(tmp, "nothing.ptd")), 1, "nothing.ptd"),
    ]


def test_bad_input_is_one_line_and_writes_nothing(text, tmp_path, capsys):
    out = tmp_path / "never.json"
    for flags, status, said in _bad_inputs(text, str(tmp_path)):
        assert perplexity_cli.main([*flags, "--json", str(out)]) == status, flags
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("edgeshare-perplexity: error: "), captured.err
        assert said in lines[0], (said, lines[0])
        assert "Traceback" not in captured.err and captured.out == ""
        assert not out.exists()
    missing = str(tmp_path / "no" / "such" / "folder" / "out.json")
    assert perplexity_cli.main(_flags(text, "--json", missing)) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "does not exist" in err[0]


def test_the_tool_ends_bad_input_in_one_line_too(text):
    tool = subprocess.run([TOOL, *_flags(text, "--ctx", "1")], capture_output=True, text=True, check=False,
                          timeout=120)
    assert tool.returncode == 2 and len(tool.stderr.splitlines()) == 1 and "Traceback" not in tool.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
