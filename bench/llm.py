"""llm: the tiny-LLM case: a Llama-family model with 8 PEFT LoRA adapters,
exported from a Hugging Face directory and run, against transformers + PEFT eager in the same run.

    ./bazelw run -c opt //bench:llm -- [--json FILE] [--repeats N] [--keep DIR] [--small]
        [--vocab V] [--max-seq-len N] [--trained-steps N] [--peer executorch|llamacpp [--peer-only]]
        [--peer-model llm|smollm2|small|real] [--formats F32,F16,Q8_0,Q4_0,Q4_K_M] [--n-ctx 128,2048] [--threads 1,2]
        [--flash-attn off|on|auto] [--prompt-tokens 64] [--peer-new-tokens 64]

It writes a LlamaForCausalLM made from a config (bench/_llm_model.LlmSpec: 4 layers, hidden 1024,
intermediate 2816, 16 heads / 4 kv heads, vocab 32000, seeded random weights; nothing downloaded)
with save_pretrained, and 8 PEFT LoRA adapters (q,k,v,o; r16, alpha 32; seeds 1..8) as PEFT
directories; exports them with exir.export_hf_lora (XnnpackPartitioner, max_seq_len 128) into
adapterN.pte + foundation.pte + foundation.ptd, timing the export. Then, in fresh bench/lora_runner
processes, `--repeats` times round-robin (1 thread):

- forward (method "forward", int64 input_ids [1, T] from one export) at T=1 and T=32 of adapter1
  and of the bare foundation; transformers eager (PeftModel, torch.set_num_threads(1)) on the same
  ids: latency_ms_t{1,32}, torch_latency_ms_t{1,32}, latency_t{1,32}_over_torch (and _foundation);
- foundation.pte + the 8 adapter programs in one process, sharing on and off (--no-share):
  rss_mb_all_{shared,unshared}; rss_mb_per_extra_adapter_{shared,unshared} (growth from adapter 1
  to adapter 8, per program), split into rss_anon_ / rss_file_ (heap and packed weights vs mapped
  .pte pages); adapter_mb (the adapter's weight bytes) and rss_mb_per_extra_adapter_over_budget
  (the goal: <= 0.5); planned_mb_<method> (planned memory per method, at max_seq_len, from
  tools/inspect); rss_ran_mb_t{1,32} (what running touches afterwards).
- generation, through the stateful method "forward_cached" every program has:
  tools/generate --json (32-token prompt, 32 new tokens, greedy) against transformers' own KV cache:
  prefill_ms, decode_tokens_per_s, the eager figures, ratios, and whether the tokens are equal. The
  adapter swap: lora_runner --swap-data times
  Method::rebind_data over swappable exports (bench/_llm_swap.py; --no-swap skips it).

With --peer executorch, ExecuTorch 1.5.1 (its own venv, bench/_peer.py) lowers the first adapter's
PEFT model (static T=1 and T=32, foundation in a .ptd) and its forward is timed interleaved with
lora_runner: peer_latency_ms_t{1,32}, peer_edgeshare_latency_ms_t*, latency_t*_over_peer. When the
programs have forward_cached, it also lowers the same KV-cache wrapper (exir.hf_cache.CachedCausalLM,
dynamic T, the cache as mutable buffers) and greedy generation (32-token prompt, --new-tokens) is
timed interleaved with tools/generate: peer_prefill_ms, peer_decode_tokens_per_s,
peer_edgeshare_* (edgeshare's, interleaved), prefill_over_peer (< 1: edgeshare faster),
decode_rate_over_peer (> 1: edgeshare faster), peer_generate_tokens_match (every run's tokens,
both sides, equal transformers'). If ExecuTorch cannot lower the wrapper, not_measured says why.

With --peer llamacpp, llama.cpp (llama-cpp-python 0.3.36 built from source for this CPU, its own
venv; bench/_llm_peer_llamacpp.py) converts the --peer-model (bench/llm's Llama, or a SmolLM2-135M
shape; two PEFT adapters r16 on every projection; or `real`: SmolLM2-135M-Instruct itself with the
adapter trained on a novel, bench/real_model.py, prompted with held-out text of that novel) with its
own converters to each of --formats, and greedy generation (--prompt-tokens, --peer-new-tokens) is
timed in fresh processes at every --n-ctx and --threads, interleaved with tools/generate over
edgeshare's export at the matching format (F32: fp32; F16: --fc-weight-dtype fp16; Q8_0: --quantize
int8, int8 per output row; Q4_0: --quantize int4 --group-size 32; Q4_K_M: --quantize int5k)
and bound (--max-seq-len = n_ctx). JSON "llamacpp": one row per (format, n_ctx,
threads) with weights on disk, each process's peak RSS, prefill ms, decode tokens/s,
edgeshare/llama.cpp ratios, and whether the greedy tokens agree with transformers' and with each
other. For each of --swappable-formats (default F32) the same model and adapters are also exported
swappable (lora.pte, an adapter .ptd each) and timed in the same rounds: the swap
(Method::rebind_data onto an adapter bound before) against llama.cpp's switch, and the swappable
program's prefill and decode against the adapter's own program. llama.cpp's flash attention is off
unless --flash-attn says otherwise. --peer-only skips the tiny-LLM case's own figures.

--trained-steps N trains the model (this case's and the peer stage's) for N AdamW steps on one
thread before it is saved (bench/_llm_train.py: the standard library's docstrings, a BPE of the
model's vocabulary; seeded, about 6 s a step at the reference shape), so that the logit cosines of
every format are measured on learned weights rather than seeded random ones; each adapter is then
fine-tuned N // 5 steps (at least 1) on its own part of that text, as a shipped adapter is, instead
of seeded random (a low-rank update many times the size of the weights it adapts, which tests see
but no fine-tune makes). The peer stage's prompt is then held-out text, and its JSON says the
steps and the held-out losses before and after, the model's and the first adapter's.

The machine is shared: compare only ratios within one run. --small is a very small model for the
plumbing's smoke test (bench/llm_test.py).
"""

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
from edgeshare.bench._llm_figures import LLM_REQUIRED_KEYS, llm_figures
from edgeshare.bench._llm_measure import export_llm, measure_llm
from edgeshare.bench._llm_model import LlmFiles, LlmSpec, save_llm
from edgeshare.bench._llm_peer_executorch import (
    LLM_PEER_GENERATE_KEYS,
    LLM_PEER_KEYS,
    PEER_NOT_MEASURED,
    measure_llm_peer,
)
from edgeshare.bench._llm_peer_llamacpp import (
    FORMATS,
    LLAMACPP_BUILDS,
    LLAMACPP_MODELS,
    LlamacppOptions,
    format_llamacpp_table,
    measure_llamacpp,
)
from edgeshare.bench._llm_report import format_llm_table
from edgeshare.bench._llm_swap import SWAP_KEYS, measure_swap
from edgeshare.bench._llm_train import Training
from edgeshare.bench._report import to_json
from edgeshare.bench._runner import BenchError

