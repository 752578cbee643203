"""edgeshare-generate: generation from the command line, text or token ids in and out, in Python.

    edgeshare-generate --data out/foundation.ptd --program out/a.pte --program out/b.pte \\
        (--prompt TEXT | --chat messages.json | --prompt-ids prompt.npy) --max-new-tokens 32 [--ids] [--json tokens.json] \\
        [--eos-id N]... [--stop TEXT]... [--temperature T --top-k K --top-p P --repetition-penalty R --seed S] \\
        [--verbose] [--method forward_cached] [--threads N] [--no-share] [--no-verify] [--swap-adapter X.ptd]...
    edgeshare-generate --data out/foundation.ptd --program out/a.pte --interactive [--system TEXT]

The flags, the checks and the JSON are those of //tools:generate (the C++ tool, whose sampler this
runs: a seed gives the same tokens): --prompt is encoded with the tokenizer beside the program
(--chat: messages rendered with its chat template, as transformers' apply_chat_template) and the
new text is streamed (--ids prints ids); --prompt-ids is an int64 .npy of shape [P] or
[1, P]; generation stops at --eos-id, or by default at the end tokens of the generation_config.json
beside the program, or once the text holds a --stop TEXT (finish reason "stop"), after
--max-new-tokens or where the sequence reaches the method's length (--max-seq-len, said on stderr
too; finish reason "length"). Sampling without --seed draws a fresh seed and reports it, so --seed
repeats the run. --json writes {"tokens", "prefill_ms", "decode_tokens_per_s", "finish_reason"} (and
"text" with a tokenizer, "seed" when sampling) for one program, one such object per program name
for several, and "swaps" in order with --swap-adapter. --interactive chats on stdin (see
chat_session.py). Every error is one line on stderr and exit status 1; Ctrl-C or a closed pipe ends
it without a traceback.
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
from edgeshare.extension.python.npy_file import NpyFileError, load_npy
from edgeshare.extension.python.runtime import (
    DataFile,
    Program,
    set_verify_content,
    set_weight_sharing,
)
from edgeshare.extension.python.text import MissingTextPackage

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


def _number_in(low: float, high: float):
    """An argparse type: a finite number in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}..{high}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--program", action="append", required=True, help="a .pte to load; repeat for more")
    parser.add_argument("--data", action="append", default=[], help="a .ptd data file the programs load against")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt-ids", help="int64 .npy of prompt token ids, [P] or [1, P]")
    prompt.add_argument("--prompt", help="prompt text (encoded with the tokenizer beside the program)")
    prompt.add_argument("--chat", help='a JSON file of messages ([{"role": "user", "content": "..."}, ...]) '
                        "rendered with the model's chat template")
    prompt.add_argument("--interactive", action="store_true",
                        help="chat on stdin, one line a turn, keeping the KV cache across turns (/reset, /adapter "
                        "NAME, /quit)")
    parser.add_argument("--system", help="--interactive: the system message the conversation starts with")
    parser.add_argument("--ids", action="store_true", help="print token ids rather than text")
    parser.add_argument("--max-new-tokens", type=_integer_in(0, 1000000), default=32,
                        help="tokens to generate at most (fewer where the sequence reaches the length the program "
                        "was exported for, --max-seq-len: finish reason length; default 32)")
    parser.add_argument("--eos-id", type=_integer_in(0, 2**63 - 1), action="append",
                        help="stop after this token; repeat for more (default: generation_config.json's end tokens)")
    parser.add_argument("--temperature", type=_number_in(0.0, 100.0), default=0.0, help="0: greedy; > 0 samples")
    parser.add_argument("--top-k", type=_integer_in(0, 2**31 - 1), default=0, help="sample among the k most probable")
    parser.add_argument("--top-p", type=_number_in(1e-6, 1.0), default=1.0, help="nucleus sampling's p (1: all)")
    parser.add_argument("--repetition-penalty", type=_number_in(1e-6, 1000.0), default=1.0, help="1: none")
    parser.add_argument("--stop", action="append", default=[],
                        help="stop once the text holds this (left out of the text); repeat for more")
    parser.add_argument("--seed", type=_integer_in(0, 2**64 - 1), default=None,
                        help="the sampler's seed (default: a fresh one, reported; a seeded run repeats)")
    parser.add_argument("--verbose", action="store_true", help="say the seed and why generation ended on stderr")
    parser.add_argument("--method", default="forward_cached", help="the stateful method to generate with")
    parser.add_argument("--json", help="write tokens, prefill_ms and decode_tokens_per_s")
    parser.add_argument(
        "--threads", type=_integer_in(1, 256), default=1, help="threads each program's methods split their work across"
    )
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


