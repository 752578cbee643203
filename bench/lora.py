"""lora: what weight sharing buys LoRA programs at run time, against no sharing and torch eager.

    ./bazelw run -c opt //bench:lora -- [--json FILE] [--models demo,reference] [--repeats N]

For each model (the demo of exir/demo_lora.py, and a reference transformer-style model) it exports
8 LoRA programs over one foundation.ptd for T=1 tokens, one for T=32, and the bare foundation (no
adapter) for both as a baseline; every export writes a byte-identical foundation.ptd, so one copy
serves all. Then it runs bench/lora_runner (the C++ runtime with the XNNPACK delegate) once per
configuration in a fresh process:

- 1 program; 2 and 8 programs with the weights cache's sharing on and off: RSS growth (VmRSS after
  loading minus VmRSS before opening anything), the same after malloc_trim, peak (VmHWM), and the
  load time of each program;
- 1 program (and the bare foundation) at T=1 and T=32: forward latency, the median of K runs after
  warm-up, 1 thread and 2 threads (the delegate's pthreadpool, torch.set_num_threads(2));

and times torch eager on the same models with torch.set_num_threads(1). Every configuration is
repeated --repeats times, round-robin, and medians are reported. It prints a table and the JSON
({"demo": {...}, "reference": {...}}), and writes the JSON to --json FILE. Keys, per model:

- rss_mb_1, rss_mb_{2,8}_{shared,unshared}: RSS growth in MiB with 1, 2, 8 T=1 programs loaded;
  rss_trimmed_mb_*: the same after malloc_trim (without the allocator's free pages); peak_mb_*:
  VmHWM growth (a lower bound); rss_mb_steps_8_*: growth after each of the 8 loads;
  rss_mb_foundation_only: the bare foundation; rss_mb_1_b32: one T=32 program; *_after_run: after
  the timed runs (activations touched).
- load_ms_first: opening the .ptd plus loading program 1 (Program::load + load_method: fetch and
  pack); load_ms_second_{shared,unshared}: program 2; load_ms_rest_*: programs 2..8.
- latency_ms_b1, latency_ms_b32: runtime, 1 thread, median ms; torch_latency_ms_b1/_b32: torch
  eager, 1 thread; *_foundation_only: the bare foundation, to split LoRA's cost from the base's.
- ratios: rss_8_shared_over_unshared, load_second_shared_over_first, latency_b32_over_torch, ...;
  sizes (foundation_mb, adapter_mb), weights-cache counters, export_s, and not_measured.
"""

import argparse
import copy
import dataclasses
import filecmp
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import LoraDataPolicy, to_edge
from edgeshare.exir.demo_lora import demo_lora, make_adapter
from edgeshare.exir.lora import LoRALinear, LoraExportResult, export_lora, export_method

__all__ = [
    "REQUIRED_KEYS",
    "BenchError",
    "BenchModel",
    "Exported",
    "ReferenceBlock",
    "ReferenceModel",
    "bench_model",
    "demo_model",
    "export_model",
    "format_table",
    "main",
    "reference_model",
    "run_bench",
    "run_runner",
    "runner_path",
    "torch_latency_ms",
    "with_lora",
]

# The keys every model's result has (bench/lora_test.py checks them).
REQUIRED_KEYS = (
    "rss_mb_1",
    "rss_mb_2_shared",
    "rss_mb_2_unshared",
    "rss_mb_8_shared",
    "rss_mb_8_unshared",
    "load_ms_first",
    "load_ms_second_shared",
    "load_ms_second_unshared",
    "latency_ms_b1",
    "latency_ms_b32",
    "torch_latency_ms_b1",
    "torch_latency_ms_b32",
)
NUM_ADAPTERS = 8
MIB = 1024.0 * 1024.0
NOT_MEASURED: Dict[str, str] = {}  # nothing the issue asks for is left out


class BenchError(RuntimeError):
    """A benchmark step failed (the runner's or the exporter's message is kept)."""


