"""inspect on the demo files: it shows what each file holds and which keys a program needs."""

import os

import pytest
from edgeshare.tools.inspect_tool import DataSummary, ProgramSummary, inspect_file

PTE = os.environ["LORA_A_PTE"]
PTD = os.environ["FOUNDATION_PTD"]


def test_program_summary_names_its_delegate_and_the_foundation_keys_it_needs():
    summary = inspect_file(PTE)
    assert isinstance(summary, ProgramSummary)
    (forward,) = summary.methods
    assert forward.name == "forward"
    assert forward.delegate_calls == {"XnnpackBackend": 1}
    assert forward.delegated_ops["FULLY_CONNECTED"] == 9
    assert forward.inputs == ["float[4, 256]"]
    # The program needs the foundation from a data file and keeps only its adapter.
    assert forward.external_keys == sorted(inspect_file(PTD).entries)
    assert all("lora" in key for key in summary.named_data)


def test_data_summary_lists_layouts_and_digests():
    summary = inspect_file(PTD)
    assert isinstance(summary, DataSummary)
    assert summary.alignment >= 4096
    assert summary.entries["fc1.weight"]["layout"] == "float[512, 256]"
    assert summary.entries["fc1.weight"]["bytes"] == 512 * 256 * 4


def test_command_line_json_and_errors(tmp_path):
    from edgeshare.tools import inspect_tool as tool

    assert tool.main([PTE, PTD, "--json"]) == 0
    broken = tmp_path / "broken.pte"
    broken.write_bytes(open(PTE, "rb").read()[:100])
    assert tool.main([str(broken)]) == 1


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