__all__ = [
    "LLM_PEER_GENERATE_KEYS",
    "LLM_PEER_KEYS",
    "LLM_REQUIRED_KEYS",
    "SMALL",
    "SWAP_KEYS",
    "LlmSpec",
    "main",
    "run_llm",
]

# The plumbing's smoke test: the same structure, tiny sizes, 3 adapters.
SMALL = LlmSpec(
    layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=256, max_seq_len=64, rank=4, alpha=8.0, adapters=3
)


def run_llm(
    spec: LlmSpec,
    work_dir: str,
    repeats: int = 3,
    iterations_t1: int = 20,
    iterations_t32: int = 5,
    warmup: int = 2,
    new_tokens: int = 32,
    log: Callable[[str], None] = lambda message: None,
    peer: bool = False,
    swap: bool = True,
) -> Dict[str, Any]:
    """Writes, exports and measures the model in work_dir; returns its figures (with peer: also
    ExecuTorch 1.5.1's, interleaved).

    Raises:
      BenchError: a runner, tools/generate or tools/inspect process failed.
    """
    log(f"[tiny-llm] writing the model and {spec.adapters} adapters ({spec.describe()})")
    files = save_llm(spec, os.path.join(work_dir, "hf"))
    log("[tiny-llm] exporting with export_hf_lora (XNNPACK)")
    exported = export_llm(spec, files, os.path.join(work_dir, "out"), log)
    exported.result.modules.clear()  # eight eager copies of the model: not needed any more
    log(f"[tiny-llm] exported in {exported.export_s:.1f} s; measuring ({repeats} repeats)")
    measured = measure_llm(files, exported, repeats, iterations_t1, iterations_t32, warmup, new_tokens)
    out = llm_figures(spec.describe(), exported, measured)
    iterations = {1: iterations_t1, 32: iterations_t32}
    if swap:
        log("[tiny-llm] adapter swap: swappable exports (reference model, tiny LLM) and rebind_data timings")
        swap_figures = measure_swap(
            spec, files, exported, work_dir, repeats, iterations, small=spec == SMALL, new_tokens=new_tokens
        )
        out.update(swap_figures)
    else:
        out["not_measured"]["adapter_swap"] = "skipped (--no-swap)"
    if peer:
        generation = None
        if measured.torch_generate:  # the programs have forward_cached: the peer lowers it too
            reference = measured.torch_generate[0]["tokens"]
            generation = {"max_seq_len": spec.max_seq_len, "new_tokens": new_tokens, "tokens": reference}
        try:
            figures = measure_llm_peer(files, exported, work_dir, repeats, iterations, warmup, log, generation)
            out["not_measured"].update(figures.pop(PEER_NOT_MEASURED))
            out.update(figures)
        except BenchError as e:  # the peer is opt-in: its failure must not lose the run's figures
            log(f"[tiny-llm] peer executorch failed: {e}")
            out["not_measured"]["peer"] = f"failed: {e}"
    return out


