"""export_lora --foundation-index and --over-foundation: one adapter's program per process.

A tiny Llama (seeded, from a config) with PEFT adapters a and b: the foundation exported alone with
--foundation-index, then each adapter alone with --over-foundation, gives byte for byte the files
of one export of the model with both adapters. An index of another export (other options, another
model) or a broken one is refused in one line, and nothing is written.
"""

import json
import os

import pytest
from edgeshare.exir.foundation_index import read_foundation_index
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora

MAX_SEQ_LEN = "16"


def _read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("over")
    files = hf_tiny.save_tiny_lora("llama", str(root / "in"))
    whole = str(root / "whole")
    argv = ["--hf-model", files.model_dir, "--out", whole, "--max-seq-len", MAX_SEQ_LEN]
    adapters = [f"--adapter={name}={files.adapter_dirs[name]}" for name in ("a", "b")]
    assert export_lora.main(argv + adapters) == 0
    foundation, index = str(root / "foundation"), str(root / "foundation.index.json")
    assert export_lora.main(argv[:3] + [foundation, *argv[4:], "--foundation-index", index]) == 0
    return files, whole, foundation, index, root


def _over(files, adapter, out, index, *extra):
    return export_lora.main(
        ["--hf-model", files.model_dir, "--adapter", f"{adapter}={files.adapter_dirs[adapter]}", "--out", out,
         "--max-seq-len", MAX_SEQ_LEN, "--over-foundation", index, *extra]
    )


def test_foundation_then_each_adapter_alone_equal_one_whole_export(tiny, capsys):
    files, whole, foundation, index, root = tiny
    assert sorted(os.listdir(foundation)) == ["foundation.ptd", "foundation.pte", "generation_config.json"]
    for name in sorted(os.listdir(foundation)):
        assert _read(os.path.join(foundation, name)) == _read(os.path.join(whole, name)), name
    for adapter in ("a", "b"):
        out = str(root / f"only_{adapter}")
        capsys.readouterr()
        assert _over(files, adapter, out, index) == 0
        assert f"adapter '{adapter}'" in capsys.readouterr().out
        # Only the program: the foundation and the tokenizer files are the foundation export's.
        assert os.listdir(out) == [f"{adapter}.pte"]
        assert _read(os.path.join(out, f"{adapter}.pte")) == _read(os.path.join(whole, f"{adapter}.pte"))


def test_the_index_is_small_and_names_the_foundation_file_it_describes(tiny, tmp_path):
    files, whole, foundation, index, root = tiny
    parsed = read_foundation_index(index)
    assert len(parsed.digests) > 0 and len(parsed.identity) == 32
    assert os.path.getsize(index) < os.path.getsize(os.path.join(foundation, "foundation.ptd")) / 50
    # The same export writes the same index, byte for byte.
    again = str(tmp_path / "again.json")
    argv = ["--hf-model", files.model_dir, "--out", str(tmp_path / "f"), "--max-seq-len", MAX_SEQ_LEN]
    assert export_lora.main(argv + ["--foundation-index", again]) == 0
    assert _read(again) == _read(index)


def test_an_adapter_over_a_foundation_of_other_options_is_refused_in_one_line(tiny, tmp_path, capsys):
    files, whole, foundation, index, root = tiny
    out = tmp_path / "int8"
    assert _over(files, "a", str(out), index, "--quantize", "int8") == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("export_lora: error: program 'a' puts") and "given foundation" in err, err
    assert not out.exists() or os.listdir(out) == []
    assert [n for n in os.listdir(tmp_path) if n.startswith(".int8")] == []


@pytest.mark.parametrize(
    "body, message",
    [
        ("not json", "is not JSON"),
        ('{"format": "other"}', "is not an edgeshare-foundation-index-1 file"),
        ('{"format": "edgeshare-foundation-index-1", "identity": "00", "entries": {"k": "zz"}}', "entry 'k'"),
        (None, "its identity is not the one its entries' digests make"),
    ],
)
def test_a_broken_index_is_refused_before_the_model_loads(tiny, tmp_path, capsys, body, message):
    files, whole, foundation, index, root = tiny
    if body is None:  # a digest edited by hand
        parsed = json.loads(_read(index))
        key = sorted(parsed["entries"])[0]
        parsed["entries"][key] = "0" * 64
        body = json.dumps(parsed)
    bad = tmp_path / "bad.json"
    bad.write_text(body)
    assert _over(files, "a", str(tmp_path / "o"), str(bad)) == 1
    captured = capsys.readouterr()
    assert "loading model" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(bad) in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--over-foundation", "x.json"], "--over-foundation needs at least one --adapter"),
        (["--foundation-index", "x.json", "--over-foundation", "y.json", "--adapter", "a=d"], "cannot be combined"),
        (["--foundation-index", "x.json", "--swappable", "--adapter", "a=d"], "--foundation-index cannot be combined"),
    ],
)
def test_flag_combinations_are_refused_in_one_line(tiny, tmp_path, capsys, extra, message):
    files = tiny[0]
    argv = ["--hf-model", files.model_dir, "--out", str(tmp_path / "o"), *extra]
    assert export_lora.main(argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_the_flags_need_hf_model(tmp_path, capsys):
    assert export_lora.main(["--out", str(tmp_path / "o"), "--foundation-index", "x.json"]) == 1
    assert "--foundation-index needs --hf-model" in capsys.readouterr().err


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
