"""The tiny-LLM case's llama.cpp peer (opt-in, `bench/llm --peer llamacpp`): the same Hugging Face
model and PEFT adapters, converted with the converters of the llama.cpp it runs, generating
greedily at matching formats, context bounds and threads, interleaved with tools/generate.

The peer's venv (bench/_peer.py, under ~/.cache/edgeshare-bench/llamacpp-0.3.36, made on first use:
torch, transformers, peft, safetensors, sentencepiece, then llama-cpp-python==0.3.36 built from
its sdist for this CPU with -DGGML_NATIVE=ON, about 11 minutes on 2 cores; with
`--llamacpp-build avx2`, llamacpp-0.3.36-avx2, built for AVX2 + FMA + F16C only) is never a build
or test dependency. The converters come from that same sdist (vendor/llama.cpp/convert_hf_to_gguf.py,
convert_lora_to_gguf.py, conversion/ and gguf-py/), unpacked into the venv.

For each format in FORMATS the model is converted (or quantized from F32) once; edgeshare exports
the same model and adapters (export_hf_lora, XnnpackPartitioner with the format's options) once
per bound. Then, `repeats` times round-robin over (bound, threads, format): a fresh tools/generate
(adapter1.pte over foundation.ptd) and a fresh bench/llamacpp_peer.py process (the model GGUF with
both adapters loaded, adapter1 set at scale 1, n_ctx = the bound), each prefilling the same
prompt and decoding greedily; each process's peak RSS is its own (wait4). llama.cpp's flash
attention is off unless asked (on, it rounds Q to F16 and its F32 logits drift from transformers').
Each round also runs one tools/generate that loads foundation.ptd and every adapter's program
(all loaded first, then each generates): its peak RSS against the budget of the GGUF model plus
its adapters' GGUF files plus RSS_MARGIN_MIB. Each export's first adapter program also runs the
prompt's `forward` once in this process: its logits' cosine per position against transformers +
PEFT in fp32 (bench/_llm_peer_quality.py).
"""

import dataclasses
import json
import os
import tarfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_measure import generate_torch
from edgeshare.bench._llm_model import LlmFiles, LlmSpec, save_llm
from edgeshare.bench._llm_peer_quality import cosine_figures, logit_cosines
from edgeshare.bench._llm_peer_swap import SwappableRuns, export_swappable, swappable_fields, time_swappable
from edgeshare.bench._llm_train import Training
from edgeshare.bench._peer import VenvSpec, VenvStep, peer_python, peer_script, pip_install
from edgeshare.bench._report import Rows, format_value
from edgeshare.bench._runner import BenchError, json_report, run_generate, run_process
from edgeshare.bench._stats import MIB, median, ratio
from edgeshare.exir.hf import export_hf_lora, load_hf_model, load_peft_adapter

__all__ = [
    "FORMATS",
    "LLAMACPP_BUILDS",
    "LLAMACPP_MODELS",
    "VENV",
    "Format",
    "LlamacppOptions",
    "TARGETS_ALL",
    "convert_once",
    "convert_with_llamacpp",
    "format_llamacpp_table",
    "llamacpp_logits",
    "llamacpp_rows",
    "llamacpp_venv",
    "measure_llamacpp",
]

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
# The llama.cpp builds the peer can run (--llamacpp-build): for this CPU, or for AVX2 + FMA + F16C
# only (x86-64-v3's vector part, what EDGESHARE_ISA=avx2 lets edgeshare's kernels use), so that an
# AVX2 machine's figures can be measured on a wider one. Each its own venv; pip's wheel cache is
# off for the source build, whose wheel would otherwise be reused whatever CMAKE_ARGS say.
LLAMACPP_BUILDS: Dict[str, str] = {
    "native": "-DGGML_NATIVE=ON",
    "avx2": "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON",
}


def llamacpp_venv(build: str) -> VenvSpec:
    """The peer venv of a build in LLAMACPP_BUILDS ("native": the folder every stage has used)."""
    return VenvSpec(
        f"llamacpp-{VERSION}" + ("" if build == "native" else f"-{build}"),
        (
            pip_install(
                "torch==2.13.0",
                "transformers==5.24.0",
                "peft==0.21.2",
                "safetensors==0.8.0",
                "protobuf==7.36.2",
                "sentencepiece==0.2.3",
                "numpy==2.4.6",
                "pyyaml==6.0.4",
            ),
            VenvStep(
                (
                    "pip",
                    "download",
                    "--no-binary",
                    ":all:",
                    "--no-deps",
                    "-d",
                    "{venv}/sdist",
                    f"llama-cpp-python=={VERSION}",
                )
            ),
            VenvStep(
                ("pip", "install", "--no-cache-dir", "--no-binary", "llama-cpp-python", f"{{venv}}/sdist/{SDIST}"),
                env=(("CMAKE_ARGS", LLAMACPP_BUILDS[build]),),
                nice=True,
            ),
        ),
        note="(llama-cpp-python built from source: about 11 minutes on 2 cores)",
    )