@dataclasses.dataclass
class BenchModel:
    """A model to benchmark.

    Attributes:
      name: its key in the report ("demo", "reference").
      description: one line for the table.
      foundation: the bare foundation.
      adapters: NUM_ADAPTERS LoRA-wrapped models over the foundation's weights, by program name.
      make_input: tokens -> an example input [tokens, features].
      iterations_b32: timed runs at T=32 (a few for large models, to keep the run short).
    """

    name: str
    description: str
    foundation: nn.Module
    adapters: Dict[str, nn.Module]
    make_input: Callable[[int], torch.Tensor]
    iterations_b32: int


# ---------------------------------------------------------------------------------------------
# Models


class ReferenceBlock(nn.Module):
    """h = x + o_proj(LayerNorm(x)); out = h + down(silu(up(LayerNorm(h))))."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = x + self.o_proj(self.norm1(x))
        return h + self.down(nn.functional.silu(self.up(self.norm2(h))))


class ReferenceModel(nn.Module):
    """A stack of ReferenceBlocks over input [T, d_model]."""

    def __init__(self, blocks: int = 4, d_model: int = 1024, d_ff: int = 2048) -> None:
        super().__init__()
        self.d_model = d_model
        self.blocks = nn.ModuleList(ReferenceBlock(d_model, d_ff) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        for block in self.blocks:
            x = block(x)
        return x


def with_lora(foundation: nn.Module, rank: int, alpha: float, seed: int, std: float) -> nn.Module:
    """A copy of foundation with every nn.Linear wrapped in a seeded LoRALinear.

    The copy shares the foundation's parameter tensors (no copy of the large weights); A and B are
    both non-zero, drawn from N(0, std^2) with a generator seeded by seed.

    Args:
      foundation: the bare model.
      rank: LoRA rank.
      alpha: LoRA alpha.
      seed: seeds A and B.
      std: their standard deviation.

    Returns:
      The LoRA model, in eval mode.
    """
    memo: Dict[int, Any] = {id(p): p for p in foundation.parameters()}
    model = copy.deepcopy(foundation, memo)
    generator = torch.Generator().manual_seed(seed)
    linears = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, linear in linears:
        wrapped = LoRALinear(linear, rank, alpha)
        with torch.no_grad():
            for lora in (wrapped.lora_a, wrapped.lora_b):
                lora.weight.copy_(torch.randn(lora.weight.shape, generator=generator) * std)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, wrapped)
    return model.eval()


def _seeded_input(features: int, seed: int) -> Callable[[int], torch.Tensor]:
    def make(tokens: int) -> torch.Tensor:
        return torch.randn(tokens, features, generator=torch.Generator().manual_seed(seed))

    return make


def reference_model(blocks: int = 4, d_model: int = 1024, d_ff: int = 2048) -> BenchModel:
    """The reference: 4 blocks, d_model 1024, d_ff 2048, LoRA rank 16 alpha 32 on every Linear.

    Foundation from seed 0 (about 80 MiB fp32), adapters from seeds 1..8 (about 2 MiB each).
    """
    torch.manual_seed(0)
    foundation = ReferenceModel(blocks, d_model, d_ff).eval()
    adapters = {
        f"adapter{seed}": with_lora(foundation, rank=16, alpha=32.0, seed=seed, std=0.02)
        for seed in range(1, NUM_ADAPTERS + 1)
    }
    return BenchModel(
        name="reference",
        description=f"{blocks} blocks, d_model {d_model}, d_ff {d_ff}, LoRA r16 on every Linear",
        foundation=foundation,
        adapters=adapters,
        make_input=_seeded_input(d_model, 100),
        iterations_b32=10,
    )


def demo_model() -> BenchModel:
    """The demo of exir/demo_lora.py: its two adapters (seeds 1, 2) plus seeds 3..8."""
    foundation, demo_adapters, _ = demo_lora()
    adapters = {"adapter1": demo_adapters["lora_a"], "adapter2": demo_adapters["lora_b"]}
    for seed in range(3, NUM_ADAPTERS + 1):
        adapters[f"adapter{seed}"] = make_adapter(foundation, seed)
    return BenchModel(
        name="demo",
        description="demo MLP 256-512-512-256, LoRA r8 on every Linear",
        foundation=foundation,
        adapters=adapters,
        make_input=_seeded_input(256, 3),
        iterations_b32=50,
    )


MODELS: Dict[str, Callable[[], BenchModel]] = {"demo": demo_model, "reference": reference_model}


# ---------------------------------------------------------------------------------------------
# Measurements


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
) -> Dict[str, Any]:
    """Runs lora_runner once, in a fresh process, and returns its JSON report.

    Args:
      programs: .pte paths, loaded in order.
      data: the foundation .ptd.
      share: the weights cache's sharing switch.
      iterations: timed runs of the first program (0: no latency).
      warmup: untimed runs before them.
      threads: threads of the delegate's operators.

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
    args += ["--iterations", str(iterations), "--warmup", str(warmup), "--threads", str(threads)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"lora_runner failed ({proc.returncode}): {proc.stderr.strip()}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"lora_runner printed no report: {proc.stdout!r}")
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
class Exported:
    """The files of one model, all over one foundation.ptd.

    Attributes:
      foundation: the shared .ptd.
      programs_b1: NUM_ADAPTERS LoRA programs for T=1.
      program_b32: the first adapter's program for T=32.
      bare_b1, bare_b32: the foundation alone (no adapter) for T=1 and T=32, as a baseline.
      export_s: seconds the exports took.
      result_b1: what export_lora wrote for T=1 (sizes, eager modules).
    """

    foundation: str
    programs_b1: List[str]
    program_b32: str
    bare_b1: str
    bare_b32: str
    export_s: float
    result_b1: LoraExportResult


def _same_foundation(model: BenchModel, reference: str, other: str) -> None:
    if not filecmp.cmp(reference, other, shallow=False):
        raise BenchError(f"{model.name}: {other} differs from {reference}")
    os.remove(other)  # One copy serves every program.


def export_model(model: BenchModel, out_dir: str) -> Exported:
    """Exports model's LoRA programs for T=1 (every adapter) and T=32 (the first adapter), and the
    bare foundation for both, all over the T=1 export's foundation.ptd.

    Raises:
      BenchError: another export wrote a different foundation.ptd than the T=1 export.
    """
    start = time.perf_counter()
    names = list(model.adapters)
    b1 = export_lora(model.foundation, model.adapters, (model.make_input(1),), os.path.join(out_dir, "t1"),
                     XnnpackPartitioner())
    first = names[0]
    b32 = export_lora(model.foundation, {first: model.adapters[first]}, (model.make_input(32),),
                      os.path.join(out_dir, "t32"), XnnpackPartitioner())
    _same_foundation(model, b1.foundation_path, b32.foundation_path)
    bare: Dict[int, str] = {}
    for tokens in (1, 32):
        folder = os.path.join(out_dir, f"bare_t{tokens}")
        ep = export_method(model.foundation, (model.make_input(tokens),), f"{model.name} foundation")
        edge = to_edge({"forward": ep}, data_policy=LoraDataPolicy()).to_backend(XnnpackPartitioner())
        paths = edge.to_executorch().write_to_dir(folder, "foundation_only")
        bare[tokens] = paths[0]
        _same_foundation(model, b1.foundation_path, os.path.join(folder, "foundation.ptd"))
    return Exported(
        foundation=b1.foundation_path,
        programs_b1=[b1.program_paths[n] for n in names],
        program_b32=b32.program_paths[first],
        bare_b1=bare[1],
        bare_b32=bare[32],
        export_s=time.perf_counter() - start,
        result_b1=b1,
    )


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _mib(kib: float) -> float:
    return kib / 1024.0


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else float("nan")


def bench_model(
    model: BenchModel,
    work_dir: str,
    repeats: int = 5,
    iterations_b1: int = 50,
    iterations_b32: Optional[int] = None,
    warmup: int = 3,
    log: Callable[[str], None] = lambda message: None,
) -> Dict[str, Any]:
    """Exports and measures one model; returns its figures (REQUIRED_KEYS and more).

    Every configuration runs in a fresh lora_runner process, `repeats` times, round-robin (so that
    slow phases of a noisy machine hit every configuration alike); figures are medians.

    Args:
      model: what to measure.
      work_dir: where its files go.
      repeats: fresh processes per configuration.
      iterations_b1: timed runs at T=1 per process (runtime), and per repeat (torch).
      iterations_b32: the same at T=32 (None: the model's own default).
      warmup: untimed runs before them.
      log: progress messages.
    """
    n32 = model.iterations_b32 if iterations_b32 is None else iterations_b32
    log(f"[{model.name}] exporting {len(model.adapters)} LoRA programs (T=1), 1 (T=32) and the bare foundation")
    exported = export_model(model, work_dir)
    log(f"[{model.name}] exported in {exported.export_s:.1f} s; measuring ({repeats} repeats)")
    data = exported.foundation
    programs = exported.programs_b1
    # name -> (programs, sharing, timed runs, threads); "1" also gives the T=1 latency.
    configs = {
        "1": (programs[:1], True, iterations_b1, 1),
        "2_shared": (programs[:2], True, 0, 1),
        "2_unshared": (programs[:2], False, 0, 1),
        "8_shared": (programs[:NUM_ADAPTERS], True, 0, 1),
        "8_unshared": (programs[:NUM_ADAPTERS], False, 0, 1),
        "1_b32": ([exported.program_b32], True, n32, 1),
        "foundation": ([exported.bare_b1], True, iterations_b1, 1),
        "foundation_b32": ([exported.bare_b32], True, n32, 1),
        "1_2threads": (programs[:1], True, iterations_b1, 2),
        "1_b32_2threads": ([exported.program_b32], True, n32, 2),
    }
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, (paths, share, iterations, threads) in configs.items():
            runs[name].append(run_runner(paths, data, share, iterations, warmup, threads))

    module = exported.result_b1.modules[next(iter(model.adapters))]
    torch_ms = {
        (what, tokens): torch_latency_ms(m, model.make_input(tokens), n * repeats, warmup)
        for what, m in (("lora", module), ("foundation", model.foundation))
        for tokens, n in ((1, iterations_b1), (32, n32))
    }
    for tokens, n in ((1, iterations_b1), (32, n32)):
        torch_ms[("lora_2threads", tokens)] = torch_latency_ms(
            module, model.make_input(tokens), n * repeats, warmup, threads=2)

    def over(name: str, key: str, rest: str = "rss_before_kib") -> float:
        return _median([_mib(r[key] - r[rest]) for r in runs[name]])

    def latency(name: str) -> List[float]:
        return [ms for r in runs[name] for ms in r["latency_ms"]]

    def steps(name: str) -> List[float]:
        count = len(runs[name][0]["rss_after_kib"])
        return [round(_median([_mib(r["rss_after_kib"][i] - r["rss_before_kib"]) for r in runs[name]]), 3)
                for i in range(count)]

    lora_runs = [r for name in ("1", "2_shared", "2_unshared", "8_shared", "8_unshared") for r in runs[name]]

    def second_load(share: bool) -> List[float]:
        return [r["load_ms"][1] for r in lora_runs if r["sharing"] == share and len(r["load_ms"]) > 1]

    sizes = exported.result_b1
    out: Dict[str, Any] = {
        "description": model.description,
        "rss_mb_1": over("1", "rss_loaded_kib"),
        "rss_mb_2_shared": over("2_shared", "rss_loaded_kib"),
        "rss_mb_2_unshared": over("2_unshared", "rss_loaded_kib"),
        "rss_mb_8_shared": over("8_shared", "rss_loaded_kib"),
        "rss_mb_8_unshared": over("8_unshared", "rss_loaded_kib"),
        "rss_mb_foundation_only": over("foundation", "rss_loaded_kib"),
        "rss_mb_1_b32": over("1_b32", "rss_loaded_kib"),
        "rss_mb_1_after_run": over("1", "rss_ran_kib"),
        "rss_mb_1_b32_after_run": over("1_b32", "rss_ran_kib"),
        "rss_mb_steps_8_shared": steps("8_shared"),
        "rss_mb_steps_8_unshared": steps("8_unshared"),
        "rss_trimmed_mb_1": over("1", "rss_trimmed_kib"),
        "rss_trimmed_mb_8_shared": over("8_shared", "rss_trimmed_kib"),
        "rss_trimmed_mb_8_unshared": over("8_unshared", "rss_trimmed_kib"),
        "rss_file_mb_8_shared": over("8_shared", "rss_file_loaded_kib", "rss_file_before_kib"),
        "peak_mb_1": over("1", "hwm_loaded_kib"),
        "peak_mb_2_shared": over("2_shared", "hwm_loaded_kib"),
        "peak_mb_2_unshared": over("2_unshared", "hwm_loaded_kib"),
        "peak_mb_8_shared": over("8_shared", "hwm_loaded_kib"),
        "peak_mb_8_unshared": over("8_unshared", "hwm_loaded_kib"),
        "load_ms_first": _median([r["data_open_ms"] + r["load_ms"][0] for r in lora_runs]),
        "load_ms_second_shared": _median(second_load(True)),
        "load_ms_second_unshared": _median(second_load(False)),
        "load_ms_rest_shared": _median([ms for r in runs["8_shared"] for ms in r["load_ms"][1:]]),
        "load_ms_rest_unshared": _median([ms for r in runs["8_unshared"] for ms in r["load_ms"][1:]]),
        "load_ms_foundation_only": _median([r["data_open_ms"] + r["load_ms"][0] for r in runs["foundation"]]),
        "data_open_ms": _median([r["data_open_ms"] for r in lora_runs]),
        "latency_ms_b1": _median(latency("1")),
        "latency_ms_b32": _median(latency("1_b32")),
        "latency_ms_b1_min": min(latency("1")),
        "latency_ms_b32_min": min(latency("1_b32")),
        "latency_ms_b1_foundation_only": _median(latency("foundation")),
        "latency_ms_b32_foundation_only": _median(latency("foundation_b32")),
        "torch_latency_ms_b1": _median(torch_ms[("lora", 1)]),
        "torch_latency_ms_b32": _median(torch_ms[("lora", 32)]),
        "torch_latency_ms_b1_foundation_only": _median(torch_ms[("foundation", 1)]),
        "torch_latency_ms_b32_foundation_only": _median(torch_ms[("foundation", 32)]),
        "latency_ms_b1_2threads": _median(latency("1_2threads")),
        "latency_ms_b32_2threads": _median(latency("1_b32_2threads")),
        "torch_latency_ms_b1_2threads": _median(torch_ms[("lora_2threads", 1)]),
        "torch_latency_ms_b32_2threads": _median(torch_ms[("lora_2threads", 32)]),
        "foundation_mb": sizes.shared_bytes / MIB,
        "foundation_file_mb": os.path.getsize(data) / MIB,
        "adapter_mb": _median([b / MIB for b in sizes.adapter_bytes.values()]),
        "program_file_mb": _median([os.path.getsize(p) / MIB for p in programs]),
        "packed_entries_8_shared": runs["8_shared"][0]["packed_entries"],
        "packed_entries_8_unshared": runs["8_unshared"][0]["packed_entries"],
        "bytes_fetched_mb_8_shared": runs["8_shared"][0]["bytes_fetched"] / MIB,
        "bytes_fetched_mb_8_unshared": runs["8_unshared"][0]["bytes_fetched"] / MIB,
        "cache_released": all(r["packed_entries_released"] == 0 for rs in runs.values() for r in rs),
        "export_s": exported.export_s,
        "repeats": repeats,
        "iterations_b1": iterations_b1,
        "iterations_b32": n32,
    }
    extra = NUM_ADAPTERS - 1
    out["rss_2_shared_over_unshared"] = _ratio(out["rss_mb_2_shared"], out["rss_mb_2_unshared"])
    out["rss_8_shared_over_unshared"] = _ratio(out["rss_mb_8_shared"], out["rss_mb_8_unshared"])
    out["rss_8_shared_over_1"] = _ratio(out["rss_mb_8_shared"], out["rss_mb_1"])
    out["rss_8_unshared_over_1"] = _ratio(out["rss_mb_8_unshared"], out["rss_mb_1"])
    out["rss_mb_per_extra_program_shared"] = (out["rss_mb_8_shared"] - out["rss_mb_1"]) / extra
    out["rss_mb_per_extra_program_unshared"] = (out["rss_mb_8_unshared"] - out["rss_mb_1"]) / extra
    out["rss_trimmed_mb_per_extra_program_shared"] = (out["rss_trimmed_mb_8_shared"] - out["rss_trimmed_mb_1"]) / extra
    out["load_second_shared_over_first"] = _ratio(out["load_ms_second_shared"], out["load_ms_first"])
    out["load_second_shared_over_unshared"] = _ratio(out["load_ms_second_shared"], out["load_ms_second_unshared"])
    out["latency_b1_over_torch"] = _ratio(out["latency_ms_b1"], out["torch_latency_ms_b1"])
    out["latency_b32_over_torch"] = _ratio(out["latency_ms_b32"], out["torch_latency_ms_b32"])
    out["latency_b1_foundation_only_over_torch"] = _ratio(
        out["latency_ms_b1_foundation_only"], out["torch_latency_ms_b1_foundation_only"])
    out["latency_b32_foundation_only_over_torch"] = _ratio(
        out["latency_ms_b32_foundation_only"], out["torch_latency_ms_b32_foundation_only"])
    out["latency_b32_2threads_over_torch"] = _ratio(
        out["latency_ms_b32_2threads"], out["torch_latency_ms_b32_2threads"])
    out["latency_b32_2threads_speedup"] = _ratio(out["latency_ms_b32"], out["latency_ms_b32_2threads"])
    out["lora_latency_overhead_b32"] = _ratio(out["latency_ms_b32"], out["latency_ms_b32_foundation_only"])
    out["torch_lora_latency_overhead_b32"] = _ratio(
        out["torch_latency_ms_b32"], out["torch_latency_ms_b32_foundation_only"])
    out["not_measured"] = dict(NOT_MEASURED)
    return out


def run_bench(
    models: Sequence[str],
    repeats: int = 5,
    iterations_b1: int = 50,
    iterations_b32: Optional[int] = None,
    warmup: int = 3,
    keep_dir: Optional[str] = None,
    log: Callable[[str], None] = lambda message: None,
) -> Dict[str, Dict[str, Any]]:
    """Measures every named model; returns {model: figures}.

    Args:
      models: names in MODELS.
      repeats, iterations_b1, iterations_b32, warmup: see bench_model.
      keep_dir: export into this folder and keep the files (None: a temporary folder, removed).
      log: progress messages.
    """
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise BenchError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    root = keep_dir or tempfile.mkdtemp(prefix="edgeshare_bench_")
    try:
        results = {}
        for name in models:
            model = MODELS[name]()
            results[name] = bench_model(model, os.path.join(root, name), repeats, iterations_b1,
                                        iterations_b32, warmup, log)
            del model
        return results
    finally:
        if keep_dir is None:
            shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Report

TABLE = (
    ("RSS growth, MiB (T=1 programs)", None),
    ("  1 program", "rss_mb_1"),
    ("  2 programs, shared", "rss_mb_2_shared"),
    ("  2 programs, unshared", "rss_mb_2_unshared"),
    ("  8 programs, shared", "rss_mb_8_shared"),
    ("  8 programs, unshared", "rss_mb_8_unshared"),
    ("  8 shared / 8 unshared", "rss_8_shared_over_unshared"),
    ("  per extra program, shared", "rss_mb_per_extra_program_shared"),
    ("  per extra program, unshared", "rss_mb_per_extra_program_unshared"),
    ("  the same after malloc_trim, shared", "rss_trimmed_mb_per_extra_program_shared"),
    ("  bare foundation, no adapter", "rss_mb_foundation_only"),
    ("  peak, 8 programs, shared", "peak_mb_8_shared"),
    ("  peak, 8 programs, unshared", "peak_mb_8_unshared"),
    ("Load, ms", None),
    ("  program 1 (with opening the .ptd)", "load_ms_first"),
    ("  program 2, shared", "load_ms_second_shared"),
    ("  program 2, unshared", "load_ms_second_unshared"),
    ("  programs 2..8, shared", "load_ms_rest_shared"),
    ("  programs 2..8, unshared", "load_ms_rest_unshared"),
    ("  program 2 shared / program 1", "load_second_shared_over_first"),
    ("Latency, ms (1 thread)", None),
    ("  runtime, T=1", "latency_ms_b1"),
    ("  torch eager, T=1", "torch_latency_ms_b1"),
    ("  runtime / torch, T=1", "latency_b1_over_torch"),
    ("  runtime, T=32", "latency_ms_b32"),
    ("  torch eager, T=32", "torch_latency_ms_b32"),
    ("  runtime / torch, T=32", "latency_b32_over_torch"),
    ("  bare foundation: runtime, T=32", "latency_ms_b32_foundation_only"),
    ("  bare foundation: torch, T=32", "torch_latency_ms_b32_foundation_only"),
    ("  bare foundation: runtime / torch", "latency_b32_foundation_only_over_torch"),
    ("Sizes, MiB", None),
    ("  foundation weights (shared)", "foundation_mb"),
    ("  adapter weights per program", "adapter_mb"),
    ("  .pte file per program", "program_file_mb"),
    ("  fetched from data maps, 8 shared", "bytes_fetched_mb_8_shared"),
    ("  fetched from data maps, 8 unshared", "bytes_fetched_mb_8_unshared"),
)


def _format(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "n/a"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def format_table(results: Dict[str, Dict[str, Any]]) -> str:
    """The figures of every model as a text table, one column per model."""
    names = list(results)
    width = max(len(label) for label, _ in TABLE) + 2
    lines = [" " * width + "".join(f"{n:>14}" for n in names)]
    for label, key in TABLE:
        if key is None:
            lines.append(label)
            continue
        lines.append(f"{label:<{width}}" + "".join(f"{_format(results[n].get(key)):>14}" for n in names))
    for name in names:
        r = results[name]
        lines.append(
            f"{name}: {r['description']}; medians of {r['repeats']} fresh processes per configuration, "
            f"{r['iterations_b1']} (T=1) / {r['iterations_b32']} (T=32) timed runs per process; "
            f"export {r['export_s']:.1f} s; cache empty after release: {r['cache_released']}"
        )
    for what, why in NOT_MEASURED.items():
        lines.append(f"not measured: {what}: {why}")
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """value with every NaN replaced by None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _user_path(path: str) -> str:
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    return path if os.path.isabs(path) else os.path.join(base, path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(prog="lora", description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--models", default="demo,reference", help="comma-separated: demo, reference")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per configuration")
    parser.add_argument("--iterations", type=int, default=50, help="timed runs at T=1")
    parser.add_argument("--iterations-b32", type=int, default=None, help="timed runs at T=32 (default per model)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    parser.add_argument("--keep", default=None, help="export into this folder and keep the files")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.iterations < 1 or (args.iterations_b32 is not None and args.iterations_b32 < 1):
        parser.error("--repeats, --iterations and --iterations-b32 must be at least 1")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    models = [m.strip() for m in args.models.split(",") if m.strip()]

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    start = time.perf_counter()
    try:
        results = run_bench(models, args.repeats, args.iterations, args.iterations_b32, args.warmup,
                            _user_path(args.keep) if args.keep else None, log)
    except (BenchError, ValueError, TypeError) as e:
        print(f"lora: error: {e}", file=sys.stderr)
        return 1
    log(f"done in {time.perf_counter() - start:.0f} s")
    print(format_table(results))
    text = json.dumps(_finite(results), indent=2, sort_keys=True)
    print(text)
    if args.json:
        with open(_user_path(args.json), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
