"""tools/defs.bzl's edgeshare_foundation and edgeshare_adapter against one export_lora process.

The rules exported the tiny Llama's foundation in one action and adapters a and b in one action
each (tools/BUILD.bazel); here export_lora exports the same model with both adapters in one
process, with the options the rules default to, and every file must be equal byte for byte.
"""

import os

import pytest
from edgeshare.tools import export_lora


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _dir(env):
    """The one folder of the files a $(rootpaths) variable lists."""
    folders = {os.path.dirname(os.path.abspath(path)) for path in os.environ[env].split()}
    assert len(folders) == 1, folders
    return folders.pop()


def test_the_rules_write_the_files_of_one_export_lora_process(tmp_path):
    out = tmp_path / "whole"
    argv = ["--hf-model", _dir("MODEL_FILES"), "--out", str(out), "--max-seq-len", "16"]
    argv += ["--adapter", f"a={_dir('ADAPTER_A_FILES')}", "--adapter", f"b={_dir('ADAPTER_B_FILES')}"]
    assert export_lora.main(argv) == 0
    foundation = _dir("RULE_FOUNDATION_FILES")
    rule_files = {
        "a.pte": os.environ["RULE_A_PTE"],
        "b.pte": os.environ["RULE_B_PTE"],
        "foundation.ptd": os.path.join(foundation, "foundation.ptd"),
        "foundation.pte": os.path.join(foundation, "foundation.pte"),
        "generation_config.json": os.path.join(foundation, "generation_config.json"),
    }
    assert sorted(os.listdir(out)) == sorted(rule_files)
    for name, path in rule_files.items():
        assert _read(path) == _read(out / name), f"{path} differs from export_lora's {name}"


def test_each_adapter_program_sits_in_a_folder_of_its_own():
    assert os.path.basename(os.environ["RULE_A_PTE"]) == "a.pte"
    assert os.path.dirname(os.environ["RULE_A_PTE"]) != os.path.dirname(os.environ["RULE_B_PTE"])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
