"""The benchmark's peer stage: ExecuTorch (PyPI) timed beside edgeshare on the same eager modules.

Opt-in (`bench/lora --peer executorch`). ExecuTorch is never a build or test dependency: the peer
runs in its own venv under the user's cache folder (created on first use with `python3 -m venv`
and `pip install torch==2.13.0 executorch==1.5.1`), as a long-lived process (bench/executorch_peer.py)
that lowers the same modules (saved here with torch.export.save, same weights) with ExecuTorch's
XNNPACK flow and program-data separation, then times Method.execute() on request. The bench
interleaves: edgeshare (a fresh lora_runner process), then the peer, for each configuration and
repeat, so that slow phases of a shared machine hit both alike.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from typing import IO, Any, Callable, Dict, List, Tuple

import torch
from edgeshare.bench._export import BenchError, Exported
from edgeshare.bench._measure import run_runner
from edgeshare.bench._models import BenchModel
from torch import nn

__all__ = ["PEERS", "PeerMeasured", "PeerProcess", "measure_peer", "peer_python", "save_peer_programs"]

# --peer name -> (cache folder name, pip requirements).
PEERS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "executorch": ("executorch-1.5.1", ("torch==2.13.0", "executorch==1.5.1")),
}
TINY = "tiny"  # A 4x4 Linear on one row: execute() of it estimates the Python binding's overhead.
# (tokens, threads) the peer is timed at, in this order within each repeat.
CONFIGS: Tuple[Tuple[int, int], ...] = ((1, 1), (32, 1), (1, 2), (32, 2))


def _cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "edgeshare-bench")


def _run_step(args: List[str], what: str, log_file: IO[str]) -> None:
    proc = subprocess.run(args, stdout=log_file, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise BenchError(f"peer venv: {what} failed ({proc.returncode}); see {log_file.name}")


def peer_python(peer: str, log: Callable[[str], None] = lambda message: None) -> str:
    """The peer venv's interpreter, creating the venv on first use (then reused).

    Raises:
      BenchError: the peer is unknown, or making the venv or installing into it failed.
    """
    if peer not in PEERS:
        raise BenchError(f"unknown peer '{peer}'; choose from {', '.join(PEERS)}")
    folder, requirements = PEERS[peer]
    venv = os.path.join(_cache_root(), folder)
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(os.path.join(venv, "installed")):
        return python
    partial = venv + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    log(f"[peer] creating {venv}: pip install {' '.join(requirements)} (first use only)")
    with open(os.path.join(_cache_root(), f"{folder}.log"), "w") as log_file:
        _run_step([sys.executable, "-m", "venv", partial], "python3 -m venv", log_file)
        _run_step(
            [os.path.join(partial, "bin", "python"), "-m", "pip", "install", *requirements],
            "pip install " + " ".join(requirements),
            log_file,
        )
    with open(os.path.join(partial, "installed"), "w") as f:
        f.write("\n".join(requirements) + "\n")
    shutil.rmtree(venv, ignore_errors=True)
    os.rename(partial, venv)  # A venv's interpreter finds its site-packages relative to itself.
    return python


def _save(module: nn.Module, x: torch.Tensor, out_dir: str, name: str, separate: bool) -> Dict[str, Any]:
    pt2 = os.path.join(out_dir, f"{name}.pt2")
    inputs = os.path.join(out_dir, f"{name}_inputs.pt")
    with torch.no_grad():
        torch.export.save(torch.export.export(module, (x,), strict=True), pt2)
    torch.save((x,), inputs)
    return {"pt2": pt2, "inputs": inputs, "separate": separate}


def save_peer_programs(model: BenchModel, exported: Exported, out_dir: str) -> Dict[str, Dict[str, Any]]:
    """Saves what the peer lowers: the first adapter's eager module (the one edgeshare times) at
    T=1 and T=32, and the tiny module -> the manifest's "programs"."""
    os.makedirs(out_dir, exist_ok=True)
    module = exported.result_b1.modules[next(iter(model.adapters))].eval()
    specs = {f"b{t}": _save(module, model.make_input(t), out_dir, f"b{t}", True) for t in (1, 32)}
    tiny = nn.Linear(4, 4).eval()
    specs[TINY] = _save(tiny, torch.ones(1, 4), out_dir, TINY, False)
    return specs