def _messages(path: str) -> List[Dict[str, Any]]:
    """The chat messages in a JSON file: a list of {"role": str, "content": str}."""
    with open(path, encoding="utf-8") as f:
        try:
            messages = json.load(f)
        except ValueError as e:
            raise _UsageError(f"--chat {path} is not JSON: {e}") from None
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    ):
        raise _UsageError(f'--chat {path} must hold a list of {{"role": ..., "content": ...}} messages')
    return messages


def _generate(program: Program, label: str, args: argparse.Namespace, prompt: Any) -> Dict[str, Any]:
    method = program.method(args.method)
    text = args.prompt is not None or args.chat is not None
    try:
        tokenizer = program.tokenizer if text or not args.ids else None
    except MissingTextPackage as e:
        if text:
            raise
        print(f"{PROG}: warning: {e}", file=sys.stderr)  # ids in, ids out
        tokenizer = None
    if text:
        flag = "--prompt" if args.prompt is not None else "--chat"
        if tokenizer is None:
            raise _UsageError(
                f"{flag}: there is no tokenizer.json or tokenizer.model beside {program.path} (export with a model "
                "directory that has one, or give --prompt-ids)"
            )
        if args.chat is not None:
            prompt = np.asarray(tokenizer.apply_chat_template(_messages(args.chat), tokenize=True), dtype=np.int64)
        else:
            prompt = np.asarray(tokenizer.encode(args.prompt), dtype=np.int64)
        if prompt.size == 0:
            raise _UsageError(f"{flag}: the text has no tokens")
    if args.stop and tokenizer is None:
        raise _UsageError(f"--stop: there is no tokenizer.json or tokenizer.model beside {program.path} to decode "
                          "text with")
    options = _generation_options(args)
    entry: Dict[str, Any]
    if tokenizer is not None and (not args.ids or args.stop):
        if not args.ids:
            print(f"{label}:", flush=True)
        result: List[Any] = []
        for piece in method.stream_text(prompt, args.max_new_tokens, result=result, stop=args.stop, **options):
            if not args.ids:
                print(piece, end="", flush=True)
        done = result[0]
        print("" if not args.ids else f"{label}: {' '.join(map(str, done.tokens))}")
        entry = {"tokens": done.tokens, "prefill_ms": done.prefill_ms, "decode_tokens_per_s": done.decode_tokens_per_s,
                 "finish_reason": done.finish_reason, "text": done.text}
        seed = done.seed
    else:
        out = method.generate(prompt, args.max_new_tokens, **options)
        print(f"{label}: {' '.join(map(str, out.tokens))}")
        entry = {"tokens": out.tokens, "prefill_ms": out.prefill_ms, "decode_tokens_per_s": out.decode_tokens_per_s,
                 "finish_reason": out.finish_reason}
        if tokenizer is not None:
            entry["text"] = tokenizer.decode(out.tokens)
        seed = out.seed
    if seed is not None:
        entry["seed"] = seed
    print(f"  prefill {entry['prefill_ms']:.3f} ms ({prompt.size} tokens), "
          f"decode {entry['decode_tokens_per_s']:.1f} tokens/s", flush=True)
    _report_finish(label, method, prompt.size, len(entry["tokens"]), entry["finish_reason"], seed, args.verbose)
    return entry


def _generation_options(args: argparse.Namespace) -> Dict[str, Any]:
    """Method.generate's keyword arguments from the flags."""
    return dict(eos_id=None, stop_ids=args.eos_id, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                repetition_penalty=args.repetition_penalty, seed=args.seed)


def _report_finish(label: str, method: Any, sequence: int, produced: int, finish: str, seed: Optional[int],
                  verbose: bool) -> None:
    """Says on stderr when generation stopped at the method's length, and with --verbose why it
    ended and the seed."""
    bound = method.inputs[0].shape[-1] if method.inputs and method.inputs[0] is not None else 0
    if finish == "length" and bound and sequence + produced - 1 >= bound:
        print(f"{PROG}: {label}: stopped after {produced} new tokens: the sequence reached the {bound} tokens "
              f"method '{method.name}' was exported for (--max-seq-len); finish reason length", file=sys.stderr)
    if verbose:
        said = f", seed {seed} (--seed repeats it)" if seed is not None else ""
        print(f"{PROG}: {label}: finish reason {finish}{said}", file=sys.stderr)


