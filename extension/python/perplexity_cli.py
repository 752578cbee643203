"""edgeshare-perplexity (and //tools:perplexity): a program's perplexity over a text, and its KL
divergence from a reference program, as llama.cpp's llama-perplexity reports them.

    edgeshare-perplexity --data out/foundation.ptd --program out/a.pte [--program out/b.pte ...] \\
        --text wiki.test.raw [--tokenizer DIR] [--ctx N] [--stride N] [--method forward] \\
        [--kl-divergence ref/foundation.pte [--kl-data ref/foundation.ptd]...] [--max-tokens N] \\
        [--threads N] [--json FILE|-] [--no-progress]

The text (UTF-8) is encoded with the tokenizer of the first program's folder (or --tokenizer DIR), as
transformers' tokenizer(text) does, and scored in windows of --ctx tokens (default: the method's
bound, the export's --max-seq-len) starting every --stride tokens (default --ctx), as Hugging Face's
strided perplexity does (perplexity.py says which tokens each window scores). Each program prints one
line: its perplexity with llama-perplexity's standard error, the tokens scored and the windows, and
with --kl-divergence the mean KL(reference || program) with its standard error, the largest and the
99th percentile, top-1 agreement and the reference's perplexity. --json writes the same as one object
({"text_tokens", "method", "reference", "results": [{"program", "ctx", "stride", "perplexity", ...}]}),
to stdout with "-" (then stdout holds the JSON alone). A progress bar runs on stderr when it is a
terminal (--no-progress: none). A wrong flag is one line on stderr and exit status 2; a file or
program that cannot be used, one line and exit status 1; no --json file is written either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import Any, Dict, List, NoReturn, Optional, Sequence

import numpy as np
from edgeshare.extension.python._cli import run_reporting
from edgeshare.extension.python._errors import EdgeshareError
from edgeshare.extension.python.perplexity import PerplexityResult, program_perplexity
from edgeshare.extension.python.runtime import DataFile, Program
from edgeshare.extension.python.text import MissingTextPackage

__all__ = ["main"]

PROG = "edgeshare-perplexity"


class _UsageError(ValueError):
    """A flag's value is wrong; the message names the flag."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (--help lists the flags)")


