"""inspect on the demo files: it shows what each file holds and which keys a program needs, and it
does so without torch (the runtime-only wheel's edgeshare-inspect)."""

import os
import subprocess
import sys

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



# Runs inspect with torch, transformers and peft unimportable, as where they are not installed.
_WITHOUT_TORCH = """
import sys

class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "peft"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Missing())
from edgeshare.tools import inspect_tool
code = inspect_tool.main(sys.argv[1:])
assert "torch" not in sys.modules
sys.exit(code)
"""


def test_inspect_reads_files_without_torch(capsys):
    from edgeshare.tools import inspect_tool as tool

    assert tool.main([PTE, PTD, "--json"]) == 0
    want = capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, PTE, PTD, "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == want


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