VENV = llamacpp_venv("native")
# Both sides run an untimed generation of this many tokens before the timed one (it pages the
# mapped weights in and makes the first touch of their working memory).
_WARMUP_TOKENS = 2
# Rounds of llama.cpp adapter switches timed after each generation (over every adapter).
_SWITCH_ROUNDS = 5
# What the converters need from the sdist, under llama_cpp_python-VERSION/vendor/llama.cpp/.
_CONVERTER_PARTS = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/")
TARGETS_ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# The models the peer stage measures (--peer-model): bench/llm's Llama, a SmolLM2-135M shape, and a
# very small one for trying the plumbing; PEFT adapters on every projection (eight, as many
# programs as the memory figure loads; two on the small one).
LLAMACPP_MODELS: Dict[str, LlmSpec] = {
    "small": LlmSpec(layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=256, rank=4, alpha=8.0,
                     adapters=2, targets=TARGETS_ALL),
    "llm": LlmSpec(adapters=8, targets=TARGETS_ALL),
    "smollm2": LlmSpec(
        layers=30,
        hidden=576,
        intermediate=1536,
        heads=9,
        kv_heads=3,
        vocab=49152,
        tied=True,
        adapters=8,
        targets=TARGETS_ALL,
    ),
}
# What one process of the foundation and every adapter program may hold beyond the GGUF model and
# its adapters' files (the issue's budget): code, planned activations, KV caches, packed copies.
RSS_MARGIN_MIB = 64


@dataclasses.dataclass(frozen=True)
class Format:
    """One weight format, on both sides.

    Attributes:
      name: as llama.cpp names it (F32, F16, Q8_0, Q4_0, Q4_K_M).
      gguf: convert_hf_to_gguf.py --outtype, or None when quantized from the F32 file.
      quantize: llama_model_quantize's type (from F32), or None.
      edgeshare: XnnpackPartitioner options of the matching edgeshare export, or None when
        edgeshare has no such format yet (llama.cpp alone is measured).
    """

    name: str
    gguf: Optional[str] = None
    quantize: Optional[str] = None
    edgeshare: Optional[Tuple[Tuple[str, Union[str, int]], ...]] = None


# One line per format; an edgeshare format joins its llama.cpp twin by setting `edgeshare`.
FORMATS: Tuple[Format, ...] = (
    Format("F32", gguf="f32", edgeshare=(("fc_weight_dtype", "fp32"),)),
    Format("F16", gguf="f16", edgeshare=(("fc_weight_dtype", "fp16"),)),
    Format("Q8_0", gguf="q8_0", edgeshare=(("quantize", "int8"),)),
    # Q4_0: blocks of 32 weights with one fp16 scale, its output layer Q6_K; edgeshare's int4 in
    # groups of 32 with fp16 scales, its output layer (and tied embedding) int8.
    Format("Q4_0", quantize="q4_0", edgeshare=(("quantize", "int4"), ("group_size", 32))),
    # Q4_K_M: Q4_K (Q5_0/Q5_1 where a width is no multiple of 256) with attn_v and ffn_down at 6
    # bits; edgeshare's int5k: 5-bit blocks of 32 (Q5_0's grain) with the same two projections in
    # int8 blocks of 32.
    Format("Q4_K_M", quantize="q4_k_m", edgeshare=(("quantize", "int5k"),)),
)


