"""export: the exporter at real size, against llama.cpp's converters in the same run.

    ./bazelw run -c opt //bench:export -- [--models smollm2,llama1b] [--json FILE] [--keep DIR]
        [--peer llamacpp] [--new-tokens 16]

For each model (bench/_llm_model.LlmSpec, seeded weights written with save_pretrained, two PEFT LoRA
adapters r16 on every projection, max_seq_len 128; `small` is a very small one for the smoke test):

- smollm2: SmolLM2-135M-shaped (30 layers, hidden 576, 9/3 heads, vocab 49152, tied).
- llama1b: Llama-3.2-1B-shaped (16 layers, hidden 2048, 32/8 heads, intermediate 8192, vocab
  128256, tied).

`tools/export_lora --hf-model M --adapter adapter1=.. --adapter adapter2=..` runs in a fresh process:
`export_s` (its wall time), `peak_rss_mib` (its own peak RSS) and `peak_rss_over_weights` (against
the fp32 weights' bytes, model.safetensors), and the time of each stage from its progress lines
(`stages_s`); `further_adapter_s` is the second adapter's stages (same structure as the first: no
torch.export, no lowering, the first one's lowered program over its own weights). Then `tools/generate` (adapter1, greedy, `--new-tokens` from a
16-token prompt) against transformers + PEFT's greedy tokens: `tokens_match`.

With --peer llamacpp, llama.cpp's own converters (bench/_llm_peer_llamacpp.py's venv) write the same
model as F32 GGUF and each adapter: `peer_convert_s`, `peer_adapter_convert_s`.
"""

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from edgeshare.bench._llm_measure import generate_torch
from edgeshare.bench._llm_model import LlmFiles, LlmSpec, save_llm
from edgeshare.bench._llm_peer_llamacpp import LLAMACPP_MODELS, TARGETS_ALL, VENV, convert_with_llamacpp
from edgeshare.bench._peer import peer_python
from edgeshare.bench._runner import BenchError, run_generate, run_process, tool_path
from edgeshare.exir.hf import load_hf_model, load_peft_adapter

MODELS: Dict[str, LlmSpec] = {
    "small": LLAMACPP_MODELS["small"],  # the plumbing's smoke test (bench/export_test.py)
    # The llama.cpp peer stage loads eight adapters; the exporter's figures are for two.
    "smollm2": dataclasses.replace(LLAMACPP_MODELS["smollm2"], adapters=2),
    "llama1b": LlmSpec(
        layers=16,
        hidden=2048,
        intermediate=8192,
        heads=32,
        kv_heads=8,
        vocab=128256,
        tied=True,
        adapters=2,
        targets=TARGETS_ALL,
    ),
}
PROMPT_TOKENS = 16
_PREFIX = "export_lora: "


@dataclasses.dataclass
class ExportRun:
    """One tools/export_lora process: its wall time, peak RSS and stages (line, seconds)."""

    export_s: float
    peak_rss_mib: float
    stages: List[Tuple[str, float]]


