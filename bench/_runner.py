"""The runner every case measures with: edgeshare's measuring processes (bench/lora_runner,
tools/generate, tools/inspect), each in a fresh process whose peak RSS is kept, and torch eager.

A case names what it runs with a RunnerConfig (programs, data files, threads, tokens...) instead of
a positional tuple; every process's report is its last JSON line (or --json file), and a failure is
one BenchError naming the tool and carrying its message.
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = [
    "BenchError",
    "ProcessResult",
    "RunnerConfig",
    "json_report",
    "program_layout",
    "run_generate",
    "run_process",
    "run_runner",
    "runner_path",
    "tool_path",
    "torch_latency_ms",
]


class BenchError(RuntimeError):
    """A benchmark step failed (the runner's, a tool's or the exporter's message is kept)."""


def runner_path() -> str:
    """The lora_runner binary beside this module in the runfiles tree.

    Raises:
      FileNotFoundError: the target does not depend on //bench:lora_runner.
    """
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lora_runner")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //bench:lora_runner")
    return path


def tool_path(name: str) -> str:
    """//tools:<name> in the runfiles tree (a sibling package of bench).

    Raises:
      FileNotFoundError: the target does not depend on //tools:<name>.
    """
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //tools:{name}")
    return path


@dataclasses.dataclass
class ProcessResult:
    """A finished measuring process.

    Attributes:
      returncode: its exit status.
      stdout, stderr: what it printed.
      peak_rss_kib: its own peak resident set (VmHWM at exit; 0 if it could not be started).
    """

    returncode: int
    stdout: str
    stderr: str
    peak_rss_kib: int


# Runs argv[2:] in a child and writes the child's peak RSS (KiB) to the file argv[1]. A child's
# ru_maxrss counts the memory of the process it was forked from (exec records the old image's high
# water), so the measured process is forked from this small interpreter, never from the bench's.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as e:
        sys.stderr.write(f"cannot run {sys.argv[2]}: {e}\\n")
        sys.stderr.flush()
    os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def run_process(
    args: Sequence[str],
    env: Optional[Dict[str, str]] = None,
    on_stderr_line: Optional[Callable[[str], None]] = None,
) -> ProcessResult:
    """Runs args to completion in a fresh process and keeps its own peak RSS.

    Args:
      args: the command line.
      env: its environment (None: this process's).
      on_stderr_line: if set, called with each line the process writes to stderr as it comes
        (e.g. to time an exporter's stages).

    Returns:
      Its exit status, output and peak RSS.
    """
    with tempfile.TemporaryDirectory(prefix="bench_process_") as folder:
        peak = os.path.join(folder, "peak_rss_kib")
        launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, peak] + list(args)
        if on_stderr_line is None:
            proc = subprocess.run(launcher, capture_output=True, text=True, env=env, check=False)
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        else:
            returncode, stdout, stderr = _run_streaming(launcher, env, on_stderr_line)
        peak_kib = 0
        if os.path.exists(peak):
            with open(peak) as f:
                peak_kib = int(f.read() or 0)
        return ProcessResult(returncode, stdout, stderr, peak_kib)


def _run_streaming(
    args: Sequence[str], env: Optional[Dict[str, str]], on_line: Callable[[str], None]
) -> Tuple[int, str, str]:
    """subprocess.run's capture, with stderr's lines handed to on_line as they arrive (stdout is
    drained by a thread, so neither pipe can fill and stall the child)."""
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as child:
        out: List[str] = []
        drain = threading.Thread(target=lambda: out.append(child.stdout.read()), daemon=True)
        drain.start()
        err: List[str] = []
        for line in child.stderr:
            err.append(line)
            on_line(line.rstrip("\n"))
        drain.join()
        return child.wait(), "".join(out), "".join(err)