@dataclasses.dataclass(frozen=True)
class LlamacppOptions:
    """What the peer stage measures.

    Attributes:
      formats: names in FORMATS.
      n_ctx: context bounds (edgeshare's --max-seq-len, llama.cpp's n_ctx), each >= prompt + new.
      threads: thread counts of both sides.
      flash_attn: llama.cpp's flash attention: "off" (exact at F32), "on" or "auto".
      prompt_tokens: the prompt's length (seeded random ids; held-out text for a trained model).
      new_tokens: greedy tokens generated.
      repeats: fresh processes per configuration and side, round-robin.
      swappable: formats whose swappable export (one lora.pte, an adapter .ptd each) is timed too:
        its generation against the adapter's own program and its adapter swap against llama.cpp's
        switch (bench/_llm_peer_swap.py).
      build: the llama.cpp build (LLAMACPP_BUILDS): "native" for this CPU, "avx2" for AVX2 only.
    """

    formats: Tuple[str, ...] = tuple(f.name for f in FORMATS)
    n_ctx: Tuple[int, ...] = (128, 2048)
    threads: Tuple[int, ...] = (1,)
    flash_attn: str = "off"
    prompt_tokens: int = 64
    new_tokens: int = 64
    repeats: int = 3
    swappable: Tuple[str, ...] = ("F32",)
    build: str = "native"

    def check(self) -> None:
        """Raises BenchError naming the first option out of range."""
        unknown = [f for f in (*self.formats, *self.swappable) if f not in {x.name for x in FORMATS}]
        if unknown or not self.formats:
            raise BenchError(f"unknown format(s) {unknown}; choose from {', '.join(f.name for f in FORMATS)}")
        if min(self.n_ctx, default=0) < self.prompt_tokens + self.new_tokens:
            raise BenchError(f"every n_ctx must hold the prompt and the new tokens ({self.prompt_tokens + self.new_tokens})")
        if min(self.threads, default=0) < 1 or self.repeats < 1 or self.new_tokens < 2 or self.prompt_tokens < 1:
            raise BenchError("threads, repeats and prompt tokens must be at least 1, new tokens at least 2")
        if self.flash_attn not in ("off", "on", "auto"):
            raise BenchError(f"flash attention is off, on or auto, not {self.flash_attn!r}")
        if self.build not in LLAMACPP_BUILDS:
            raise BenchError(f"llama.cpp build {self.build!r} is not one of {', '.join(LLAMACPP_BUILDS)}")


def _converters(python: str) -> str:
    """The converters of the venv's llama.cpp, unpacked once from the sdist it was built from."""
    venv = os.path.dirname(os.path.dirname(python))
    folder = os.path.join(venv, "converters")
    if os.path.exists(os.path.join(folder, "convert_hf_to_gguf.py")):
        return folder
    prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
    partial = folder + ".partial"
    with tarfile.open(os.path.join(venv, "sdist", SDIST)) as sdist:
        members = []
        for member in sdist.getmembers():
            rest = member.name[len(prefix) :] if member.name.startswith(prefix) else ""
            if member.isfile() and any(rest == p or (p.endswith("/") and rest.startswith(p)) for p in _CONVERTER_PARTS):
                member.name = rest
                members.append(member)
        sdist.extractall(partial, members=members, filter="data")
    os.rename(partial, folder)
    return folder


def _peer(python: str, args: List[str], what: str) -> Dict[str, Any]:
    """One bench/llamacpp_peer.py process -> its JSON line (with its peak RSS)."""
    proc = run_process([python, peer_script("llamacpp_peer.py")] + args)
    if proc.returncode != 0:
        last = (proc.stdout.strip().splitlines() or [""])[-1]
        raise BenchError(f"llama.cpp {what} failed: {last or proc.stderr.strip()[-500:]}")
    return json_report(proc, f"llama.cpp {what}")


def _convert(python: str, files: LlmFiles, formats: Sequence[Format], out: str) -> Dict[str, Any]:
    args = ["convert", "--converters", _converters(python), "--model-dir", files.model_dir, "--out", out]
    for fmt in formats:
        args += ["--outtype", fmt.gguf] if fmt.gguf else ["--quantize", fmt.quantize or ""]
    for name, folder in files.adapter_dirs.items():
        args += ["--adapter", f"{name}={folder}"]
    return _peer(python, args, "conversion")


def convert_with_llamacpp(
    python: str, files: LlmFiles, out: str, formats: Optional[Sequence[Format]] = None
) -> Dict[str, Any]:
    """llama.cpp's converters on the model (each of `formats`, default F32; a quantized one made from
    the F32 file) and each adapter, timed: the venv's convert report ({"models": {"f32": {"path",
    "bytes", "convert_s"}, ...}, "adapters": {name: {...}}}).

    Raises:
      BenchError: a conversion failed.
    """
    return _convert(python, files, formats or [f for f in FORMATS if f.name == "F32"], out)


def convert_once(files: LlmFiles, out: str, formats: Sequence[Format], say: Callable[[str], None]) -> Dict[str, Any]:
    """convert_with_llamacpp's report on `formats` (the peer venv made on first use), kept in
    out/convert.json: the formats an earlier call converted there are read back, the others
    converted (each GGUF file is named for its type, so they sit side by side) and added to it.

    Raises:
      BenchError: the peer venv or a conversion failed.
    """
    report_path = os.path.join(out, "convert.json")
    converted: Dict[str, Any] = {"models": {}, "adapters": {}}
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            converted = json.load(f)
    missing = [fmt for fmt in formats if (fmt.gguf or fmt.quantize or "").lower() not in converted["models"]]
    if not missing:
        return converted
    say(f"[llamacpp] converting {', '.join(fmt.name for fmt in missing)} with llama.cpp's converters")
    fresh = convert_with_llamacpp(peer_python(VENV, say), files, out, missing)
    converted["models"].update(fresh["models"])
    converted["adapters"] = fresh["adapters"]
    with open(report_path, "w", encoding="utf-8") as f:
        json.dump(converted, f)
    return converted