def _integer_in(low: int, high: Optional[int] = None):
    """An argparse type: a whole decimal integer in [low, high] ("3.7" is refused, not truncated)."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer")
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is less than {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is more than {high}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--program", action="append", required=True, help="a .pte to score; repeat for more")
    parser.add_argument("--data", action="append", default=[], help="a .ptd data file the programs load against")
    parser.add_argument("--text", required=True, help="a UTF-8 text file to score")
    parser.add_argument("--tokenizer", help="the folder of tokenizer.json or tokenizer.model (default: the first "
                        "program's folder)")
    parser.add_argument("--ctx", type=_integer_in(2), help="tokens per window (default: the method's bound, "
                        "the export's --max-seq-len)")
    parser.add_argument("--stride", type=_integer_in(1), help="tokens between window starts, at most --ctx "
                        "(default --ctx: disjoint windows); a smaller stride gives each scored token more context")
    parser.add_argument("--method", default="forward", help="the method of token ids [1, T] -> logits [1, T, vocab]")
    parser.add_argument("--kl-divergence", metavar="REF.pte", help="a reference program of the same vocabulary: "
                        "report KL(reference || program) and top-1 agreement, window by window")
    parser.add_argument("--kl-data", action="append", metavar="F.ptd", help="a data file the reference loads "
                        "against; repeat (default: the --data files)")
    parser.add_argument("--max-tokens", type=_integer_in(2), help="score only the text's first N tokens")
    parser.add_argument(
        "--threads", type=_integer_in(1, 256), default=1, help="threads each program's methods split their work across"
    )
    parser.add_argument("--json", help='write the results as JSON to this file ("-": stdout)')
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _check_json_path(path: Optional[str]) -> None:
    """Refuses a --json path whose folder does not exist before anything is scored."""
    if path is None or path == "-":
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OSError(f"--json {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise OSError(f"--json {path} is a folder")


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"--text {path} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise OSError(f"--text {path}: {e.strerror or e}") from None


def _token_ids(args: argparse.Namespace) -> np.ndarray:
    """The text's token ids, from the tokenizer of --tokenizer or of the first program's folder."""
    text = _read_text(args.text)
    folder = args.tokenizer or os.path.dirname(os.path.abspath(args.program[0]))
    try:
        from edgeshare.extension.python.text import Tokenizer  # noqa: PLC0415 (tokenizers is optional)

        tokenizer = Tokenizer.from_folder(folder)
    except ModuleNotFoundError as e:
        raise ValueError(f"{e.name} is not installed; text comes with the wheel's [text] extra") from None
    if tokenizer is None:
        where = "--tokenizer" if args.tokenizer else f"the folder of --program {args.program[0]}"
        raise ValueError(f"there is no tokenizer.json or tokenizer.model in {where} ({folder}); give --tokenizer DIR")
    ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
    if args.max_tokens is not None:
        ids = ids[: args.max_tokens]
    if ids.size < 2:
        raise ValueError(f"--text {args.text} has {ids.size} token{'s' if ids.size != 1 else ''}; perplexity needs "
                         "at least 2")
    return ids


def _line(path: str, entry: Dict[str, Any], reference: Optional[str]) -> str:
    line = (f"{path}: PPL = {entry['perplexity']:.4f} +/- {entry['perplexity_stderr']:.4f} over "
            f"{entry['tokens_scored']} tokens ({entry['windows']} windows of {entry['ctx']}, stride {entry['stride']})")
    if reference is not None:
        line += (f"; KL(ref || this) = {entry['kl_divergence']:.6f} +/- {entry['kl_divergence_stderr']:.6f}, "
                 f"max {entry['kl_divergence_max']:.6f}, p99 {entry['kl_divergence_p99']:.6f}; "
                 f"top-1 agreement {100 * entry['top1_agreement']:.2f}%; reference PPL = "
                 f"{entry['reference_perplexity']:.4f}")
    return line


def _run(args: argparse.Namespace) -> int:
    if args.ctx is not None and args.stride is not None and args.stride > args.ctx:
        raise _UsageError(f"--stride {args.stride} is more than --ctx {args.ctx}")
    if args.kl_data is not None and args.kl_divergence is None:
        raise _UsageError("--kl-data goes with --kl-divergence REF.pte")
    _check_json_path(args.json)
    ids = _token_ids(args)
    data = [DataFile.open(path) for path in args.data]
    methods = [args.method]
    reference: Optional[Program] = None
    if args.kl_divergence is not None:
        kl_data = data if args.kl_data is None else [DataFile.open(path) for path in args.kl_data]
        reference = Program.load(args.kl_divergence, kl_data, methods=methods, threads=args.threads)
    progress = not args.no_progress and sys.stderr.isatty()
    results: List[Dict[str, Any]] = []
    for path in args.program:
        program = Program.load(path, data, methods=methods, threads=args.threads)
        result: PerplexityResult = program_perplexity(program, ids, ctx=args.ctx, stride=args.stride,
                                                      method=args.method, reference=reference, progress=progress)
        ctx = args.ctx if args.ctx is not None else program.method(args.method).inputs[0].shape[-1]
        entry = {"program": path, "ctx": ctx, "stride": args.stride or ctx, **dataclasses.asdict(result)}
        if args.json != "-":
            print(_line(path, entry, args.kl_divergence), flush=True)
        results.append(entry)
        del program  # one program's memory at a time
    report = {"text_tokens": int(ids.size), "method": args.method, "reference": args.kl_divergence,
              "results": results}
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.json is not None:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs edgeshare-perplexity.

    Args:
      argv: the flags (sys.argv[1:] when None).

    Returns:
      The exit status: 0; 2 after one "edgeshare-perplexity: error: ..." line on stderr for a wrong
      flag, 1 after one such line for a file or program that cannot be used; 130 after Ctrl-C, 1
      when stdout is closed early (no traceback either way).
    """

    return run_reporting(
        PROG,
        lambda: _run(_parser().parse_args(argv)),
        errors=(EdgeshareError, MissingTextPackage, TypeError, ValueError),
        usage_errors=(_UsageError,),
    )

if __name__ == "__main__":
    sys.exit(main())
