"""./bazelw run -c opt //bench:batch: many sequences on many adapters in one pass, against one at a time.

The tiny-LLM bench's model (bench/_llm_model.py: Llama 4 layers, hidden 1024, vocab 32000) with 8
PEFT LoRA adapters (r16 on q,k,v,o), or the SmolLM2-135M shape (--model smollm2: 30 layers, hidden
576, seeded weights), exported twice per format: export_hf_batch (8 slots, 8 adapter slots) and
export_hf_lora (adapter1's own program over the same foundation.ptd). Each case is a fresh
bench/batch_runner process: 1, 2, 4 and 8 sequences at once, on as many different adapters and on
no adapter, and adapter1's program generating alone (edgeshare's one-at-a-time figure), repeated
--repeats times interleaved; the table gives medians: aggregate decode tokens/s, its ratio to one
at a time, time to first token, and VmRSS with everything loaded beside the budget (foundation.ptd
and the 8 adapter files, the slots' KV cache, and 64 MiB). A second table gives the 8-sequence
lines: 8 on 8 adapters against one at a time (>= 4x) and against 8 on no adapter (within 15%), and
the largest RSS against the budget, each with whether it holds.

--llamacpp adds llama.cpp's batched decode of 1, 2, 4 and 8 sequences (llama-batched-bench, built
from the peer's vendored llama.cpp; the model converted to Q8_0, Q4_0 or F32 with its converters),
run once per repeat after the cases: rows "llama.cpp N one adapter", their ratio to llama.cpp's own
one sequence. It loads no adapter, so the figure is the model with one adapter merged, the best
llama.cpp does on one adapter (bench/_batch_llamacpp.py).

--runner LABEL=PATH (repeatable) runs every case with each of several batch_runner builds (a kernel
change's before and after), interleaved within each repeat over the same exported files; each
build's rows carry its label and their own one-at-a-time figure.

    ./bazelw run -c opt //bench:batch -- --formats int8,int4 --threads 2 [--model smollm2]
        [--adapter-dtype fp16|fp32|int8] [--kv-dtype fp32|fp16]
        [--runner before=/tmp/batch_runner --runner after=...] [--llamacpp] [--work DIR] [--json F]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._batch_llamacpp import GGUF_FORMATS, prepare_llamacpp
from edgeshare.bench._llm_model import LlmSpec, save_llm
from edgeshare.exir import export_hf_batch, export_hf_lora
from edgeshare.exir.hf_batch import TABLE_DTYPES

SEQUENCES = (1, 2, 4, 8)
KV_DTYPES = {"fp32": None, "fp16": torch.float16}
MODELS = {
    "bench": LlmSpec(),
    "smollm2": LlmSpec(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, vocab=49152, tied=True),
}


def _runner() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "batch_runner")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: depend on //bench:batch_runner")
    return path


def _run(runner: str, args: Sequence[str]) -> Dict[str, Any]:
    proc = subprocess.run([runner, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"batch_runner {' '.join(args)}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _size_mib(*paths: str) -> float:
    return sum(os.path.getsize(p) for p in paths) / 2**20


def measure(
    work: str,
    model: str,
    quantize: str,
    threads: int,
    repeats: int,
    prompt_len: int,
    new_tokens: int,
    adapter_dtype: str = "fp16",
    runners: Optional[Sequence[Tuple[str, str]]] = None,
    llamacpp: bool = False,
    kv_dtype: str = "fp32",
) -> List[Dict[str, Any]]:
    """Exports one format and runs every case `repeats` times interleaved -> one row per case.

    `runners`: (label, batch_runner path) pairs, each running every case (default: the bundled
    runner, unlabelled) -> one row per runner and case. `llamacpp`: llama-batched-bench on the
    format's GGUF twin runs once per repeat too, after the cases -> a "llama.cpp N one adapter"
    row per batch size (bench/_batch_llamacpp.py). `kv_dtype`: the KV cache's element type in both
    the batch program and the one-at-a-time program (fp32 or fp16). `adapter_dtype`: how both
    store the adapters: the batch program's tables, and the one-at-a-time program's adapter
    weights (XnnpackPartitioner(adapter_dtype=...)), so that "x one at a time" compares like with
    like.
    """
    runners = list(runners) if runners else [("", _runner())]
    spec = MODELS[model]
    files = save_llm(spec, os.path.join(work, "model"))
    batch = os.path.join(work, f"batch-{quantize}")
    # The adapter type in the name: a --work folder of an older bench kept fp32 adapter weights here.
    lora = os.path.join(work, f"lora-{quantize}-{adapter_dtype}")
    foundation_quantize = None if quantize == "fp32" else quantize
    part = XnnpackPartitioner(quantize=foundation_quantize)
    first = next(iter(files.adapter_dirs))
    # A --work folder keeps its exports: a folder with its manifest (the last file written) is reused.
    if not os.path.exists(os.path.join(batch, "batch.json")):
        print(f"[batch] exporting {model} {quantize}", file=sys.stderr, flush=True)
        export_hf_batch(
            files.model_dir,
            files.adapter_dirs,
            batch,
            slots=8,
            max_seq_len=spec.max_seq_len,
            max_rows=64,
            partitioner=part,
            table_dtype=TABLE_DTYPES[adapter_dtype],
            kv_dtype=KV_DTYPES[kv_dtype],
        )
    if not os.path.exists(os.path.join(lora, f"{first}.pte")):
        export_hf_lora(
            files.model_dir,
            {first: files.adapter_dirs[first]},
            lora,
            spec.max_seq_len,
            XnnpackPartitioner(quantize=foundation_quantize, adapter_dtype=adapter_dtype),
            kv_dtype=KV_DTYPES[kv_dtype],
        )
    common = [
        "--dir",
        batch,
        "--threads",
        str(threads),
        "--prompt-len",
        str(prompt_len),
        "--new-tokens",
        str(new_tokens),
    ]
    cases: Dict[str, List[str]] = {"alone": ["--single", os.path.join(lora, f"{first}.pte")]}
    for n in SEQUENCES:
        cases[f"{n} adapters"] = ["--sequences", str(n)]
        cases[f"{n} none"] = ["--sequences", str(n), "--no-adapters"]
    peer = (
        prepare_llamacpp(files, work, quantize, spec.max_seq_len, prompt_len, new_tokens, SEQUENCES, threads, _say)
        if llamacpp
        else None
    )
    peer_runs: List[Dict[int, float]] = []
    samples: Dict[Tuple[str, str], List[Dict[str, Any]]] = {
        (label, name): [] for label, _ in runners for name in cases
    }
    for r in range(repeats):
        print(f"[batch] {model} {quantize}: repeat {r + 1} of {repeats}", file=sys.stderr, flush=True)
        for name, args in cases.items():
            for label, runner in runners:
                samples[(label, name)].append(_run(runner, common + args))
        if peer is not None:
            peer_runs.append(peer.run(r))
    alone = {
        label: statistics.median(s["decode_tokens_per_s"] for s in samples[(label, "alone")])
        for label, _ in runners
    }
    adapter_files = [os.path.join(batch, f"{n}.ptd") for n in files.adapter_dirs]
    files_mib = _size_mib(os.path.join(batch, "foundation.ptd"), *adapter_files)
    # The slots' KV cache (keys and values of every layer at the cache's element size), and the
    # issue's budget: the files plus the cache plus 64 MiB.
    head_dim = spec.hidden // spec.heads
    element = (KV_DTYPES[kv_dtype] or torch.float32).itemsize
    cache_mib = 8 * spec.max_seq_len * spec.layers * 2 * spec.kv_heads * head_dim * element / 2**20
    budget_mib = files_mib + cache_mib + 64
    rows = []
    for (label, name), runs in samples.items():
        tps = statistics.median(s["decode_tokens_per_s"] for s in runs)
        rows.append(
            {
                "runner": label,
                "model": model,
                "format": quantize,
                "adapter_dtype": adapter_dtype,
                "kv_dtype": kv_dtype,
                "case": name,
                "threads": threads,
                "decode_tokens_per_s": tps,
                "vs_alone": tps / alone[label] if alone[label] else 0.0,
                "ttft_ms": statistics.median(s["ttft_ms"] for s in runs),
                "rss_mib": statistics.median(s["rss_kib"] for s in runs) / 1024,
                "files_mib": files_mib,
                "budget_mib": budget_mib,
            }
        )
    if peer_runs:
        rows += llamacpp_rows(model, quantize, threads, peer_runs)
    return rows


def llamacpp_rows(model: str, quantize: str, threads: int, runs: Sequence[Dict[int, float]]) -> List[Dict[str, Any]]:
    """llama-batched-bench's repeats (S_TG per batch size) -> a row per batch size: the median
    decode tokens/s and its ratio to llama.cpp's own one-sequence median (not edgeshare's alone)."""
    one = statistics.median(run[1] for run in runs)
    rows = []
    for n in SEQUENCES:
        tps = statistics.median(run[n] for run in runs)
        rows.append(
            {
                "runner": "",
                "model": model,
                "format": GGUF_FORMATS[quantize],
                "adapter_dtype": None,
                # llama-batched-bench's own default cache type (-ctk/-ctv f16).
                "kv_dtype": "fp16",
                "case": f"llama.cpp {n} one adapter",
                "threads": threads,
                "decode_tokens_per_s": tps,
                "vs_alone": tps / one if one else 0.0,
                "ttft_ms": None,
                "rss_mib": None,
                "files_mib": None,
                "budget_mib": None,
            }
        )
    return rows


def _cell(value: Any, digits: int = 1) -> str:
    """A table cell: a float to `digits` decimals, None (not measured) empty."""
    if value is None:
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _table(columns: Sequence[str], body: Sequence[Sequence[str]], runners: Sequence[str]) -> str:
    """A markdown table of `columns` over `body`'s cells, with a leading runner column (`runners`,
    one per body row) when any row names its runner (several builds compared)."""
    labelled = any(runners)
    head = (["runner"] if labelled else []) + list(columns)
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for runner, cells in zip(runners, body):
        lines.append("| " + " | ".join(([runner] if labelled else []) + list(cells)) + " |")
    return "\n".join(lines)


def markdown(rows: List[Dict[str, Any]]) -> str:
    columns = ["model", "format", "adapters", "KV", "case", "decode tokens/s", "x one at a time", "TTFT ms"]
    columns += ["RSS MiB", "files + KV cache + 64 MiB"]
    body = [
        [
            r["model"],
            r["format"],
            _cell(r["adapter_dtype"]),
            _cell(r.get("kv_dtype")),
            r["case"],
            _cell(r["decode_tokens_per_s"]),
            _cell(r["vs_alone"], 2),
            _cell(r["ttft_ms"]),
            _cell(r["rss_mib"]),
            _cell(r["budget_mib"]),
        ]
        for r in rows
    ]
    return _table(columns, body, [r.get("runner") or "" for r in rows])


# The lines for 8 sequences on 8 adapters: aggregate decode at least 4x one at a time, and
# (with fp16 tables) within 15% of the same 8 sequences on no adapter; RSS within the budget.
LINE_X_ONE_AT_A_TIME = 4.0
LINE_X_NO_ADAPTER = 0.85


def lines(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows' 8-sequence lines, one per (runner, model, format, tables, cache) measured.

    Each gives "8 on 8 adapters" over "alone" (x_one_at_a_time), over "8 none" (x_no_adapter), and
    the largest RSS of any case against the budget. Cases it lacks (llama.cpp's rows, or a run
    without the 8-sequence cases) leave it out.
    """
    groups: Dict[Tuple[Any, ...], Dict[str, Dict[str, Any]]] = {}
    for r in rows:
        key = (r["runner"], r["model"], r["format"], r["adapter_dtype"], r.get("kv_dtype"))
        groups.setdefault(key, {})[r["case"]] = r
    out = []
    for (runner, model, fmt, tables, kv), cases in groups.items():
        alone, on8, none8 = cases.get("alone"), cases.get("8 adapters"), cases.get("8 none")
        if alone is None or on8 is None or none8 is None or not alone["decode_tokens_per_s"]:
            continue
        measured = [c for c in cases.values() if c["rss_mib"] is not None]
        rss = max(c["rss_mib"] for c in measured)
        x_one = on8["decode_tokens_per_s"] / alone["decode_tokens_per_s"]
        x_none = on8["decode_tokens_per_s"] / none8["decode_tokens_per_s"] if none8["decode_tokens_per_s"] else 0.0
        out.append(
            {
                "runner": runner,
                "model": model,
                "format": fmt,
                "adapter_dtype": tables,
                "kv_dtype": kv,
                "x_one_at_a_time": x_one,
                "x_no_adapter": x_none,
                "rss_mib": rss,
                "budget_mib": on8["budget_mib"],
                "holds_x_one_at_a_time": x_one >= LINE_X_ONE_AT_A_TIME,
                # The 15% line is the for fp16 tables only: other tables show the ratio alone.
                "holds_x_no_adapter": x_none >= LINE_X_NO_ADAPTER if tables == "fp16" else None,
                "holds_rss": rss <= on8["budget_mib"],
            }
        )
    return out