def llamacpp_logits(
    python: str, model: str, prompt: str, out: str, n_ctx: int, lora: Optional[str] = None, threads: int = 1
) -> Dict[str, Any]:
    """The peer's logits command: every position's logits of the ids in the .npy `prompt` from the GGUF
    `model` (with the GGUF adapter `lora` active at scale 1), saved to `out` as float32 [T, vocab].

    Returns:
      Its report ({"path", "positions", "n_vocab", "decode_s"}).

    Raises:
      BenchError: the process failed.
    """
    args = ["logits", "--model", model, "--prompt", prompt, "--n-ctx", str(n_ctx), "--out", out]
    args += ["--threads", str(threads)]
    if lora is not None:
        args += ["--lora", lora, "--active", "0"]
    return _peer(python, args, "logits")


def _export(files: LlmFiles, fmt: Format, bound: int, out: str, log: Callable[[str], None]) -> Dict[str, Any]:
    start = time.perf_counter()
    partitioner = XnnpackPartitioner(**dict(fmt.edgeshare or ()))
    result = export_hf_lora(files.model_dir, files.adapter_dirs, out, bound, partitioner)
    first = next(iter(files.adapter_dirs))
    if result.foundation_program is None:
        raise BenchError(f"the {fmt.name} export at bound {bound} wrote no foundation.pte")
    log(f"[llamacpp] edgeshare {fmt.name} at bound {bound} exported in {time.perf_counter() - start:.0f} s")
    return {
        "program": result.program_paths[first],
        "programs": [result.program_paths[name] for name in files.adapter_dirs],
        "foundation": result.foundation_path,
        "foundation_program": result.foundation_program,
        "export_s": time.perf_counter() - start,
        "foundation_bytes": os.path.getsize(result.foundation_path),
        "adapter_bytes": result.adapter_bytes[first],
    }


def _reference(files: LlmFiles, prompt: str, new_tokens: int) -> Dict[str, Any]:
    """transformers + PEFT (first adapter), greedy with its own KV cache, 1 thread; and the bare
    model's logits of the same prompt (foundation_logits)."""
    first = next(iter(files.adapter_dirs))
    base = load_hf_model(files.model_dir).eval()
    # The PEFT model shares base's weights and leaves base itself unadapted.
    model = load_peft_adapter(base, first, files.adapter_dirs[first]).eval()
    ids = torch.from_numpy(np.load(prompt))
    generate_torch(model, ids, 2)  # warm-up: the first cached call
    generated = generate_torch(model, ids, new_tokens)
    with torch.inference_mode():
        generated["logits"] = model(input_ids=ids).logits.float().numpy()
        generated["foundation_logits"] = base(input_ids=ids).logits.float().numpy()
    return generated


def _configs(options: LlamacppOptions) -> List[Tuple[Format, int, int]]:
    chosen = [f for f in FORMATS if f.name in options.formats]
    return [(fmt, bound, threads) for bound in options.n_ctx for threads in options.threads for fmt in chosen]


