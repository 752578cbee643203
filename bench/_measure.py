"""The benchmark's measurement stage: lora_runner in fresh processes, and torch eager timings."""

import dataclasses
import json
import os
import subprocess
import time
from typing import Any, Dict, List, Sequence, Tuple

import torch
from edgeshare.bench._export import BenchError, Exported
from edgeshare.bench._models import NUM_ADAPTERS, BenchModel
from torch import nn

__all__ = ["Measured", "measure", "run_runner", "runner_path", "torch_latency_ms"]


def runner_path() -> str:
    """The lora_runner binary beside this module in the runfiles tree."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lora_runner")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //bench:lora_lib")
    return path


def run_runner(
    programs: Sequence[str],
    data: str,
    share: bool = True,
    iterations: int = 0,
    warmup: int = 2,
    threads: int = 1,
    verify: bool = True,
) -> Dict[str, Any]:
    """Runs lora_runner once, in a fresh process, and returns its JSON report.

    Args:
      programs: .pte paths, loaded in order.
      data: the foundation .ptd.
      share: the weights cache's sharing switch.
      iterations: timed runs of the first program (0: no latency).
      warmup: untimed runs before them.
      threads: threads of the delegate's operators.
      verify: content verification (False: --no-verify, trusted files).

    Returns:
      The runner's report (see bench/lora_runner.cc).

    Raises:
      BenchError: the runner failed.
    """
    args = [runner_path(), "--data", data]
    for p in programs:
        args += ["--program", p]
    if not share:
        args.append("--no-share")
    if not verify:
        args.append("--no-verify")
    args += ["--iterations", str(iterations), "--warmup", str(warmup), "--threads", str(threads)]
    return json_report(subprocess.run(args, capture_output=True, text=True, check=False), "lora_runner")


def json_report(proc: subprocess.CompletedProcess, what: str) -> Dict[str, Any]:
    """The last JSON line a measuring process (lora_runner, tools/generate) printed.

    Raises:
      BenchError: naming `what` when it failed or printed no JSON line.
    """
    if proc.returncode != 0:
        raise BenchError(f"{what} failed ({proc.returncode}): {proc.stderr.strip()}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"{what} printed no report: {proc.stdout!r}")
    return json.loads(lines[-1])


def torch_latency_ms(module: nn.Module, x: torch.Tensor, iterations: int, warmup: int, threads: int = 1) -> List[float]:
    """Times torch eager forward passes of module on x with `threads` intra-op threads.

    Returns:
      `iterations` samples in milliseconds (after `warmup` untimed runs).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        samples = []
        with torch.inference_mode():
            for _ in range(warmup):
                module(x)
            for _ in range(iterations):
                start = time.perf_counter()
                module(x)
                samples.append((time.perf_counter() - start) * 1e3)
        return samples
    finally:
        torch.set_num_threads(previous)


@dataclasses.dataclass
class Measured:
    """Everything measured for one model.

    Attributes:
      runs: configuration name -> the runner's reports, one per repeat.
      torch_ms: (what, tokens) -> torch eager samples; what is "lora", "foundation" or
        "lora_2threads".
      iterations_b1, iterations_b32: timed runs per process at T=1 and T=32.
      repeats: fresh processes per configuration.
    """

    runs: Dict[str, List[Dict[str, Any]]]
    torch_ms: Dict[Tuple[str, int], List[float]]
    iterations_b1: int
    iterations_b32: int
    repeats: int


def _configs(exported: Exported, n1: int, n32: int) -> Dict[str, Tuple[List[str], bool, int, int]]:
    """name -> (programs, sharing, timed runs, threads); "1" also gives the T=1 latency."""
    programs = exported.programs_b1
    return {
        "1": (programs[:1], True, n1, 1),
        "2_shared": (programs[:2], True, 0, 1),
        "2_unshared": (programs[:2], False, 0, 1),
        "8_shared": (programs[:NUM_ADAPTERS], True, 0, 1),
        "8_unshared": (programs[:NUM_ADAPTERS], False, 0, 1),
        "1_b32": ([exported.program_b32], True, n32, 1),
        "foundation": ([exported.bare_b1], True, n1, 1),
        "foundation_b32": ([exported.bare_b32], True, n32, 1),
        "1_2threads": (programs[:1], True, n1, 2),
        "1_b32_2threads": ([exported.program_b32], True, n32, 2),
    }


def _torch_samples(
    model: BenchModel, exported: Exported, n1: int, n32: int, repeats: int, warmup: int
) -> Dict[Tuple[str, int], List[float]]:
    module = exported.result_b1.modules[next(iter(model.adapters))]
    torch_ms = {
        (what, tokens): torch_latency_ms(m, model.make_input(tokens), n * repeats, warmup)
        for what, m in (("lora", module), ("foundation", model.foundation))
        for tokens, n in ((1, n1), (32, n32))
    }
    for tokens, n in ((1, n1), (32, n32)):
        torch_ms[("lora_2threads", tokens)] = torch_latency_ms(
            module, model.make_input(tokens), n * repeats, warmup, threads=2
        )
    return torch_ms


def measure(model: BenchModel, exported: Exported, repeats: int, n1: int, n32: int, warmup: int) -> Measured:
    """Runs every configuration in a fresh lora_runner process, `repeats` times, round-robin (so that
    slow phases of a noisy machine hit every configuration alike), then times torch eager.

    Args:
      model: the model (for torch eager).
      exported: its files.
      repeats: fresh processes per configuration.
      n1, n32: timed runs per process at T=1 and T=32 (per repeat for torch).
      warmup: untimed runs before them.

    Returns:
      The raw samples.

    Raises:
      BenchError: a runner process failed.
    """
    configs = _configs(exported, n1, n32)
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, (paths, share, iterations, threads) in configs.items():
            runs[name].append(run_runner(paths, exported.foundation, share, iterations, warmup, threads))
    torch_ms = _torch_samples(model, exported, n1, n32, repeats, warmup)
    return Measured(runs=runs, torch_ms=torch_ms, iterations_b1=n1, iterations_b32=n32, repeats=repeats)
