"""lora: what weight sharing buys LoRA programs at run time, against no sharing and torch eager.

    ./bazelw run -c opt //bench:lora -- [--json FILE] [--models demo,reference] [--repeats N]

For each model (the demo of edgeshare.models, and a reference transformer-style model) it exports
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
- load_ms_first_{verified,unverified}[_2threads] and load_first_verified_over_unverified[_2threads]:
  what content verification (SHA-256 of every fetched foundation weight) costs the first load,
  against lora_runner --no-verify (trusted files), at 1 and 2 threads (_verification);
  load_first_{verified,unverified}_2threads_over_1thread: what the second core buys a first load.

With --peer executorch it also lowers the same eager modules (same weights) with ExecuTorch 1.5.1's
XNNPACK flow and program-data separation (foundation.ptd) in a venv of its own under
~/.cache/edgeshare-bench (made on first use; never part of the build), and times its
Method.execute() interleaved with fresh lora_runner processes at T=1 and T=32, 1 and 2 threads:

- peer_latency_ms_{b1,b32,b1_2threads,b32_2threads}: the peer; peer_edgeshare_latency_ms_*: the
  runtime in the same interleaved run; latency_*_over_peer: edgeshare / peer (below 1: faster);
  peer_binding_overhead_ms: execute() of a 4x4 Linear, what the Python binding adds per call at
  least; latency_b1_over_peer_without_binding; peer_data_separation, peer_ptd_mb, peer_pte_mb_b1,
  peer_export_s, peer_stage_s.

Every run measures the machine's bounds before the models and once per model after them
(bench/roofline; the best run counts; ROOFLINE_KEYS): machine_read_gbps (single-core read
bandwidth over a buffer past the LLC), machine_fc_gflops_{1thread,2threads} (XNNPACK's f32 fully
connected 1024x2048 at batch 32, weights in cache); per model weight_mb_b1_read, gflop_b32,
read_gbps_at_weight_size (the same read over a buffer of the model's weight size, from the LLC if
it fits), bound_ms_b1_read / bound_ms_b1_cached_read (bytes / bandwidth), bound_ms_b32_fc_* (FLOPs /
GFLOP/s) and each latency over its bound (*_over_read_bound, *_over_cached_read_bound,
*_over_fc_bound; 1.0 is the bound).

Stages: _lora_model (what is measured, from edgeshare.models), _lora_export (the files),
_lora_measure (lora_runner processes, torch eager), _lora_figures (medians, ratios), _lora_report
(the table), _lora_verification, _roofline (the machine's bounds), _peer_executorch (the peer); the
runner, statistics and JSON every case shares: _runner, _stats, _report; peers' venvs: _peer.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

from edgeshare.bench._lora_export import export_model
from edgeshare.bench._lora_figures import figures
from edgeshare.bench._lora_measure import measure
from edgeshare.bench._lora_model import MODELS, BenchModel
from edgeshare.bench._lora_report import format_table
from edgeshare.bench._lora_verification import VERIFICATION_KEYS, format_verification, measure_verification
from edgeshare.bench._peer_executorch import PEER_KEYS, PEERS, measure_peer, peer_figures
from edgeshare.bench._report import to_json
from edgeshare.bench._roofline import ROOFLINE_KEYS, RooflineOptions, add_bounds, measure_machine, model_work
from edgeshare.bench._runner import BenchError

__all__ = [
    "PEER_KEYS",
    "REQUIRED_KEYS",
    "ROOFLINE_KEYS",
    "BenchError",
    "RooflineOptions",
    "bench_model",
    "format_table",
    "main",
    "run_bench",
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
) + VERIFICATION_KEYS


def bench_model(
    model: BenchModel,
    work_dir: str,
    repeats: int = 5,
    iterations_b1: int = 50,
    iterations_b32: Optional[int] = None,
    warmup: int = 3,
    log: Callable[[str], None] = lambda message: None,
    peer: Optional[str] = None,
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
      peer: a name in PEERS to time beside the runtime, or None.

    Returns:
      The model's figures (the bounds are added by run_bench, which measures the machine).

    Raises:
      BenchError: an export or a runner process failed.
    """
    n32 = model.iterations_b32 if iterations_b32 is None else iterations_b32
    log(f"[{model.name}] exporting {len(model.adapters)} LoRA programs (T=1), 1 (T=32) and the bare foundation")
    exported = export_model(model, work_dir)
    log(f"[{model.name}] exported in {exported.export_s:.1f} s; measuring ({repeats} repeats)")
    measured = measure(model, exported, repeats, iterations_b1, n32, warmup)
    out = figures(model.description, exported, measured)
    out.update(measure_verification(exported, repeats))
    if peer is not None:
        out.update(
            peer_figures(measure_peer(peer, model, exported, work_dir, repeats, iterations_b1, n32, warmup, log))
        )
    out.update(model_work(model, exported))
    return out