def measure_llamacpp(
    spec: LlmSpec,
    work_dir: str,
    options: LlamacppOptions,
    log: Callable[[str], None] = lambda message: None,
    files: Optional[LlmFiles] = None,
) -> Dict[str, Any]:
    """Converts, exports and times both sides interleaved -> the stage's figures.

    Args:
      spec: the model (LLAMACPP_MODELS); its max_seq_len is replaced by each bound.
      files: a model and adapters already on disk, of spec's shape (the real model, with its
        held-out text as training.held_out_ids), instead of the seeded model spec describes.
      work_dir: where the model, conversions and exports go.
      options: formats, bounds, threads, lengths, repeats.
      log: progress messages.

    Returns:
      {"llamacpp": {"model", "flash_attn", "rows": [one per (format, n_ctx, threads)], ...}}.

    Raises:
      BenchError: an option is out of range, or the venv, a conversion, an export or a run failed.
    """
    options.check()
    start = time.perf_counter()
    spec = dataclasses.replace(spec, max_seq_len=max(options.n_ctx))  # positions the config covers
    python = peer_python(llamacpp_venv(options.build), log)
    os.makedirs(work_dir, exist_ok=True)
    if files is None:
        log(f"[llamacpp] writing the model and {spec.adapters} adapters ({spec.describe()})")
        files = save_llm(spec, os.path.join(work_dir, "hf"))
    prompt = os.path.join(work_dir, "prompt.npy")
    if files.training is not None:  # held-out text: what a trained model's logits are about
        ids = files.training.held_out_ids[: options.prompt_tokens].view(1, -1)
        if ids.shape[1] < options.prompt_tokens:
            raise BenchError(f"--prompt-tokens {options.prompt_tokens}: the held-out text has {ids.shape[1]} tokens")
    else:
        ids = torch.randint(0, spec.vocab, (1, options.prompt_tokens), generator=torch.Generator().manual_seed(164))
    np.save(prompt, ids.numpy().astype(np.int64))
    log("[llamacpp] transformers + PEFT reference tokens")
    reference = _reference(files, prompt, options.new_tokens)
    formats = [f for f in FORMATS if f.name in options.formats]
    log(f"[llamacpp] converting with llama.cpp's converters: {', '.join(f.name for f in formats)} and the adapters")
    converted = _convert(python, files, formats, os.path.join(work_dir, "gguf"))
    exports = {
        (fmt.name, bound): _export(files, fmt, bound, os.path.join(work_dir, f"edgeshare_{fmt.name}_{bound}"), log)
        for fmt in formats
        if fmt.edgeshare is not None
        for bound in options.n_ctx
    }
    swappable_exports = {
        (fmt.name, bound): export_swappable(
            files, dict(fmt.edgeshare or ()), bound, os.path.join(work_dir, f"edgeshare_swappable_{fmt.name}_{bound}"), log
        )
        for fmt in formats
        if fmt.edgeshare is not None and fmt.name in options.swappable
        for bound in options.n_ctx
    }
    for ex in exports.values():
        ex.update(logit_cosines(ex["program"], ex["foundation"], np.load(prompt), reference["logits"]))
        bare = logit_cosines(
            ex["foundation_program"], ex["foundation"], np.load(prompt), reference["foundation_logits"]
        )
        ex.update({f"foundation_{k}": v for k, v in bare.items()})
    adapters = [converted["adapters"][name]["path"] for name in files.adapter_dirs]
    for fmt in formats:
        entry = converted["models"][(fmt.gguf or fmt.quantize or "").lower()]
        out = os.path.join(work_dir, f"llamacpp_logits_{fmt.name}.npy")
        args = ["logits", "--model", entry["path"], "--lora", adapters[0], "--active", "0", "--prompt", prompt]
        args += ["--n-ctx", str(max(options.n_ctx)), "--out", out]
        _peer(python, args, f"{fmt.name} logits")
        entry.update(cosine_figures(np.load(out), reference["logits"]))
        args = ["logits", "--model", entry["path"], "--prompt", prompt]
        args += ["--n-ctx", str(max(options.n_ctx)), "--out", out]
        _peer(python, args, f"{fmt.name} logits without an adapter")
        bare = cosine_figures(np.load(out), reference["foundation_logits"])
        entry.update({f"foundation_{k}": v for k, v in bare.items()})
    swappable: SwappableRuns = {}
    ours: Dict[Tuple[str, int, int], List[Dict[str, Any]]] = {}
    theirs: Dict[Tuple[str, int, int], List[Dict[str, Any]]] = {}
    everything: Dict[Tuple[str, int, int], List[Dict[str, Any]]] = {}
    for r in range(options.repeats):
        log(f"[llamacpp] timing, interleaved: repeat {r + 1} of {options.repeats}")
        for fmt, bound, threads in _configs(options):
            key = (fmt.name, bound, threads)
            if (fmt.name, bound) in exports:
                ex = exports[(fmt.name, bound)]
                timed = run_generate(
                    ex["program"], [ex["foundation"]], prompt, options.new_tokens, threads, _WARMUP_TOKENS
                )
                ours.setdefault(key, []).append(timed)
                first, *rest = ex["programs"]
                loaded = run_generate(first, [ex["foundation"]], prompt, options.new_tokens, threads, 0, rest)
                everything.setdefault(key, []).append(loaded)
            if (fmt.name, bound) in swappable_exports:
                round_ = time_swappable(
                    swappable_exports[(fmt.name, bound)], prompt, options.new_tokens, threads, _WARMUP_TOKENS
                )
                for side, report in round_.items():
                    swappable.setdefault(key, {}).setdefault(side, []).append(report)
            gguf = converted["models"][(fmt.gguf or fmt.quantize or "").lower()]["path"]
            args = ["generate", "--model", gguf, "--active", "0", "--prompt", prompt]
            for path in adapters:
                args += ["--lora", path]
            args += ["--new-tokens", str(options.new_tokens), "--n-ctx", str(bound), "--threads", str(threads)]
            args += ["--flash-attn", options.flash_attn, "--warmup-tokens", str(_WARMUP_TOKENS)]
            args += ["--switch-rounds", str(_SWITCH_ROUNDS)]
            theirs.setdefault(key, []).append(_peer(python, args, f"{fmt.name} generation"))
    files_info = {"gguf": converted, "edgeshare": {f"{k[0]}_{k[1]}": v for k, v in exports.items()}}
    rows = llamacpp_rows(options, files_info, ours, theirs, reference["tokens"], everything, swappable)
    return {
        "llamacpp": {
            "peer": f"llama.cpp (llama-cpp-python {VERSION}, built with {LLAMACPP_BUILDS[options.build]})",
            "model": spec.describe(),
            "flash_attn": options.flash_attn,
            "prompt_tokens": options.prompt_tokens,
            "new_tokens": options.new_tokens,
            "repeats": options.repeats,
            "rows": rows,
            "transformers_prefill_ms": reference["prefill_ms"],
            "transformers_decode_tokens_per_s": reference["decode_tokens_per_s"],
            "convert_s": {k: v["convert_s"] for k, v in converted["models"].items()},
            "export_s": {f"{k[0]}_{k[1]}": v["export_s"] for k, v in exports.items()},
            "swappable_export_s": {f"{k[0]}_{k[1]}": v["export_s"] for k, v in swappable_exports.items()},
            "stage_s": time.perf_counter() - start,
            **_training_figures(files.training, files.adapter_training),
        }
    }


