"""batch_quality: what the batch program's adapter tables cost in quality, on the real model and text.

    ./bazelw run -c opt //bench:batch_quality -- [--tables fp32,fp16,int8] [--quantize none]
        [--kv-dtype fp32|fp16] [--windows 8] [--threads 2] [--cache DIR] [--work DIR] [--markdown FILE]

The model, its trained adapter and the text are bench/real_model.py's (SmolLM2-135M-Instruct, LoRA r16
on q/k/v/o fine-tuned on "The Adventures of Sherlock Holmes", its held-out end), as bench/quality
uses them. For each table type the model is exported as a batch program (exir.export_hf_batch, one
slot of 512 positions, the adapter in adapter slot 0, --quantize's foundation), and every window of
512 held-out tokens runs through forward_batch as one sequence on that adapter, 64 rows a step.
Each row reports the perplexity, its increase over the fp32 tables', the mean KL divergence from
the fp32 tables' logits and the share of positions whose top-1 token is theirs, and the adapter
file's bytes. --kv-dtype fp16 adds a row per table type whose batch program keeps its KV cache in
half precision, against the same reference (fp32 tables, float cache). The fp32 tables'
perplexity is also checked against the adapter's own program (exir.export_hf_lora, the same
foundation): the batch method and the program agree (agreement()).
"""

import argparse
import dataclasses
import math
import os
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench.real_model import FetchError, prepare
from edgeshare.exir.hf import export_hf_batch, export_hf_lora
from edgeshare.exir.hf_batch import TABLE_DTYPES
from edgeshare.extension.python import DataFile, Program, set_num_threads
from edgeshare.extension.python.perplexity import score

__all__ = ["AGREE_KL", "CTX", "ROWS", "Row", "agreement", "batch_logits", "format_markdown", "main"]

CTX = 512
ROWS = 64
# Mean KL divergence (nats) from the fp32 tables' logits within which the adapter's own program
# agrees with the batch method over a quantized foundation. The two run other kernels for the
# low-rank products and attention, whose float sums round otherwise; a quantized foundation
# quantizes every activation row, and one rounding step's difference re-draws that quantization's
# noise in the layers after it. The same computation rounded otherwise lands well below the bound
# and a missing or wrong adapter far above it (docs/batching.md, the seventh pass, measures both).
AGREE_KL = 1e-2
# Over the fp32 foundation nothing re-draws: the perplexities agree to float rounding.
AGREE_PPL_FP32 = 1e-3
ADAPTER = "sherlock"

Logits = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Row:
    """One table type's figures over the same windows."""

    tables: str
    perplexity: float
    increase_pct: float
    kl_divergence: Optional[float]
    top1_agreement: Optional[float]
    adapter_bytes: int
    tokens_scored: int


def batch_logits(out_dir: str) -> Logits:
    """A window [1, T] (T <= CTX) through out_dir's forward_batch as one sequence in slot 0 on
    adapter slot 0, ROWS rows a step, every row's logits kept -> [1, T, vocab]."""
    files = [os.path.join(out_dir, "foundation.ptd"), os.path.join(out_dir, "batch_tables.ptd")]
    method = Program.load(os.path.join(out_dir, "batch.pte"), files).method("forward_batch")

    def run(window: np.ndarray) -> np.ndarray:
        ids = np.asarray(window, dtype=np.int64).reshape(-1)
        parts: List[np.ndarray] = []
        for first in range(0, ids.size, ROWS):
            rows = ids[first : first + ROWS]
            n = rows.size
            positions = np.arange(first, first + n, dtype=np.int64)
            inputs = (
                rows.reshape(1, n),
                positions,
                np.zeros(n, dtype=np.int64),
                np.zeros(n, dtype=np.int64),
                np.arange(n, dtype=np.int64),
            )
            parts.append(np.array(method.execute(*inputs)[0][0], copy=True))
        return np.concatenate(parts, axis=0)[None]

    return run


def _remembered(fn: Logits) -> Logits:
    seen: Dict[bytes, np.ndarray] = {}

    def run(window: np.ndarray) -> np.ndarray:
        key = window.tobytes()
        if key not in seen:
            seen[key] = fn(window)
        return seen[key]

    return run


def agreement(quantize: str, tables_ppl: float, program_ppl: float, program_kl: float) -> Optional[str]:
    """None when the adapter's own program (perplexity program_ppl, mean KL program_kl from the fp32
    tables' logits) agrees with the batch method's fp32 tables (tables_ppl) over a `quantize`
    foundation, else the line that says how they differ."""
    if not math.isfinite(program_kl) or program_kl > AGREE_KL:
        return (
            f"the adapter's own program is {program_kl:.3e} (mean KL) from the fp32 tables' logits, past {AGREE_KL:.0e}"
        )
    if quantize == "none" and not math.isclose(program_ppl, tables_ppl, rel_tol=AGREE_PPL_FP32):
        return f"the fp32 tables' perplexity {tables_ppl:.4f} is not the program's {program_ppl:.4f}"
    return None