def run_bench(
    models: Sequence[str],
    repeats: int = 5,
    iterations_b1: int = 50,
    iterations_b32: Optional[int] = None,
    warmup: int = 3,
    keep_dir: Optional[str] = None,
    log: Callable[[str], None] = lambda message: None,
    roofline: Optional[RooflineOptions] = None,
    peer: Optional[str] = None,
) -> Dict[str, Dict[str, Any]]:
    """Measures every named model; returns {model: figures}.

    Args:
      models: names in MODELS.
      repeats: see bench_model.
      iterations_b1: see bench_model.
      iterations_b32: see bench_model.
      warmup: see bench_model.
      keep_dir: export into this folder and keep the files (None: a temporary folder, removed).
      log: progress messages.
      roofline: how to measure the machine's bounds (None: the defaults).
      peer: a name in PEERS to time beside the runtime, or None.

    Returns:
      The figures of each model, by name.

    Raises:
      BenchError: a name is not in MODELS or PEERS, or a step failed.
    """
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise BenchError(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if peer is not None and peer not in PEERS:
        raise BenchError(f"unknown peer '{peer}'; choose from {', '.join(PEERS)}")
    log("measuring the machine's bounds (bench/roofline), before the models")
    machine_before = measure_machine(roofline or RooflineOptions())
    root = keep_dir or tempfile.mkdtemp(prefix="edgeshare_bench_")
    try:
        results = {}
        for name in models:
            model = MODELS[name]()
            results[name] = bench_model(
                model, os.path.join(root, name), repeats, iterations_b1, iterations_b32, warmup, log, peer
            )
            del model
        log("measuring the machine's bounds again, after the models, at each model's weight size")
        add_bounds(results, roofline or RooflineOptions(), machine_before)
        return results
    finally:
        if keep_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def _user_path(path: str) -> str:
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    return path if os.path.isabs(path) else os.path.join(base, path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lora", description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--models", default="demo,reference", help="comma-separated: demo, reference")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per configuration")
    parser.add_argument("--iterations", type=int, default=50, help="timed runs at T=1")
    parser.add_argument("--iterations-b32", type=int, default=None, help="timed runs at T=32 (default per model)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    parser.add_argument("--keep", default=None, help="export into this folder and keep the files")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    parser.add_argument(
        "--peer",
        default=None,
        choices=sorted(PEERS),
        help="also time this peer runtime, interleaved (its own venv, made on first use)",
    )
    parser.add_argument(
        "--roofline-read-mib",
        type=int,
        default=RooflineOptions.read_mib,
        help="MiB summed for the read bandwidth (keep it well past the LLC)",
    )
    parser.add_argument(
        "--roofline-fc-iterations",
        type=int,
        default=RooflineOptions.fc_iterations,
        help="fully connected runs for the in-cache GFLOP/s",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the benchmark; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.iterations < 1 or (args.iterations_b32 is not None and args.iterations_b32 < 1):
        parser.error("--repeats, --iterations and --iterations-b32 must be at least 1")
    if args.roofline_read_mib < 1 or args.roofline_fc_iterations < 1:
        parser.error("--roofline-read-mib and --roofline-fc-iterations must be at least 1")
    roofline = RooflineOptions(read_mib=args.roofline_read_mib, fc_iterations=args.roofline_fc_iterations)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    models = [m.strip() for m in args.models.split(",") if m.strip()]

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    start = time.perf_counter()
    try:
        results = run_bench(
            models,
            args.repeats,
            args.iterations,
            args.iterations_b32,
            args.warmup,
            _user_path(args.keep) if args.keep else None,
            log,
            roofline,
            args.peer,
        )
    except (BenchError, ValueError, TypeError) as e:
        print(f"lora: error: {e}", file=sys.stderr)
        return 1
    log(f"done in {time.perf_counter() - start:.0f} s")
    print(format_table(results))
    print(format_verification(results))
    text = to_json(results)
    print(text)
    if args.json:
        with open(_user_path(args.json), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