def _training_figures(training: Optional[Training], adapters: Dict[str, Training]) -> Dict[str, Any]:
    """The report's record of the model's and the adapters' training ({} for seeded random weights)."""
    if training is None:
        return {}
    figures: Dict[str, Any] = {
        "trained_steps": training.steps,
        "train_s": training.seconds,
        "held_out_loss_before": training.loss_before,
        "held_out_loss_after": training.loss_after,
        "prompt": "held-out stdlib docstring text",
    }
    if adapters:
        first = adapters[min(adapters)]
        figures.update(
            adapter_steps=first.steps,
            adapters_train_s=sum(t.seconds for t in adapters.values()),
            adapter1_held_out_loss_before=first.loss_before,
            adapter1_held_out_loss_after=first.loss_after,
        )
    return figures


def _median_switch(runs: Sequence[Dict[str, Any]]) -> float:
    """The median adapter switch after each run's first round, or NaN without switches."""
    later: List[float] = []
    for run in runs:
        switches = run.get("switch_ms", [])
        later += switches[len(switches) // _SWITCH_ROUNDS :]
    return median(later) if later else float("nan")


def _agree(runs: Sequence[Dict[str, Any]], tokens: Sequence[int]) -> Optional[bool]:
    return all(list(r["tokens"]) == list(tokens) for r in runs) if runs else None


def _first_difference(runs: Sequence[Dict[str, Any]], tokens: Sequence[int]) -> Optional[int]:
    """The first position where a run's tokens leave `tokens` (None: none does)."""
    worst: Optional[int] = None
    for r in runs:
        for i, (a, b) in enumerate(zip(r["tokens"], tokens)):
            if a != b:
                worst = i if worst is None else min(worst, i)
                break
    return worst


def llamacpp_rows(
    options: LlamacppOptions,
    files: Dict[str, Any],
    ours: Dict[Tuple[str, int, int], List[Dict[str, Any]]],
    theirs: Dict[Tuple[str, int, int], List[Dict[str, Any]]],
    reference: Sequence[int],
    everything: Optional[Dict[Tuple[str, int, int], List[Dict[str, Any]]]] = None,
    swappable: Optional[SwappableRuns] = None,
) -> List[Dict[str, Any]]:
    """One row per (format, n_ctx, threads) from the interleaved runs: medians, ratios, agreement.

    Args:
      options: what was measured.
      files: {"gguf": the conversion's report, "edgeshare": {"<format>_<bound>": export info}}.
      ours: tools/generate reports (with peak_rss_kib) per configuration; none for a format
        edgeshare does not have.
      theirs: llamacpp_peer.py generate reports (with peak_rss_kib) per configuration.
      reference: transformers' greedy tokens.
      everything: tools/generate reports (with peak_rss_kib) of one process loading the foundation
        and every adapter's program, per configuration.
      swappable: the swappable program's rounds per configuration (bench/_llm_peer_swap.py); its
        rows get that module's swappable_fields.

    Returns:
      Rows; *_over_llamacpp ratios are edgeshare / llama.cpp (prefill below 1 and decode above 1:
      edgeshare faster); NaN where edgeshare has no such format.
    """
    rows = []
    adapters = files["gguf"]["adapters"]
    for fmt, bound, threads in _configs(options):
        key = (fmt.name, bound, threads)
        mine, peer = ours.get(key, []), theirs.get(key, [])
        gguf = files["gguf"]["models"][(fmt.gguf or fmt.quantize or "").lower()]
        export = files["edgeshare"].get(f"{fmt.name}_{bound}", {})
        row: Dict[str, Any] = {
            "format": fmt.name,
            "n_ctx": bound,
            "threads": threads,
            "edgeshare_weights_mb": export["foundation_bytes"] / MIB if export else float("nan"),
            "edgeshare_adapter_mb": export["adapter_bytes"] / MIB if export else float("nan"),
            "llamacpp_weights_mb": gguf["bytes"] / MIB,
            "llamacpp_adapter_mb": next(iter(adapters.values()))["bytes"] / MIB if adapters else float("nan"),
            "edgeshare_peak_rss_mb": median(r["peak_rss_kib"] / 1024.0 for r in mine),
            "llamacpp_peak_rss_mb": median(r["peak_rss_kib"] / 1024.0 for r in peer),
            # The interpreter and llama_cpp's import, before the model: part of its peak, not of llama.cpp.
            "llamacpp_rss_before_load_mb": median(r.get("rss_before_load_kib", 0) / 1024.0 for r in peer),
            "edgeshare_prefill_ms": median(r["prefill_ms"] for r in mine),
            "llamacpp_prefill_ms": median(r["prefill_ms"] for r in peer),
            "edgeshare_first_prefill_ms": median(r.get("first_prefill_ms", float("nan")) for r in mine),
            "llamacpp_first_prefill_ms": median(r["first_prefill_ms"] for r in peer),
            "edgeshare_decode_tokens_per_s": median(r["decode_tokens_per_s"] for r in mine),
            "llamacpp_decode_tokens_per_s": median(r["decode_tokens_per_s"] for r in peer),
            "edgeshare_tokens_match_transformers": _agree(mine, reference),
            "llamacpp_tokens_match_transformers": _agree(peer, reference),
            "llamacpp_tokens_match_edgeshare": _agree(peer, mine[0]["tokens"]) if mine else None,
            "llamacpp_first_difference": _first_difference(peer, reference),
            # llama_set_adapters_lora + KV cache clear, median after the first round (edgeshare's
            # swap: the tiny-LLM stage's adapter_swap_ms_llm).
            "llamacpp_switch_ms": _median_switch(peer),
            "samples": len(peer),
        }
        row["prefill_over_llamacpp"] = ratio(row["edgeshare_prefill_ms"], row["llamacpp_prefill_ms"])
        row["decode_rate_over_llamacpp"] = ratio(row["edgeshare_decode_tokens_per_s"], row["llamacpp_decode_tokens_per_s"])
        row["weights_over_llamacpp"] = ratio(row["edgeshare_weights_mb"], row["llamacpp_weights_mb"])
        # The first adapter's logits over the prompt against transformers + PEFT in fp32.
        row["edgeshare_logit_cosine_min"] = export.get("logit_cosine_min", float("nan"))
        row["edgeshare_logit_cosine_median"] = export.get("logit_cosine_median", float("nan"))
        # llama.cpp's logits of the same prompt and adapter, against the same reference.
        row["llamacpp_logit_cosine_min"] = gguf.get("logit_cosine_min", float("nan"))
        row["llamacpp_logit_cosine_median"] = gguf.get("logit_cosine_median", float("nan"))
        # The same figures without an adapter (foundation.pte; the GGUF alone) against the bare model:
        # the bench's adapters are seeded random, and on them a format's error can be the adapter's.
        for side, entry in (("edgeshare", export), ("llamacpp", gguf)):
            for stat in ("min", "median"):
                field = f"foundation_logit_cosine_{stat}"
                row[f"{side}_{field}"] = entry.get(field, float("nan"))
        loaded = (everything or {}).get(key, [])
        row["edgeshare_all_programs"] = len(export.get("programs", ())) if loaded else 0
        row["edgeshare_all_programs_peak_rss_mb"] = median(r["peak_rss_kib"] / 1024.0 for r in loaded)
        row["rss_budget_mb"] = (gguf["bytes"] + sum(a["bytes"] for a in adapters.values())) / MIB + RSS_MARGIN_MIB
        row["all_programs_rss_over_budget"] = ratio(row["edgeshare_all_programs_peak_rss_mb"], row["rss_budget_mb"])
        if key in (swappable or {}):
            row.update(swappable_fields(mine, swappable[key], len(adapters), row["llamacpp_switch_ms"]))
        rows.append(row)
    return rows


# (header, row key, width) of the table's columns.
_COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    ("format", "format", 6),
    ("n_ctx", "n_ctx", 6),
    ("thr", "threads", 4),
    ("es MiB", "edgeshare_weights_mb", 8),
    ("lc MiB", "llamacpp_weights_mb", 8),
    ("es RSS", "edgeshare_peak_rss_mb", 8),
    ("lc RSS", "llamacpp_peak_rss_mb", 8),
    ("es RSS all", "edgeshare_all_programs_peak_rss_mb", 11),
    ("budget", "rss_budget_mb", 8),
    ("es pre ms", "edgeshare_prefill_ms", 10),
    ("lc pre ms", "llamacpp_prefill_ms", 10),
    ("es/lc", "prefill_over_llamacpp", 7),
    ("es 1st ms", "edgeshare_first_prefill_ms", 10),
    ("lc 1st ms", "llamacpp_first_prefill_ms", 10),
    ("es tok/s", "edgeshare_decode_tokens_per_s", 9),
    ("lc tok/s", "llamacpp_decode_tokens_per_s", 9),
    ("es/lc", "decode_rate_over_llamacpp", 7),
    ("cos min", "edgeshare_logit_cosine_min", 9),
    ("lc cos", "llamacpp_logit_cosine_min", 8),
    ("fd cos", "edgeshare_foundation_logit_cosine_min", 8),
    ("lc fd", "llamacpp_foundation_logit_cosine_min", 8),
    ("lc sw ms", "llamacpp_switch_ms", 9),
    ("es=hf", "edgeshare_tokens_match_transformers", 6),
    ("lc=hf", "llamacpp_tokens_match_transformers", 6),
    ("lc=es", "llamacpp_tokens_match_edgeshare", 6),
)
# The swappable program's columns, for the rows that measured it.
_SWAP_COLUMNS: Tuple[Tuple[str, str, int], ...] = (
    ("format", "format", 6),
    ("n_ctx", "n_ctx", 6),
    ("thr", "threads", 4),
    ("es swap ms", "edgeshare_swap_ms", 11),
    ("lc sw ms", "llamacpp_switch_ms", 9),
    ("es/lc", "swap_over_llamacpp_switch", 7),
    ("sw pre ms", "swappable_prefill_ms", 10),
    ("own pre ms", "edgeshare_prefill_ms", 11),
    ("sw/own", "swappable_prefill_over_own", 8),
    ("sw tok/s", "swappable_decode_tokens_per_s", 9),
    ("own tok/s", "edgeshare_decode_tokens_per_s", 10),
    ("sw/own", "swappable_decode_rate_over_own", 8),
    ("sw=own", "swappable_tokens_match_own", 7),
)
# The stage's summary lines (label, key of result["llamacpp"]).
SUMMARY: Rows = (
    ("  peer", "peer"),
    ("  model", "model"),
    ("  llama.cpp flash attention", "flash_attn"),
    ("  transformers prefill ms (1 thread)", "transformers_prefill_ms"),
    ("  transformers decode tokens/s (1 thread)", "transformers_decode_tokens_per_s"),
)


