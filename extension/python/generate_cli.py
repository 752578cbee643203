"""edgeshare-generate: greedy generation from the command line, token ids in and out, in Python.

    edgeshare-generate --data out/foundation.ptd --program out/a.pte --program out/b.pte \\
        --prompt-ids prompt.npy --max-new-tokens 32 [--json tokens.json] [--eos-id N] \\
        [--method forward_cached] [--threads N] [--no-share] [--no-verify] [--swap-adapter X.ptd]...

The flags, the checks and the JSON are those of //tools:generate (the C++ tool): the prompt is an
int64 .npy of shape [P] or [1, P]; --json writes {"tokens", "prefill_ms", "decode_tokens_per_s"}
for one program, one such object per program name for several, and "swaps" in order with
--swap-adapter. Every error is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Dict, List, NoReturn, Optional, Sequence

from edgeshare.extension.python._errors import EdgeshareError
from edgeshare.extension.python.npy_file import NpyFileError, load_npy
from edgeshare.extension.python.runtime import (
    DataFile,
    Program,
    set_num_threads,
    set_verify_content,
    set_weight_sharing,
)

__all__ = ["main"]

PROG = "edgeshare-generate"


class _UsageError(ValueError):
    """A flag's value is wrong; the message names the flag."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (--help lists the flags)")


def _integer_in(low: int, high: int):
    """An argparse type: a whole decimal integer in [low, high] ("3.7" is refused, not truncated)."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--program", action="append", required=True, help="a .pte to load; repeat for more")
    parser.add_argument("--data", action="append", default=[], help="a .ptd data file the programs load against")
    parser.add_argument("--prompt-ids", required=True, help="int64 .npy of prompt token ids, [P] or [1, P]")
    parser.add_argument("--max-new-tokens", type=_integer_in(0, 1000000), default=32, help="tokens to generate")
    parser.add_argument("--eos-id", type=_integer_in(0, 2**63 - 1), help="stop after this token (default: never)")
    parser.add_argument("--method", default="forward_cached", help="the stateful method to generate with")
    parser.add_argument("--json", help="write tokens, prefill_ms and decode_tokens_per_s")
    parser.add_argument("--threads", type=_integer_in(1, 256), default=1, help="threads of the delegate's operators")
    parser.add_argument("--no-share", action="store_true", help="turn the weights cache's sharing off")
    parser.add_argument("--no-verify", action="store_true", help="trust the data files: do not hash fetched bytes")
    parser.add_argument("--swap-adapter", action="append", default=[], help="an adapter .ptd to bind next; repeat")
    return parser


def _name(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _check_unique_names(paths: Sequence[str]) -> None:
    seen: Dict[str, str] = {}
    for path in paths:
        if _name(path) in seen:
            raise _UsageError(
                f"--program {seen[_name(path)]} and --program {path} are both named {_name(path)!r}; "
                "--json keys programs by file name (rename or copy one)"
            )
        seen[_name(path)] = path


def _generate(program: Program, label: str, args: argparse.Namespace, prompt: Any) -> Dict[str, Any]:
    out = program.method(args.method).generate(prompt, args.max_new_tokens, eos_id=args.eos_id)
    print(f"{label}: {' '.join(map(str, out.tokens))}")
    print(f"  prefill {out.prefill_ms:.3f} ms ({prompt.size} tokens), decode {out.decode_tokens_per_s:.1f} tokens/s")
    return {"tokens": out.tokens, "prefill_ms": out.prefill_ms, "decode_tokens_per_s": out.decode_tokens_per_s}


def _run(args: argparse.Namespace) -> None:
    if args.json:
        _check_unique_names(args.program)
    set_weight_sharing(not args.no_share)
    set_verify_content(not args.no_verify)
    set_num_threads(args.threads)
    prompt = load_npy(args.prompt_ids)
    data = [DataFile.open(path) for path in args.data]
    programs = [Program.load(path, data) for path in args.program]
    by_program = {_name(p.path): _generate(p, _name(p.path), args, prompt) for p in programs}
    swaps: List[Dict[str, Any]] = []
    for path in args.swap_adapter:
        adapter = DataFile.open(path)
        taken = False
        for program in programs:
            try:
                program.bind_adapter(adapter)
            except EdgeshareError as e:
                if e.code != "NotFound":  # NotFound: this program reads no swappable weight.
                    raise
                continue
            taken = True
            entry = _generate(program, f"{_name(program.path)}@{path}", args, prompt)
            swaps.append({**entry, "adapter": path, "program": _name(program.path)})
        if not taken:
            raise _UsageError(
                f"--swap-adapter {path}: no program loaded reads swappable weights (export with --swappable)"
            )
    if args.json:
        result: Dict[str, Any] = dict(next(iter(by_program.values()))) if len(programs) == 1 else by_program
        if args.swap_adapter:
            result["swaps"] = swaps
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs edgeshare-generate.

    Args:
      argv: the flags (sys.argv[1:] when None).

    Returns:
      The exit status: 0, or 1 after one "edgeshare-generate: error: ..." line on stderr.
    """
    try:
        _run(_parser().parse_args(argv))
    except (EdgeshareError, NpyFileError, _UsageError, TypeError, OSError) as e:
        print(f"{PROG}: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