def _user_path(path: str) -> str:
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    return path if os.path.isabs(path) else os.path.join(base, path)


# --peer-model's choice beside LLAMACPP_MODELS: the real SmolLM2-135M-Instruct and its trained adapter.
REAL = "real"


def _peer_model(name: str, trained_steps: int, log: Callable[[str], None]) -> Tuple[LlmSpec, Optional[LlmFiles]]:
    """The llama.cpp stage's model: a seeded one of LLAMACPP_MODELS (files None: the stage writes it),
    or the real model (fetched, dequantized and its adapter trained on first use, then cached),
    prompted with held-out text of the novel its adapter was trained on."""
    if name != REAL:
        return dataclasses.replace(LLAMACPP_MODELS[name], trained_steps=trained_steps), None
    # Imported here: real_model's library builds on this one's (its adapter trains with _llm_train),
    # so //bench:llm the binary, not :llm_lib, depends on it.
    from edgeshare.bench.real_model import AdapterRecipe, prepare  # noqa: PLC0415

    real = prepare(rotated=False, adapter=True, log=log)
    held_out = Training(0, 0.0, float("nan"), float("nan"), torch.from_numpy(real.held_out_ids))
    spec = dataclasses.replace(LLAMACPP_MODELS["smollm2"], adapters=1, targets=AdapterRecipe().targets)
    return spec, LlmFiles(real.model_dir, {"adapter1": real.adapter_dir}, held_out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm", description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per configuration")
    parser.add_argument("--iterations", type=int, default=20, help="timed runs at T=1")
    parser.add_argument("--iterations-t32", type=int, default=5, help="timed runs at T=32")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs before timing")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens to generate")
    parser.add_argument("--keep", default=None, help="write into this folder and keep the files")
    parser.add_argument("--small", action="store_true", help="a very small model (smoke test)")
    parser.add_argument("--vocab", type=int, default=None, help="override the vocabulary size")
    parser.add_argument(
        "--max-seq-len", type=int, default=None, help="override the programs' token bound (memory is planned for it)"
    )
    parser.add_argument(
        "--trained-steps", type=int, default=0, help="train the model this many steps on offline text first (0: random)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    parser.add_argument("--no-swap", action="store_true", help="skip the adapter-swap stage")
    parser.add_argument(
        "--peer",
        default=None,
        choices=["executorch", "llamacpp"],
        help="also time ExecuTorch 1.5.1 or llama.cpp on the same model, interleaved (its own venv, made on first use)",
    )
    parser.add_argument("--peer-only", action="store_true", help="with --peer llamacpp: only the peer stage")
    parser.add_argument(
        "--peer-model", default="llm", choices=sorted([*LLAMACPP_MODELS, REAL]), help="llamacpp: the model"
    )
    parser.add_argument(
        "--formats", default=",".join(f.name for f in FORMATS), help="llamacpp: weight formats, comma-separated"
    )
    parser.add_argument("--n-ctx", default="128,2048", help="llamacpp: context bounds (edgeshare --max-seq-len)")
    parser.add_argument("--threads", default="1", help="llamacpp: thread counts, comma-separated")
    parser.add_argument("--flash-attn", default="off", choices=["off", "on", "auto"], help="llamacpp: flash attention")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="llamacpp: the prompt's length")
    parser.add_argument(
        "--swappable-formats",
        default="F32",
        help="llamacpp: formats whose swappable export is timed too (swap vs llama.cpp's switch, vs the own program)",
    )
    parser.add_argument("--peer-new-tokens", type=int, default=64, help="llamacpp: greedy tokens generated")
    parser.add_argument(
        "--llamacpp-build",
        default="native",
        choices=sorted(LLAMACPP_BUILDS),
        help="llamacpp: built for this CPU, or for AVX2 only (with EDGESHARE_ISA=avx2: an AVX2 machine's figures)",
    )
    return parser


