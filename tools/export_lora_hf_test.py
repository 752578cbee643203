"""export_lora --hf-model / --adapter: the flags, and one line on stderr plus exit 1 for every bad
input (checked before anything is exported, so this test needs no emitter)."""

import json
import os
import shutil

import peft
import pytest
import transformers
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return hf_tiny.save_tiny_lora("llama", str(tmp_path_factory.mktemp("llama")))


def _fails(argv, capsys, *fragments):
    assert export_lora.main(argv) == 1
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    # Progress lines of the stages that ran, then the error as one line.
    assert lines and lines[-1].startswith("export_lora: error: "), captured.err
    assert all(line.startswith("export_lora: ") and "error" not in line for line in lines[:-1]), captured.err
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]
    assert "Traceback" not in captured.out + captured.err
    return lines[-1]


def test_parse_adapters_resolves_relative_directories_against_the_users(tmp_path, monkeypatch):
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    assert export_lora.parse_adapters(["a=x/a", "b=/abs/b"]) == {"a": str(tmp_path / "x" / "a"), "b": "/abs/b"}


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--adapter", "a=x"], "--adapter needs --hf-model"),
        (["--hf-model", "m", "--swappable"], "--swappable needs at least one --adapter"),
        (["--hf-model", "m", "--adapter", "a=x", "--methods"], "--methods cannot be combined with --hf-model"),
        (["--hf-model", "m", "--adapter", "a=x", "--model", "f.py:g"], "--model cannot be combined"),
        (["--hf-model", "m", "--adapter", "a=x", "--foundation-by", "names"], "--foundation-by names cannot"),
        (["--hf-model", "m", "--adapter", "noequals"], "--adapter 'noequals' must be NAME=DIR"),
        (["--hf-model", "m", "--adapter", "a=x", "--adapter", "a=y"], "adapter name 'a' is given twice"),
        (["--hf-model", "m", "--adapter", "a=x", "--batch-slots", "2", "--swappable"], "cannot be combined with --swappable"),
        (["--hf-model", "m", "--batch-slots", "2"], "--batch-slots needs at least one --adapter"),
        (["--hf-model", "m", "--adapter", "a=x", "--batch-rank", "4"], "--batch-rank applies to --batch-slots"),
        (["--hf-model", "m", "--adapter", "a=x", "--batch-slots", "0"], "--batch-slots must be at least 1"),
        (["--batch-slots", "2"], "--batch-slots applies to --hf-model exports"),
        (["--hf-model", "m", "--adapter", "a=x", "--batch-slots", "2", "--foundation-index", "i"],
         "--foundation-index cannot be combined with --batch-slots"),
    ],
)
def test_flag_misuse_is_one_line(tmp_path, capsys, argv, fragment):
    _fails(argv + ["--out", str(tmp_path)], capsys, fragment)


@pytest.mark.parametrize("config, want", [({"max_position_embeddings": 256}, 256), ({"max_position_embeddings": 32768}, 2048), ({}, 2048)])
def test_max_seq_len_defaults_to_the_models_positions_within_the_stated_budget(tmp_path, config, want):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert export_lora.default_max_seq_len(str(tmp_path)) == want
    assert export_lora.default_max_seq_len(str(tmp_path / "missing")) == export_lora.DEFAULT_MAX_SEQ_LEN


def test_max_seq_len_help_says_its_default():
    help_text = " ".join(export_lora._parser().format_help().split())
    assert f"max_position_embeddings, at most {export_lora.DEFAULT_MAX_SEQ_LEN}" in help_text


def test_missing_model_directory_is_one_line_naming_it(llama, tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    argv = ["--hf-model", missing, "--adapter", f"a={llama.adapter_dirs['a']}", "--out", str(tmp_path / "out")]
    _fails(argv, capsys, f"model directory '{missing}' does not exist")
    assert not os.path.exists(tmp_path / "out")


def test_corrupt_config_json_is_one_line_naming_the_file(llama, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    shutil.copytree(llama.model_dir, model_dir)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        f.write("{ truncated")
    argv = ["--hf-model", model_dir, "--adapter", f"a={llama.adapter_dirs['a']}", "--out", str(tmp_path / "out")]
    _fails(argv, capsys, os.path.join(model_dir, "config.json"), "not valid JSON")


def test_malformed_generation_config_is_one_line_before_anything_is_written(llama, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    shutil.copytree(llama.model_dir, model_dir)
    with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
        f.write('{"eos_token_id": "</s>"}')
    argv = ["--hf-model", model_dir, "--adapter", f"a={llama.adapter_dirs['a']}", "--out", str(tmp_path / "out")]
    _fails(argv, capsys, os.path.join(model_dir, "generation_config.json"), "eos_token_id must be a token id")
    assert not os.path.exists(tmp_path / "out")


def test_non_lora_adapter_is_one_line_naming_adapter_and_type(llama, tmp_path, capsys):
    path = str(tmp_path / "prefix")
    config = peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=2)
    peft.get_peft_model(hf_tiny.make_tiny_model("llama"), config).save_pretrained(path)
    argv = ["--hf-model", llama.model_dir, "--adapter", f"p={path}", "--out", str(tmp_path / "out")]
    _fails(argv, capsys, "adapter 'p'", "PEFT PREFIX_TUNING adapter", "only LoRA")


def test_adapter_of_another_hidden_size_is_one_line(llama, tmp_path, capsys):
    config = hf_tiny.tiny_config("llama")
    config.hidden_size = 48
    path = str(tmp_path / "wide")
    other = transformers.AutoModelForCausalLM.from_config(config)
    hf_tiny.save_peft_adapter(other, path, ["v_proj"], 2, 4.0, seed=3)
    argv = ["--hf-model", llama.model_dir, "--adapter", f"wide={path}", "--out", str(tmp_path / "out")]
    _fails(argv, capsys, "adapter 'wide'", "does not fit the model: size mismatch")


def test_weights_the_config_does_not_use_are_one_line_naming_them(llama, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    shutil.copytree(llama.model_dir, model_dir)
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    config["num_hidden_layers"] = 1  # the safetensors file holds two layers
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    out = tmp_path / "out"
    argv = ["--hf-model", model_dir, "--adapter", f"a={llama.adapter_dirs['a']}", "--out", str(out)]
    _fails(argv, capsys, "unexpected keys: model.layers.1.")
    assert not os.path.exists(out)


def test_out_naming_a_file_is_one_line_before_anything_loads(llama, tmp_path, capsys):
    out = tmp_path / "file"
    out.write_bytes(b"mine")
    argv = ["--hf-model", llama.model_dir, "--adapter", f"a={llama.adapter_dirs['a']}", "--out", str(out)]
    assert export_lora.main(argv) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [f"export_lora: error: --out '{out}' is a file, not a directory"], err
    assert out.read_bytes() == b"mine"


def test_adapter_name_that_is_not_a_file_stem_is_one_line(llama, tmp_path, capsys):
    argv = ["--hf-model", llama.model_dir, "--adapter", f"../a={llama.adapter_dirs['a']}", "--out", str(tmp_path)]
    _fails(argv, capsys, "adapter name '../a' must be a file stem")


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