class PeerProcess:
    """A running bench/executorch_peer.py: JSON lines in, JSON lines out (see its docstring)."""

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

    def time(self, program: str, threads: int, iterations: int, warmup: int) -> List[float]:
        """execute() samples in ms of `program` with `threads` threads."""
        assert self._proc.stdin is not None
        request = {"program": program, "threads": threads, "iterations": iterations, "warmup": warmup}
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        return self._read(f"timing {program} with {threads} thread(s)")["latency_ms"]

    def generate(self, program: str, threads: int, new_tokens: int, warmup: int, reload: bool) -> Dict[str, Any]:
        """Greedy decoding of `new_tokens` with the KV-cache `program` -> tokens, prefill_ms,
        decode_tokens_per_s (timed as generation::Generator times them; with `reload`, on a freshly
        loaded method: see executorch_peer.py)."""
        assert self._proc.stdin is not None
        request = {
            "generate": program,
            "threads": threads,
            "new_tokens": new_tokens,
            "warmup": warmup,
            "reload": reload,
        }
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        return self._read(f"generating {new_tokens} tokens with {program}, {threads} thread(s)")

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


@dataclasses.dataclass
class PeerMeasured:
    """Interleaved samples, keyed (tokens, threads).

    Attributes:
      name: the peer's name and version.
      edgeshare_ms: lora_runner samples taken just before the peer's.
      peer_ms: the peer's execute() samples.
      tiny_ms: execute() of the tiny module (1 thread): the binding's overhead.
      ready: the peer's ready line (file sizes, export times).
      wall_s: seconds the whole peer stage took (venv, export, timings).
    """

    name: str
    edgeshare_ms: Dict[Tuple[int, int], List[float]]
    peer_ms: Dict[Tuple[int, int], List[float]]
    tiny_ms: List[float]
    ready: Dict[str, Any]
    wall_s: float


def _interleave(
    peer: PeerProcess, exported: Exported, repeats: int, iterations: Dict[int, int], warmup: int
) -> Tuple[Dict[Tuple[int, int], List[float]], Dict[Tuple[int, int], List[float]]]:
    programs = {1: exported.programs_b1[0], 32: exported.program_b32}
    ours: Dict[Tuple[int, int], List[float]] = {c: [] for c in CONFIGS}
    theirs: Dict[Tuple[int, int], List[float]] = {c: [] for c in CONFIGS}
    for _ in range(repeats):
        for tokens, threads in CONFIGS:
            n = iterations[tokens]
            report = run_runner([programs[tokens]], exported.foundation, True, n, warmup, threads)
            ours[(tokens, threads)] += report["latency_ms"]
            theirs[(tokens, threads)] += peer.time(f"b{tokens}", threads, n, warmup)
    return ours, theirs


def measure_peer(
    peer_name: str,
    model: BenchModel,
    exported: Exported,
    work_dir: str,
    repeats: int,
    n1: int,
    n32: int,
    warmup: int,
    log: Callable[[str], None] = lambda message: None,
) -> PeerMeasured:
    """Lowers the model with the peer and times it interleaved with edgeshare.

    Raises:
      BenchError: the venv, the peer's export or load, or a timing failed (the message says which).
    """
    start = time.perf_counter()
    python = peer_python(peer_name, log)
    folder = os.path.join(work_dir, f"peer_{peer_name}")
    manifest = {"out_dir": folder, "programs": save_peer_programs(model, exported, folder)}
    manifest_path = os.path.join(folder, "manifest.json")
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{peer_name}_peer.py")
    log(f"[{model.name}] peer {peer_name}: lowering with its XNNPACK flow")
    peer = PeerProcess(python, script, manifest_path, os.path.join(folder, "peer.log"))
    try:
        log(f"[{model.name}] peer {peer_name}: timing interleaved with edgeshare ({repeats} repeats)")
        ours, theirs = _interleave(peer, exported, repeats, {1: n1, 32: n32}, warmup)
        tiny = peer.time(TINY, 1, max(200, n1), max(warmup, 10))
    finally:
        peer.close()
    name = f"{peer_name} {str(peer.ready.get('executorch', '?')).split('+')[0]}"
    return PeerMeasured(name, ours, theirs, tiny, peer.ready, time.perf_counter() - start)