def _interactive(args: argparse.Namespace) -> int:
    """--interactive: one user turn a line on stdin, the reply streamed on stdout; /reset, /adapter
    NAME (an adapter .ptd, by path or by name beside the program), /quit. Returns the exit status."""
    from edgeshare.extension.python.chat_session import ChatSession, TurnTooLong  # noqa: PLC0415

    if len(args.program) != 1 or args.swap_adapter:
        raise _UsageError("--interactive chats with one --program (swap adapters with /adapter NAME)")
    data = [DataFile.open(path) for path in args.data]
    program = Program.load(args.program[0], data, methods=[args.method], threads=args.threads)
    method = program.method(args.method)
    if program.tokenizer is None:
        raise _UsageError(f"--interactive: there is no tokenizer.json or tokenizer.model beside {program.path}")
    session = ChatSession(method, system=args.system, max_new_tokens=args.max_new_tokens, stop=args.stop,
                          **_generation_options(args))
    turns: List[Dict[str, Any]] = []
    tty = sys.stdin.isatty()
    status = 0
    say = lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        while True:
            if tty:
                print("> ", end="", flush=True)
            try:
                line = sys.stdin.readline()
            except KeyboardInterrupt:
                status = 130  # Ctrl-C while no reply runs ends the session
                print(file=sys.stderr)
                break
            if not line:
                break
            text = line.rstrip("\n")
            command = text.strip()
            if command in ("/quit", "/exit"):
                break
            if command == "/reset":
                session.reset()
                say("a new conversation (the KV cache starts over)")
                continue
            if command.startswith("/adapter"):
                name = command[len("/adapter"):].strip()
                path = name if os.path.isfile(name) else os.path.join(program.folder, f"{name}.ptd")
                try:
                    program.bind_adapter(path)
                except EdgeshareError as e:
                    say(f"/adapter {name}: {e.message}")
                    continue
                session.forget_cache()
                say(f"adapter {name} bound; the next turn prefills the conversation again")
                continue
            try:
                turn = session.say(text, on_text=lambda piece: print(piece, end="", flush=True))
            except TurnTooLong as e:
                say(str(e))
                continue
            print(flush=True)
            if turn.finish_reason == "interrupted":
                say("reply stopped (Ctrl-C again ends the session)")
            entry = dataclasses.asdict(turn)
            turns.append(entry)
            if turn.reprefilled_tokens:
                say(f"the chat template renders earlier turns otherwise than they went into the KV cache: "
                    f"{turn.reprefilled_tokens} earlier tokens prefilled again")
            if args.verbose:
                said = f", seed {turn.seed}" if turn.seed is not None else ""
                say(f"prefill {turn.prefill_ms:.3f} ms ({turn.prefilled_tokens} new tokens of {turn.prompt_tokens}), "
                    f"decode {turn.decode_tokens_per_s:.1f} tokens/s, finish reason {turn.finish_reason}{said}")
    finally:
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"turns": turns, "messages": session.messages}, f, indent=2, ensure_ascii=False)
                f.write("\n")
    return status


def _run(args: argparse.Namespace) -> int:
    set_weight_sharing(not args.no_share)
    set_verify_content(not args.no_verify)
    if args.interactive:
        return _interactive(args)
    if args.system is not None:
        raise _UsageError("--system goes with --interactive (--chat files carry their own system message)")
    if args.json:
        _check_unique_names(args.program)
    prompt = load_npy(args.prompt_ids) if args.prompt_ids is not None else None
    data = [DataFile.open(path) for path in args.data]
    # The generating method alone: a program's other methods would hold memory unused.
    programs = [Program.load(path, data, methods=[args.method], threads=args.threads) for path in args.program]
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
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs edgeshare-generate.

    Args:
      argv: the flags (sys.argv[1:] when None).

    Returns:
      The exit status: 0, 1 after one "edgeshare-generate: error: ..." line on stderr, 130 after
      Ctrl-C, 1 when stdout is closed early (no traceback either way).
    """

    return run_reporting(
        PROG,
        lambda: _run(_parser().parse_args(argv)),
        errors=(EdgeshareError, MissingTextPackage, NpyFileError, _UsageError, TypeError, ValueError),
    )

if __name__ == "__main__":
    sys.exit(main())
