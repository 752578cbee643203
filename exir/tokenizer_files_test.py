"""exir.tokenizer_files: a model directory's tokenizer files and generation_config.json are copied
into the export folder byte for byte, a model without them copies nothing, and a malformed file is
refused, naming it, before anything is written."""

import json
import os

import pytest
from edgeshare.exir.errors import ExportError
from edgeshare.exir.tokenizer_files import TOKENIZER_FILE_NAMES, read_tokenizer_files, write_tokenizer_files


def _model_dir(tmp_path, files):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for name, data in files.items():
        (model / name).write_bytes(data)
    return str(model)


def test_every_present_file_is_copied_byte_for_byte(tmp_path):
    files = {
        "tokenizer.json": json.dumps({"model": {"type": "BPE"}, "ü": "東京"}, ensure_ascii=False).encode(),
        "tokenizer_config.json": b'{"chat_template": "{{ messages }}", "eos_token": "</s>"}',
        "special_tokens_map.json": b'{"eos_token": "</s>"}',
        "tokenizer.model": b"\x0a\x05 sentencepiece bytes \xff",
        "chat_template.jinja": "{% for m in messages %}{{ m['content'] }}ü{% endfor %}".encode(),
        "chat_template.json": b'{"chat_template": "{{ messages }}"}',
        "generation_config.json": b'{"eos_token_id": [2, 7], "do_sample": true}',
    }
    read = read_tokenizer_files(_model_dir(tmp_path, files))
    assert set(read.contents) == set(TOKENIZER_FILE_NAMES)
    out = tmp_path / "out"
    written = write_tokenizer_files(read, str(out))
    assert sorted(os.path.basename(p) for p in written) == sorted(files)
    for name, data in files.items():
        assert (out / name).read_bytes() == data
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]


def test_named_chat_templates_are_copied_into_their_subfolder(tmp_path):
    model = _model_dir(tmp_path, {"tokenizer.json": b"{}", "chat_template.jinja": b"default"})
    os.makedirs(os.path.join(model, "additional_chat_templates"))
    for name in ("tool_use.jinja", "rag.jinja", "notes.txt"):
        with open(os.path.join(model, "additional_chat_templates", name), "w") as f:
            f.write(name)
    read = read_tokenizer_files(model)
    assert sorted(read.contents) == ["additional_chat_templates/rag.jinja", "additional_chat_templates/tool_use.jinja",
                                     "chat_template.jinja", "tokenizer.json"]
    out = tmp_path / "out"
    written = write_tokenizer_files(read, str(out))
    assert len(written) == 4
    assert (out / "additional_chat_templates" / "tool_use.jinja").read_text() == "tool_use.jinja"
    assert sorted(os.listdir(out / "additional_chat_templates")) == ["rag.jinja", "tool_use.jinja"]
    assert (out / "chat_template.jinja").read_text() == "default"


def test_a_model_without_a_tokenizer_copies_nothing(tmp_path):
    read = read_tokenizer_files(_model_dir(tmp_path, {}))
    assert read.contents == {}
    assert write_tokenizer_files(read, str(tmp_path / "out")) == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name, data, words",
    [
        ("tokenizer.json", b"{not json", "tokenizer.json is not valid JSON"),
        ("tokenizer_config.json", b"[1, 2]", "tokenizer_config.json is not a JSON object"),
        ("generation_config.json", b'{"eos_token_id": "</s>"}', "eos_token_id must be a token id"),
        ("generation_config.json", b'{"eos_token_id": [2, -1]}', "eos_token_id must be a token id"),
        ("chat_template.json", b'"{{ messages }}"', "chat_template.json is not a JSON object"),
        ("chat_template.jinja", b"\xff\xfe{{ x }}", "chat_template.jinja is not UTF-8 text"),
    ],
)
def test_a_malformed_file_is_refused_naming_it(tmp_path, name, data, words):
    with pytest.raises(ExportError, match=words) as e:
        read_tokenizer_files(_model_dir(tmp_path, {name: data}))
    assert name in str(e.value) and "\n" not in str(e.value)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