def lines_markdown(summary: List[Dict[str, Any]]) -> str:
    """lines() as a table: each ratio with whether it holds its line."""

    def held(ok: Optional[bool]) -> str:
        return "" if ok is None else " holds" if ok else " short"

    columns = [
        "model",
        "format",
        "adapters",
        "KV",
        f"8 on 8: x one at a time (>= {LINE_X_ONE_AT_A_TIME:g})",
        f"x no adapter (>= {LINE_X_NO_ADAPTER:g} with fp16 tables)",
        "largest RSS MiB (budget)",
    ]
    body = [
        [
            s["model"],
            s["format"],
            s["adapter_dtype"],
            _cell(s["kv_dtype"]),
            f"{s['x_one_at_a_time']:.2f}{held(s['holds_x_one_at_a_time'])}",
            f"{s['x_no_adapter']:.3f}{held(s['holds_x_no_adapter'])}",
            f"{s['rss_mib']:.0f} ({s['budget_mib']:.0f}){held(s['holds_rss'])}",
        ]
        for s in summary
    ]
    return _table(columns, body, [s["runner"] for s in summary])


def _parse_runners(specs: Sequence[str]) -> List[Tuple[str, str]]:
    """--runner LABEL=PATH values -> (label, path) pairs; ValueError naming the bad one."""
    runners: List[Tuple[str, str]] = []
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise ValueError(f"--runner {spec!r} is not LABEL=PATH")
        if not os.access(path, os.X_OK):
            raise ValueError(f"--runner {label}: {path} is not an executable file")
        if label in (known for known, _ in runners):
            raise ValueError(f"--runner {label} is given twice")
        runners.append((label, path))
    return runners


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", default="int8,int4", help="comma-separated: fp32, int8, int4")
    parser.add_argument("--model", choices=sorted(MODELS), default="bench")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--adapter-dtype", choices=sorted(TABLE_DTYPES), default="fp16", help="the adapter tables'")
    parser.add_argument(
        "--kv-dtype", choices=sorted(KV_DTYPES), default="fp32", help="the KV cache's, in every program"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--llamacpp",
        action="store_true",
        help="also llama.cpp's llama-batched-bench on the format's GGUF (Q8_0, Q4_0, F32): 1, 2, 4, 8 sequences",
    )
    parser.add_argument("--work", help="keep the model and exports here and reuse them (default: a temporary folder)")
    parser.add_argument(
        "--runner",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a batch_runner build to run every case with (repeatable; default: the bundled one)",
    )
    args = parser.parse_args(argv)
    try:
        runners = _parse_runners(args.runner)
    except ValueError as e:
        parser.error(str(e))
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - {"fp32", "int8", "int4"})
    if unknown:
        parser.error(f"--formats: unknown {', '.join(unknown)} (fp32, int8, int4)")
    warnings.filterwarnings("ignore")
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for quantize in formats:
            kv = "" if args.kv_dtype == "fp32" else f"-kv{args.kv_dtype}"
            work = os.path.join(args.work, f"{args.model}-{args.adapter_dtype}{kv}") if args.work else scratch
            os.makedirs(work, exist_ok=True)
            rows += measure(
                work,
                args.model,
                quantize,
                args.threads,
                args.repeats,
                args.prompt_len,
                args.new_tokens,
                args.adapter_dtype,
                runners,
                args.llamacpp,
                args.kv_dtype,
            )
    print(markdown(rows))
    summary = lines(rows)
    if summary:
        print()
        print(lines_markdown(summary))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
