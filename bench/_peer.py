"""What every peer shares: its own virtualenv under the user's cache folder (made on first use,
never a build or test dependency), the programs it is handed (torch.export.save'd), and the
long-lived peer process spoken to in JSON lines.

Each peer module (bench/_peer_executorch.py, bench/_llm_peer_executorch.py,
bench/_llm_peer_llamacpp.py) names its VenvSpec and its script; the script runs in that venv and
imports nothing of edgeshare.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

import torch
from edgeshare.bench._runner import BenchError

__all__ = [
    "PeerProcess",
    "VenvSpec",
    "VenvStep",
    "cache_root",
    "peer_python",
    "peer_script",
    "pip_install",
    "save_program",
    "write_manifest",
]


def cache_root() -> str:
    """~/.cache/edgeshare-bench (or under $XDG_CACHE_HOME): where peer venvs live."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "edgeshare-bench")


@dataclasses.dataclass(frozen=True)
class VenvStep:
    """One step of making a peer venv: `python -m <args>` in the new venv.

    Attributes:
      args: after `python -m`; "{venv}" is replaced by the venv's folder.
      env: extra environment (e.g. CMAKE_ARGS for a source build).
      nice: run it at the lowest CPU priority (a long compile on a shared machine).
    """

    args: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()
    nice: bool = False


@dataclasses.dataclass(frozen=True)
class VenvSpec:
    """A peer's venv: its cache folder and the steps that fill it, in order.

    Attributes:
      folder: the venv's folder name under cache_root() (named for the peer's version).
      steps: what makes it, after `python3 -m venv`.
      note: said once before a long first use (e.g. "a source build of about 11 minutes").
    """

    folder: str
    steps: Tuple[VenvStep, ...]
    note: str = ""

    def describe(self) -> str:
        """The steps, one per line (written into the venv as its record)."""
        return "\n".join(" ".join(("nice",) * step.nice + step.args) for step in self.steps) + "\n"


def pip_install(*requirements: str) -> VenvStep:
    """A VenvStep installing pinned requirements from the machine's configured sources."""
    return VenvStep(("pip", "install", *requirements))


def _run_step(args: List[str], env: Optional[Dict[str, str]], what: str, log_file: IO[str]) -> None:
    proc = subprocess.run(args, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        raise BenchError(f"peer venv: {what} failed ({proc.returncode}); see {log_file.name}")


def peer_python(spec: VenvSpec, log: Callable[[str], None] = lambda message: None) -> str:
    """The peer venv's interpreter, making the venv on first use (then reused as it is).

    The venv is made under a temporary name and renamed when every step succeeded, so a failed
    or interrupted first use leaves nothing that looks usable.

    Args:
      spec: the peer's venv.
      log: progress messages.

    Returns:
      The venv's python.

    Raises:
      BenchError: making the venv or a step failed (its log is named).
    """
    venv = os.path.join(cache_root(), spec.folder)
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(os.path.join(venv, "installed")):
        return python
    partial = venv + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    log(f"[peer] creating {venv} (first use only) {spec.note}".rstrip())
    with open(os.path.join(cache_root(), f"{spec.folder}.log"), "w") as log_file:
        _run_step([sys.executable, "-m", "venv", partial], None, "python3 -m venv", log_file)
        for step in spec.steps:
            args = [a.replace("{venv}", partial) for a in step.args]
            env = dict(os.environ, **dict(step.env)) if step.env else None
            command = (["nice", "-n", "19"] if step.nice else []) + [os.path.join(partial, "bin", "python"), "-m"]
            log(f"[peer]   {' '.join(args)}")
            _run_step(command + args, env, " ".join(args), log_file)
    with open(os.path.join(partial, "installed"), "w") as f:
        f.write(spec.describe())
    shutil.rmtree(venv, ignore_errors=True)
    os.rename(partial, venv)  # A venv's interpreter finds its site-packages relative to itself.
    return python


def save_program(
    module: torch.nn.Module,
    inputs: Tuple[Any, ...],
    out_dir: str,
    name: str,
    strict: bool,
    dynamic_shapes: Optional[Any] = None,
) -> Dict[str, Any]:
    """torch.export.save's the module (and torch.save's its inputs) for a peer to lower.

    Returns:
      The manifest entry: {"pt2": FILE, "inputs": FILE}.
    """
    pt2 = os.path.join(out_dir, f"{name}.pt2")
    inputs_path = os.path.join(out_dir, f"{name}_inputs.pt")
    with torch.no_grad():
        program = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=strict)
        torch.export.save(program, pt2)
    torch.save(inputs, inputs_path)
    return {"pt2": pt2, "inputs": inputs_path}


def write_manifest(folder: str, manifest: Dict[str, Any]) -> str:
    """Writes folder/manifest.json (the peer script's one argument) -> its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "manifest.json")
    with open(path, "w") as f:
        json.dump(manifest, f)
    return path


def peer_script(name: str) -> str:
    """bench/<name>: a peer's script, run by the peer venv's python."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


class PeerProcess:
    """A running peer script: one JSON ready line, then a JSON reply line per request line (see
    bench/executorch_peer.py)."""

    def __init__(self, python: str, script: str, manifest: str, log_path: str) -> None:
        self._log = open(log_path, "w")
        self.log_path = log_path
        self._proc = subprocess.Popen(
            [python, script, manifest], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        try:
            self.ready = self._read("starting (export and load)")
        except BaseException:
            self.close()
            raise

    def _read(self, what: str) -> Dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait()
            raise BenchError(f"peer exited ({code}) while {what}: {self._tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise BenchError(f"peer failed while {what}: {reply['error']} (log: {self.log_path})")
        return reply

    def _tail(self) -> str:
        self._log.flush()
        with open(self.log_path) as f:
            return " | ".join(f.read().strip().splitlines()[-5:])

    def request(self, request: Dict[str, Any], what: str) -> Dict[str, Any]:
        """Sends one JSON request line -> the reply line.

        Raises:
          BenchError: the peer exited or replied {"error": ...} (naming `what`).
        """
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        return self._read(what)

    def time(self, program: str, threads: int, iterations: int, warmup: int) -> List[float]:
        """execute() samples in ms of `program` with `threads` threads (executorch_peer.py)."""
        request = {"program": program, "threads": threads, "iterations": iterations, "warmup": warmup}
        return self.request(request, f"timing {program} with {threads} thread(s)")["latency_ms"]

    def generate(self, program: str, threads: int, new_tokens: int, warmup: int, reload: bool) -> Dict[str, Any]:
        """Greedy decoding of `new_tokens` with the KV-cache `program` -> tokens, prefill_ms,
        decode_tokens_per_s (timed as generation::Generator times them; with `reload`, on a freshly
        loaded method: see executorch_peer.py)."""
        request = {"generate": program, "threads": threads, "new_tokens": new_tokens, "warmup": warmup, "reload": reload}
        return self.request(request, f"generating {new_tokens} tokens with {program}, {threads} thread(s)")

    def close(self) -> None:
        """Asks the peer to quit, waits for it, closes the log."""
        if self._proc.poll() is None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write('{"quit": true}\n')
                self._proc.stdin.close()
                self._proc.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._log.close()


