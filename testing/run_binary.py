"""Runs the C++ runtime (//tools:run) on exported files, for tests and tools written in Python."""

import dataclasses
import json
import os
import subprocess
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

__all__ = ["RunError", "RunResult", "run_binary_path", "run_programs"]


class RunError(RuntimeError):
    """The runtime exited with an error; `message` is its one-line explanation."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.message = message
        self.returncode = returncode


@dataclasses.dataclass
class RunResult:
    """What one run of //tools:run produced.

    Attributes:
      outputs: "<program>.<method>" -> its outputs, in order.
      stats: the weights-cache statistics (named_data_fetches, bytes_fetched, packs, cache_hits,
        packed_entries, sharing, data_files_open).
      stdout: what the tool printed.
    """

    outputs: Dict[str, List[np.ndarray]]
    stats: Dict[str, object]
    stdout: str


def run_binary_path() -> str:
    """The path of //tools:run in the runfiles tree (this module is testing/run_binary.py in it)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tools", "run")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //testing:run_binary")
    return path


def run_programs(
    programs: Sequence[str],
    data_files: Sequence[str] = (),
    inputs: Sequence[np.ndarray] = (),
    share: bool = True,
    extra_args: Sequence[str] = (),
    work_dir: Optional[str] = None,
) -> RunResult:
    """Loads every program in one process with the data files, runs each method once.

    Args:
      programs: .pte paths.
      data_files: .ptd paths.
      inputs: inputs given to every method (else the tool's seeded inputs).
      share: the XNNPACK weights cache's sharing switch.
      extra_args: more flags for the tool.
      work_dir: where to put inputs, outputs and stats (a temporary folder if None).

    Returns:
      The outputs and statistics.

    Raises:
      RunError: the tool exited non-zero (its stderr is the message).
    """
    work = work_dir or tempfile.mkdtemp(prefix="edgeshare_run_")
    args = [run_binary_path()]
    for p in programs:
        args += ["--program", p]
    for d in data_files:
        args += ["--data", d]
    if inputs:
        paths = []
        for i, array in enumerate(inputs):
            path = os.path.join(work, f"input{i}.npy")
            # Not np.ascontiguousarray: it turns a rank-0 array into shape (1,).
            np.save(path, np.require(array, requirements="C"))
            paths.append(path)
        args += ["--inputs", ",".join(paths)]
    out_dir = os.path.join(work, "outputs")
    stats_path = os.path.join(work, "stats.json")
    args += ["--outputs", out_dir, "--stats-json", stats_path]
    if not share:
        args.append("--no-share")
    args += list(extra_args)
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RunError(proc.stderr.strip(), proc.returncode)
    outputs: Dict[str, List[np.ndarray]] = {}
    for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []:
        stem, _, rest = name.rpartition(".output")
        index = int(rest[: -len(".npy")])
        outputs.setdefault(stem, [])
        while len(outputs[stem]) <= index:
            outputs[stem].append(None)  # type: ignore[arg-type]
        outputs[stem][index] = np.load(os.path.join(out_dir, name))
    with open(stats_path) as f:
        stats = json.load(f)
    return RunResult(outputs=outputs, stats=stats, stdout=proc.stdout)
