"""./bazelw run -c opt //bench:aarch64: instructions per decoded token on aarch64, edgeshare against
llama.cpp, counted under qemu-user where no ARM board is at hand.

Both sides run the same model at the same bits on one thread under `qemu-aarch64 -cpu max` with a
TCG plugin of ours (bench/qemu_insn_count.cc) that counts every guest instruction executed. Each
program runs twice, generating --tokens N1 and N2 tokens after the same 8 positions of context;
(count(N2) - count(N1)) / (N2 - N1) is what one decoded token costs, loading, packing and the
prompt cancelling out.

- The model is //bench:llm's (bench/_llm_model.py, seeded weights: Llama 4 layers, hidden 1024,
  vocab 32000), written once under --work.
- edgeshare: its foundation exported on this machine (export_hf_lora, int8 or int4 in groups of 32,
  bound 128), run by `tools/generate` built for aarch64 (`./bazelw build --config=aarch64
  //tools:generate` first: --generate defaults to that binary) with an 8-id prompt, greedy, the
  files' digests unchecked (--no-verify, as the count is about generating), EDGESHARE_ISA set to
  each of --sets ("best": unset, the widest set the build picks on qemu's CPU).
- llama.cpp: llama.cpp's converters make the GGUF model (Q8_0 beside int8, Q4_0 quantized from F32
  beside int4); its llama-bench, cross-built from the vendored source per variant
  (bench/_aarch64_llamacpp.py: neon, dotprod, i8mm), runs `-p 0 -d 8 -n N -r 1 -t 1 --no-warmup`.

Counts are instructions, not time: they do not see memory bandwidth, caches, or how wide a core
issues (docs/aarch64.md says what that leaves out and how to measure on a board).

    ./bazelw build --config=aarch64 //tools:generate
    ./bazelw run -c opt //bench:aarch64 -- [--formats int8,int4] [--sets best] \\
        [--llamacpp dotprod,i8mm] [--tokens 4,12] [--work DIR] [--json F]
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from edgeshare.bench._runner import BenchError

FORMATS = {"int8": "Q8_0", "int4": "Q4_0"}
SYSROOT_LIBS = "/opt/edgeshare/aarch64-sysroot/usr/lib/aarch64-linux-gnu"
PROMPT_LEN = 8
BOUND = 128
_ELF_MACHINE_AARCH64 = 183


@dataclasses.dataclass(frozen=True)
class Options:
    """What one run measures (see the module doc)."""

    formats: Sequence[str]
    sets: Sequence[str]
    llamacpp: Sequence[str]
    tokens: Sequence[int]
    generate: str
    work: Optional[str]
    json_path: Optional[str]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _list(text: str) -> List[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_options(argv: Sequence[str]) -> Options:
    """The command line, checked; a bad value exits with one line (argparse's status 2)."""
    from edgeshare.bench._aarch64_llamacpp import VARIANTS  # noqa: PLC0415

    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY", os.getcwd())
    parser = argparse.ArgumentParser(prog="bench/aarch64", description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="int8,int4", help="edgeshare formats (int8, int4)")
    parser.add_argument("--sets", default="best", help="EDGESHARE_ISA values for edgeshare ('best': unset)")
    parser.add_argument("--llamacpp", default="dotprod,i8mm", help=f"llama.cpp variants ({', '.join(VARIANTS)})")
    parser.add_argument("--tokens", default="4,12", help="the two generation lengths N1,N2 (N1 < N2)")
    parser.add_argument(
        "--generate",
        default=os.path.join(workspace, "bazel-out", "aarch64-opt", "bin", "tools", "generate"),
        help="tools/generate built with --config=aarch64",
    )
    parser.add_argument("--work", help="keep the model, conversions and exports here (reused when present)")
    parser.add_argument("--json", dest="json_path", help="write the rows here")
    args = parser.parse_args(argv)
    formats, sets, variants = _list(args.formats), _list(args.sets), _list(args.llamacpp)
    for fmt in formats:
        if fmt not in FORMATS:
            parser.error(f"--formats: no format '{fmt}' (there are {', '.join(FORMATS)})")
    for variant in variants:
        if variant not in VARIANTS:
            parser.error(f"--llamacpp: no variant '{variant}' (there are {', '.join(VARIANTS)})")
    try:
        tokens = [int(t) for t in _list(args.tokens)]
    except ValueError:
        parser.error(f"--tokens: '{args.tokens}' is not two integers N1,N2")
    if len(tokens) != 2 or not 1 <= tokens[0] < tokens[1]:
        parser.error(f"--tokens: '{args.tokens}' is not two lengths 1 <= N1 < N2")
    if tokens[1] + PROMPT_LEN > BOUND:
        parser.error(f"--tokens: N2 {tokens[1]} and the {PROMPT_LEN}-id prompt pass the export's bound {BOUND}")
    if not formats or not (sets or variants):
        parser.error("nothing to measure: give --formats and --sets or --llamacpp")
    if sets and not _is_aarch64_elf(args.generate):
        parser.error(
            f"--generate: {args.generate} is not an aarch64 executable; build it with "
            "`./bazelw build --config=aarch64 //tools:generate`"
        )
    return Options(formats, sets, variants, tokens, args.generate, args.work, args.json_path)


def _is_aarch64_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    machine = int.from_bytes(header[18:20], "little") if len(header) == 20 else 0
    return header[:4] == b"\x7fELF" and machine == _ELF_MACHINE_AARCH64


def _plugin() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libqemu_insn_count.so")
    if not os.path.exists(path):
        raise BenchError(f"{path} is missing: run this bench with ./bazelw run //bench:aarch64")
    return path


def count_instructions(command: Sequence[str], env: Dict[str, str], what: str) -> int:
    """Guest instructions `command` (an aarch64 program and its arguments) executes under
    qemu-aarch64 -cpu max, with `env` added to its environment."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "count")
        qemu = ["qemu-aarch64", "-cpu", "max", "-L", "/usr/aarch64-linux-gnu", "-E", f"LD_LIBRARY_PATH={SYSROOT_LIBS}"]
        for key, value in env.items():
            qemu += ["-E", f"{key}={value}"]
        qemu += ["-plugin", f"{_plugin()},out={out}"]
        proc = subprocess.run([*qemu, *command], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BenchError(f"{what} failed under qemu (status {proc.returncode}): {tail[0]}")
        with open(out, encoding="ascii") as f:
            return int(f.read().strip())


def _prepare(work: str) -> Dict[str, Any]:
    """The model, its GGUF files and the foundation exports under `work` (reused when there)."""
    from edgeshare.backends.xnnpack import XnnpackPartitioner  # noqa: PLC0415
    from edgeshare.bench._llm_model import LlmFiles, LlmSpec, save_llm  # noqa: PLC0415
    from edgeshare.bench._llm_peer_llamacpp import FORMATS as GGUF_FORMATS  # noqa: PLC0415
    from edgeshare.bench._llm_peer_llamacpp import VENV, convert_with_llamacpp  # noqa: PLC0415
    from edgeshare.bench._peer import peer_python  # noqa: PLC0415
    from edgeshare.exir import export_hf_lora  # noqa: PLC0415

    spec = LlmSpec(adapters=1)
    model_root = os.path.join(work, "model")
    if os.path.exists(os.path.join(model_root, "model", "config.json")):
        files = LlmFiles(os.path.join(model_root, "model"), {"adapter1": os.path.join(model_root, "adapter1")})
    else:
        _say("[aarch64] writing //bench:llm's model")
        files = save_llm(spec, model_root)
    gguf_dir = os.path.join(work, "gguf")
    report_path = os.path.join(gguf_dir, "convert.json")
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            converted = json.load(f)
    else:
        _say("[aarch64] converting to GGUF with llama.cpp's converters")
        python = peer_python(VENV, _say)
        wanted = [f for f in GGUF_FORMATS if f.name in set(FORMATS.values())]
        converted = convert_with_llamacpp(python, files, gguf_dir, wanted)
        with open(report_path, "w", encoding="utf-8") as f:
            json.dump(converted, f)
    exports: Dict[str, Dict[str, str]] = {}
    for fmt in FORMATS:
        out = os.path.join(work, f"export-{fmt}")
        program, data = os.path.join(out, "foundation.pte"), os.path.join(out, "foundation.ptd")
        if not (os.path.exists(program) and os.path.exists(data)):
            _say(f"[aarch64] exporting the foundation at {fmt}")
            partitioner = XnnpackPartitioner(quantize=fmt, **({"group_size": 32} if fmt == "int4" else {}))
            result = export_hf_lora(files.model_dir, files.adapter_dirs, out, BOUND, partitioner)
            program, data = result.foundation_program, result.foundation_path
        exports[fmt] = {"program": program, "data": data}
    prompt = os.path.join(work, "prompt.npy")
    if not os.path.exists(prompt):
        ids = np.random.default_rng(0).integers(3, spec.vocab, size=PROMPT_LEN, dtype=np.int64)
        np.save(prompt, ids)
    ggufs = {fmt: converted["models"][FORMATS[fmt].lower()]["path"] for fmt in FORMATS}
    return {"exports": exports, "gguf": ggufs, "prompt": prompt}


def _per_token(counts: Sequence[int], tokens: Sequence[int]) -> float:
    return (counts[1] - counts[0]) / (tokens[1] - tokens[0])


def measure(options: Options, work: str) -> List[Dict[str, Any]]:
    """Every format's rows: instructions per decoded token per edgeshare set and llama.cpp variant."""
    from edgeshare.bench._aarch64_llamacpp import llama_bench_aarch64  # noqa: PLC0415

    prepared = _prepare(work)
    binaries = {v: llama_bench_aarch64(v, say=_say) for v in options.llamacpp}
    rows: List[Dict[str, Any]] = []
    for fmt in options.formats:
        export = prepared["exports"][fmt]
        for isa in options.sets:
            env = {} if isa == "best" else {"EDGESHARE_ISA": isa}
            counts = []
            for n in options.tokens:
                report = os.path.join(work, f"generate-{fmt}-{isa}-{n}.json")
                command = [options.generate, "--program", export["program"], "--data", export["data"],
                           "--prompt-ids", prepared["prompt"], "--max-new-tokens", str(n), "--threads", "1",
                           "--no-verify", "--ids", "--json", report]
                what = f"edgeshare {fmt} ({isa}), {n} tokens"
                counts.append(count_instructions(command, env, what))
                with open(report, encoding="utf-8") as f:
                    made = len(json.load(f)["tokens"])
                if made != n:  # an end token would make the two runs differ by other than N2 - N1 tokens
                    raise BenchError(f"{what}: generated {made} tokens")
            rows.append({"format": fmt, "side": "edgeshare", "set": isa, "counts": counts,
                         "insns_per_token": _per_token(counts, options.tokens)})
            _say(f"[aarch64] edgeshare {fmt} {isa}: {rows[-1]['insns_per_token'] / 1e6:.1f} M instructions a token")
        for variant, binary in binaries.items():
            counts = []
            for n in options.tokens:
                command = [binary, "-m", prepared["gguf"][fmt], "-p", "0", "-d", str(PROMPT_LEN), "-n", str(n),
                           "-r", "1", "-t", "1", "--no-warmup"]
                counts.append(count_instructions(command, {}, f"llama-bench {FORMATS[fmt]} ({variant}), {n} tokens"))
            rows.append({"format": FORMATS[fmt], "side": "llama.cpp", "set": variant, "counts": counts,
                         "insns_per_token": _per_token(counts, options.tokens)})
            per_token = rows[-1]["insns_per_token"] / 1e6
            _say(f"[aarch64] llama.cpp {FORMATS[fmt]} {variant}: {per_token:.1f} M instructions a token")
    return rows


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
    """The rows as a Markdown table, each edgeshare row beside the llama.cpp rows of its format."""
    lines = ["| format | edgeshare set | M instructions / token | llama.cpp | M instructions / token | ours / theirs |",
             "| --- | --- | --- | --- | --- | --- |"]
    for ours in (r for r in rows if r["side"] == "edgeshare"):
        theirs = [r for r in rows if r["side"] == "llama.cpp" and r["format"] == FORMATS[ours["format"]]]
        for peer in theirs or [None]:
            mine = ours["insns_per_token"]
            cells = f"| {ours['format']} / {FORMATS[ours['format']]} | {ours['set']} | {mine / 1e6:.2f} "
            if peer is None:
                lines.append(cells + "| | | |")
            else:
                theirs_ = peer["insns_per_token"]
                lines.append(cells + f"| {peer['set']} | {theirs_ / 1e6:.2f} | {mine / theirs_:.2f} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    try:
        if options.work:
            os.makedirs(options.work, exist_ok=True)
            rows = measure(options, options.work)
        else:
            with tempfile.TemporaryDirectory() as work:
                rows = measure(options, work)
    except BenchError as e:
        print(f"bench/aarch64: {e}", file=sys.stderr)
        return 1
    print(format_table(rows))
    if options.json_path:
        with open(options.json_path, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