def json_report(proc: ProcessResult, what: str) -> Dict[str, Any]:
    """The last JSON line a measuring process printed, with its peak RSS as "peak_rss_kib".

    Raises:
      BenchError: naming `what` when it failed or printed no JSON line.
    """
    if proc.returncode != 0:
        raise BenchError(f"{what} failed ({proc.returncode}): {proc.stderr.strip()}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"{what} printed no report: {proc.stdout!r}")
    report = json.loads(lines[-1])
    report["peak_rss_kib"] = proc.peak_rss_kib
    return report


@dataclasses.dataclass
class RunnerConfig:
    """One lora_runner process.

    Attributes:
      programs: .pte paths, loaded in order.
      data: .ptd paths opened first (the foundation, then adapter files of a swappable program).
      share: the weights cache's sharing switch.
      iterations: timed runs of the first program (0: no latency, load and RSS only).
      warmup: untimed runs before them.
      threads: threads of the delegate's operators.
      tokens: the T of the timed input: None for the program's own example input (the LoRA
        models), else method `method` on `inputs[tokens]` (int64 input_ids [1, T] .npy).
      method: the method timed when tokens is given.
      inputs: tokens -> .npy path.
      verify: content verification (False: --no-verify, trusted files).
      swap_data: .ptd files bound in turn with Method::rebind_data after loading.
      swap_rounds: how many times swap_data is bound in turn.
    """

    programs: Sequence[str]
    data: Sequence[str]
    share: bool = True
    iterations: int = 0
    warmup: int = 2
    threads: int = 1
    tokens: Optional[int] = None
    method: str = "forward"
    inputs: Dict[int, str] = dataclasses.field(default_factory=dict)
    verify: bool = True
    swap_data: Sequence[str] = ()
    swap_rounds: int = 0

    def args(self) -> List[str]:
        """lora_runner's command line."""
        args = [runner_path()]
        for path in self.data:
            args += ["--data", path]
        for path in self.programs:
            args += ["--program", path]
        if self.tokens is not None:
            args += ["--method", self.method, "--input", self.inputs[self.tokens]]
        if not self.share:
            args.append("--no-share")
        if not self.verify:
            args.append("--no-verify")
        for path in self.swap_data:
            args += ["--swap-data", path]
        if self.swap_data:
            args += ["--swap-rounds", str(self.swap_rounds)]
        args += ["--iterations", str(self.iterations), "--warmup", str(self.warmup), "--threads", str(self.threads)]
        return args


def run_runner(config: RunnerConfig) -> Dict[str, Any]:
    """Runs lora_runner once, in a fresh process, and returns its JSON report (see
    bench/lora_runner.cc) with its peak RSS.

    Raises:
      BenchError: the runner failed.
    """
    return json_report(run_process(config.args()), "lora_runner")


def run_generate(
    program: str,
    data: Sequence[str],
    prompt: str,
    new_tokens: int,
    threads: int = 1,
    warmup_tokens: int = 0,
    more_programs: Sequence[str] = (),
) -> Dict[str, Any]:
    """One fresh tools/generate, greedy from prompt (an int64 .npy) -> its --json report (tokens,
    prefill_ms, decode_tokens_per_s) with its peak RSS ("peak_rss_kib"). warmup_tokens > 0: an
    untimed generation of that many tokens first, as llama.cpp's peer has. With more_programs, all
    are loaded first over the same data files and each generates: the report has one such object
    per program name (and the process's peak RSS).

    Raises:
      BenchError: tools/generate failed.
    """
    with tempfile.TemporaryDirectory(prefix="bench_generate_") as folder:
        out = os.path.join(folder, "generate.json")
        args = [tool_path("generate")]
        for path in [program, *more_programs]:
            args += ["--program", path]
        for path in data:
            args += ["--data", path]
        args += ["--prompt-ids", prompt, "--max-new-tokens", str(new_tokens), "--json", out, "--threads", str(threads)]
        args += ["--warmup-tokens", str(warmup_tokens)]
        proc = run_process(args)
        if proc.returncode != 0:
            raise BenchError(f"tools/generate failed ({proc.returncode}): {proc.stderr.strip()}")
        with open(out) as f:
            report = json.load(f)
    report["peak_rss_kib"] = proc.peak_rss_kib
    return report


def program_layout(path: str) -> Dict[str, Any]:
    """//tools:inspect --json of one .pte: its size and each method's planned bytes.

    Raises:
      BenchError: tools/inspect failed.
    """
    proc = run_process([tool_path("inspect"), "--json", path])
    if proc.returncode != 0:
        raise BenchError(f"tools/inspect failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)[path]


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