def _export(files: LlmFiles, out: str, max_seq_len: int, log: Callable[[str], None]) -> ExportRun:
    args = [tool_path("export_lora"), "--hf-model", files.model_dir, "--max-seq-len", str(max_seq_len), "--out", out]
    for name, folder in files.adapter_dirs.items():
        args += ["--adapter", f"{name}={folder}"]
    marks: List[Tuple[str, float]] = []

    def on_line(line: str) -> None:
        if line.startswith(_PREFIX):
            marks.append((line[len(_PREFIX) :], time.perf_counter()))
            log(f"[export]   {line[len(_PREFIX):]}")

    start = time.perf_counter()
    proc = run_process(args, on_stderr_line=on_line)
    end = time.perf_counter()
    if proc.returncode != 0:
        raise BenchError(f"tools/export_lora failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    stages = [(line, (marks[i + 1][1] if i + 1 < len(marks) else end) - t) for i, (line, t) in enumerate(marks)]
    return ExportRun(end - start, proc.peak_rss_kib / 1024, stages)


def _further_adapter_s(stages: List[Tuple[str, float]], name: str) -> float:
    """Seconds of the stages about adapter `name` (its loading is the model loading's part)."""
    return sum(s for line, s in stages if f"adapter '{name}'" in line and not line.startswith("loading"))


def _reference_tokens(files: LlmFiles, prompt: str, new_tokens: int) -> List[int]:
    first = next(iter(files.adapter_dirs))
    model = load_peft_adapter(load_hf_model(files.model_dir), first, files.adapter_dirs[first]).eval()
    tokens = generate_torch(model, torch.from_numpy(np.load(prompt)), new_tokens)["tokens"]
    del model
    return tokens


def measure_model(
    name: str, work_dir: str, new_tokens: int, peer: bool, log: Callable[[str], None]
) -> Dict[str, Any]:
    """Writes, exports and checks one model -> its figures."""
    spec = MODELS[name]
    log(f"[export] {name}: writing the model and {spec.adapters} adapters ({spec.describe()})")
    files = save_llm(spec, os.path.join(work_dir, "hf"))
    weights = os.path.getsize(os.path.join(files.model_dir, "model.safetensors"))
    log(f"[export] {name}: tools/export_lora")
    run = _export(files, os.path.join(work_dir, "out"), spec.max_seq_len, log)
    second = list(files.adapter_dirs)[1]
    figures: Dict[str, Any] = {
        "model": spec.describe(),
        "weights_mib": weights / 2**20,
        "export_s": run.export_s,
        "peak_rss_mib": run.peak_rss_mib,
        "peak_rss_over_weights": run.peak_rss_mib * 2**20 / weights,
        "further_adapter_s": _further_adapter_s(run.stages, second),
        "stages_s": [[line, s] for line, s in run.stages],
    }
    prompt = os.path.join(work_dir, "prompt.npy")
    ids = torch.randint(0, spec.vocab, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(16))
    np.save(prompt, ids.numpy().astype(np.int64))
    log(f"[export] {name}: tools/generate, then transformers + PEFT")
    out = os.path.join(work_dir, "out")
    ours = run_generate(os.path.join(out, "adapter1.pte"), [os.path.join(out, "foundation.ptd")], prompt, new_tokens)
    theirs = _reference_tokens(files, prompt, new_tokens)
    figures.update(
        tokens=ours["tokens"],
        torch_tokens=theirs,
        tokens_match=ours["tokens"] == theirs,
        generate_peak_rss_mib=ours["peak_rss_kib"] / 1024,
    )
    if peer:
        log(f"[export] {name}: llama.cpp's converters")
        converted = convert_with_llamacpp(peer_python(VENV, log), files, os.path.join(work_dir, "gguf"))
        figures["peer_convert_s"] = converted["models"]["f32"]["convert_s"]
        figures["peer_adapter_convert_s"] = [a["convert_s"] for a in converted["adapters"].values()]
    return figures


def format_table(results: Dict[str, Dict[str, Any]]) -> str:
    """A markdown table of the figures."""
    lines = [
        "| model | fp32 weights MiB | export s | per further adapter s | peak RSS MiB (x weights) "
        "| llama.cpp convert s (model; adapter) | 16 tokens equal transformers' |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, f in results.items():
        peer = "n/a"
        if "peer_convert_s" in f:
            peer = f"{f['peer_convert_s']:.1f}; {max(f['peer_adapter_convert_s']):.1f}"
        lines.append(
            f"| {name} | {f['weights_mib']:.0f} | {f['export_s']:.1f} | {f['further_adapter_s']:.1f} | "
            f"{f['peak_rss_mib']:.0f} ({f['peak_rss_over_weights']:.2f}x) | {peer} | {f['tokens_match']} |"
        )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the case; returns the exit status."""
    parser = argparse.ArgumentParser(prog="export", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="smollm2,llama1b", help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--keep", default=None, help="keep the files under this folder (default: a temporary one)")
    parser.add_argument("--peer", choices=["llamacpp"], default=None, help="time llama.cpp's converters too")
    parser.add_argument("--new-tokens", type=int, default=16, help="greedy tokens compared with transformers'")
    args = parser.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown or not names:
        parser.error(f"unknown model(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODELS)}")
    if args.new_tokens < 1:
        parser.error("--new-tokens must be at least 1")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    root = args.keep or tempfile.mkdtemp(prefix="bench_export_")
    results: Dict[str, Dict[str, Any]] = {}
    try:
        for name in names:
            work = os.path.join(root, name)
            shutil.rmtree(work, ignore_errors=True)
            results[name] = measure_model(name, work, args.new_tokens, args.peer == "llamacpp", log)
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)  # a 1B model's files are 10 GB
    except BenchError as e:
        print(f"export: error: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