def format_markdown(rows: Sequence[Row], program_perplexity: float, program_kl: Optional[float] = None) -> str:
    lines = [
        "| tables | perplexity | vs fp32 tables | KL vs fp32 tables | top-1 agreement | adapter file bytes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        kl = "" if r.kl_divergence is None else f"{r.kl_divergence:.2e}"
        top1 = "" if r.top1_agreement is None else f"{100 * r.top1_agreement:.2f}%"
        lines.append(
            f"| {r.tables} | {r.perplexity:.3f} | {r.increase_pct:+.4f}% | {kl} | {top1} | {r.adapter_bytes:,} |"
        )
    lines.append("")
    kl = "" if program_kl is None else f", KL {program_kl:.2e} from the fp32 tables"
    lines.append(f"The adapter's own program over the same foundation: perplexity {program_perplexity:.3f}{kl}.")
    return "\n".join(lines) + "\n"


def _names(text: str) -> List[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in TABLE_DTYPES]
    if not names or unknown or "fp32" not in names:
        raise SystemExit(f"batch_quality: --tables takes fp32 and any of {', '.join(TABLE_DTYPES)}, got '{text}'")
    return ["fp32", *[n for n in names if n != "fp32"]]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="batch_quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="fp32,fp16,int8", help="table types, fp32 included (the reference)")
    parser.add_argument("--quantize", default="none", choices=("none", "int8", "int4"), help="the foundation's")
    parser.add_argument("--kv-dtype", default="fp32", choices=("fp32", "fp16"), help="also rows on a half cache")
    parser.add_argument("--windows", type=int, default=8, help="disjoint windows of 512 held-out tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", help="bench/real_model's cache folder")
    parser.add_argument("--work", help="keep the exports here (reused when complete)")
    parser.add_argument("--markdown", help="also write the table here")
    args = parser.parse_args(argv)
    tables = _names(args.tables)
    if args.windows < 1 or args.threads < 1:
        raise SystemExit("batch_quality: --windows and --threads must be at least 1")
    set_num_threads(args.threads)
    try:
        files = prepare(args.cache, rotated=False, log=lambda m: print(m, file=sys.stderr))
    except FetchError as e:
        raise SystemExit(f"batch_quality: {e}") from None
    if len(files.held_out_ids) < args.windows * CTX:
        raise SystemExit(f"batch_quality: {args.windows} windows of {CTX} need {args.windows * CTX} held-out tokens")
    ids = np.asarray(files.held_out_ids, dtype=np.int64)[: args.windows * CTX]
    work = args.work or tempfile.mkdtemp(prefix="batch_quality-")
    rows: List[Row] = []
    reference: Optional[Logits] = None
    base = float("nan")
    # The reference (fp32 tables, float cache) first; a half cache's rows after every float one.
    configs = [(name, False) for name in tables] + [(name, True) for name in tables if args.kv_dtype == "fp16"]
    for name, half_cache in configs:
        label = f"{name}, fp16 cache" if half_cache else name
        out = os.path.join(work, f"{args.quantize}-{name}{'-kv16' if half_cache else ''}")
        if not os.path.exists(os.path.join(out, "batch.json")):
            print(f"[batch_quality] exporting {label} tables", file=sys.stderr)
            export_hf_batch(
                files.model_dir,
                {ADAPTER: files.adapter_dir},
                out,
                slots=1,
                max_seq_len=CTX,
                max_rows=ROWS,
                partitioner=XnnpackPartitioner(quantize=args.quantize),
                table_dtype=TABLE_DTYPES[name],
                kv_dtype=torch.float16 if half_cache else None,
            )
        logits = batch_logits(out)
        first = reference is None
        if first:
            reference = _remembered(logits)
        result = score(ids, CTX, reference if first else logits, reference=None if first else reference)
        if first:
            base = result.perplexity
        rows.append(
            Row(
                label,
                result.perplexity,
                100.0 * (result.perplexity / base - 1.0),
                result.kl_divergence,
                result.top1_agreement,
                os.path.getsize(os.path.join(out, f"{ADAPTER}.ptd")),
                result.tokens_scored,
            )
        )
    lora = os.path.join(work, f"{args.quantize}-program")
    if not os.path.exists(os.path.join(lora, f"{ADAPTER}.pte")):
        export_hf_lora(
            files.model_dir, {ADAPTER: files.adapter_dir}, lora, CTX, XnnpackPartitioner(quantize=args.quantize)
        )
    program = Program.load(
        os.path.join(lora, f"{ADAPTER}.pte"), [DataFile.open(os.path.join(lora, "foundation.ptd"))], methods=["forward"]
    )
    forward = program.method("forward")
    own = score(ids, CTX, lambda window: forward.execute(window)[0], reference=reference)
    program_kl = float("nan") if own.kl_divergence is None else own.kl_divergence
    differs = agreement(args.quantize, base, own.perplexity, program_kl)
    if differs is not None:
        print(f"batch_quality: {differs}", file=sys.stderr)
        return 1
    text = format_markdown(rows, own.perplexity, program_kl)
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
