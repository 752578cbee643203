"""Runs //tools:generate over several programs of one export folder and returns its JSON report:
for the end-to-end tests that compare generated tokens with a torch reference."""

import json
import os
import subprocess
from typing import Any, Dict, Sequence


def generate_binary_path() -> str:
    """The path of //tools:generate in the runfiles tree (this module is testing/generate_binary.py)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tools", "generate")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //testing:generate_binary")
    return path


def generate_programs(
    out_dir: str, stems: Sequence[str], prompt_path: str, new_tokens: int, json_path: str
) -> Dict[str, Any]:
    """Greedy generation by every `<stem>.pte` of `out_dir` over its foundation.ptd, in one process.

    Args:
      out_dir: an export folder holding foundation.ptd and the programs.
      stems: the programs' file names without `.pte`.
      prompt_path: a .npy of int64 prompt token ids.
      new_tokens: tokens each program generates.
      json_path: where the tool writes its report.

    Returns:
      The report: {stem: {"tokens": [...], ...}}.

    Raises:
      RuntimeError: the tool exited non-zero (its stderr is the message).
    """
    args = ["--data", os.path.join(out_dir, "foundation.ptd"), "--prompt-ids", prompt_path]
    args += ["--max-new-tokens", str(new_tokens), "--json", json_path]
    for stem in stems:
        args += ["--program", os.path.join(out_dir, f"{stem}.pte")]
    proc = subprocess.run([generate_binary_path(), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    with open(json_path) as f:
        return json.load(f)