def format_llamacpp_table(stage: Dict[str, Any]) -> str:
    """The stage's rows as a text table (es: edgeshare, lc: llama.cpp, hf: transformers)."""
    lines = ["Against llama.cpp: greedy generation, interleaved fresh processes"]
    lines += [f"{label:42s} {format_value(stage.get(key))}" for label, key in SUMMARY]
    lines.append(
        f"  prompt {stage.get('prompt_tokens')} tokens, {stage.get('new_tokens')} new; medians of "
        f"{stage.get('repeats')} runs; MiB: weights on disk; RSS: each process's peak, MiB"
    )
    lines.append(
        "  RSS all: one tools/generate with foundation.ptd and every adapter's program loaded, each "
        f"generating; budget: the GGUF, its adapters' GGUF files and {RSS_MARGIN_MIB} MiB"
    )
    lines.append(
        "  cos min: the first adapter program's logits over the prompt against transformers + PEFT in fp32, "
        "the lowest cosine of any position; lc cos: llama.cpp's logits with that adapter, the same figure; "
        "fd cos, lc fd: the same two without an adapter (foundation.pte, the GGUF alone) against the bare model"
    )
    lines.append("".join(f"{header:>{width}}" for header, _, width in _COLUMNS))
    for row in stage.get("rows", []):
        lines.append("".join(f"{format_value(row.get(key)):>{width}}" for _, key, width in _COLUMNS))
    swapped = [row for row in stage.get("rows", []) if "edgeshare_swap_ms" in row]
    if swapped:
        lines.append(
            "  swappable (lora.pte + an adapter .ptd each) against the adapter's own program, same rounds; "
            "swap: Method::rebind_data onto an adapter bound before, median; lc sw: llama_set_adapters_lora "
            "+ cache clear"
        )
        lines.append("".join(f"{header:>{width}}" for header, _, width in _SWAP_COLUMNS))
        for row in swapped:
            lines.append("".join(f"{format_value(row.get(key)):>{width}}" for _, key, width in _SWAP_COLUMNS))
    return "\n".join(lines)