def _ints(parser: argparse.ArgumentParser, flag: str, text: str) -> Tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        parser.error(f"{flag} takes comma-separated integers, not {text!r}")
        raise


def _llamacpp_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> LlamacppOptions:
    options = LlamacppOptions(
        formats=tuple(f.strip() for f in args.formats.split(",") if f.strip()),
        n_ctx=_ints(parser, "--n-ctx", args.n_ctx),
        threads=_ints(parser, "--threads", args.threads),
        flash_attn=args.flash_attn,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.peer_new_tokens,
        repeats=args.repeats,
        swappable=tuple(f.strip() for f in args.swappable_formats.split(",") if f.strip()),
        build=args.llamacpp_build,
    )
    try:
        options.check()
    except BenchError as e:
        parser.error(str(e))
    return options


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the case; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.repeats, args.iterations, args.iterations_t32, args.new_tokens) < 1:
        parser.error("--repeats, --iterations, --iterations-t32 and --new-tokens must be at least 1")
    spec = SMALL if args.small else LlmSpec()
    overrides = {k: v for k, v in (("vocab", args.vocab), ("max_seq_len", args.max_seq_len)) if v is not None}
    if overrides:
        spec = dataclasses.replace(spec, **overrides)
    if args.trained_steps < 0:
        parser.error("--trained-steps must be at least 0")
    spec = dataclasses.replace(spec, trained_steps=args.trained_steps)
    if spec.max_seq_len < 32:
        parser.error("--max-seq-len must be at least 32 (the T=32 forward and the 32-token prompt)")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    if args.peer_only and args.peer != "llamacpp":
        parser.error("--peer-only goes with --peer llamacpp")
    llamacpp = _llamacpp_options(parser, args) if args.peer == "llamacpp" else None
    root = _user_path(args.keep) if args.keep else tempfile.mkdtemp(prefix="edgeshare_llm_")
    start = time.perf_counter()
    report: Dict[str, Any] = {}
    tables = []
    try:
        if not args.peer_only:
            result = run_llm(
                spec,
                root,
                args.repeats,
                args.iterations,
                args.iterations_t32,
                args.warmup,
                args.new_tokens,
                log,
                args.peer == "executorch",
                not args.no_swap,
            )
            report["tiny-llm"] = result
            tables.append(format_llm_table(result))
        if llamacpp is not None:
            peer_spec, peer_files = _peer_model(args.peer_model, args.trained_steps, log)
            try:
                report.update(measure_llamacpp(peer_spec, os.path.join(root, "llamacpp"), llamacpp, log, peer_files))
                tables.append(format_llamacpp_table(report["llamacpp"]))
            except BenchError as e:  # the peer is opt-in: its failure must not lose the run's figures
                if args.peer_only:
                    raise
                log(f"[tiny-llm] peer llamacpp failed: {e}")
                report["tiny-llm"]["not_measured"]["peer"] = f"failed: {e}"
    except (BenchError, ValueError, TypeError, OSError) as e:
        print(f"llm: error: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    log(f"done in {time.perf_counter() - start:.0f} s")
    print("\n".join(tables))
    text = to_json(report)
    print(text)
    if args.json:
        with open(_user_path(args.json), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
