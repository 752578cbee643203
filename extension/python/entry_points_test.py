"""The wheel's console scripts end quietly: `edgeshare-inspect --json | head -1` once head has gone
(status 1, nothing on stderr) and Ctrl-C (status 130), instead of a BrokenPipeError or
KeyboardInterrupt traceback; their normal run is unchanged."""

import json
import os
import subprocess
import sys

import pytest
from edgeshare.extension.python import entry_points

PTE = os.environ["LORA_A_PTE"]
SCRIPT = "import sys; from edgeshare.extension.python.entry_points import inspect_main; sys.exit(inspect_main())"


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_inspect_json_reads_as_before(capsys):
    assert entry_points.inspect_main([PTE, "--json"]) == 0
    assert PTE in json.loads(capsys.readouterr().out)


def test_inspect_into_a_closed_pipe_ends_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader (head -1) is gone before the JSON is written
    proc = subprocess.run([sys.executable, "-c", SCRIPT, PTE, "--json"], stdout=write, stderr=subprocess.PIPE,
                          env=_env(), check=False, timeout=300)
    os.close(write)
    assert proc.returncode == 1 and proc.stderr == b"", proc.stderr


def test_ctrl_c_in_a_script_ends_quietly(monkeypatch, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr("edgeshare.tools.inspect_tool.main", interrupted)
    assert entry_points.inspect_main([PTE]) == 130
    assert capsys.readouterr().err == "\n"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
