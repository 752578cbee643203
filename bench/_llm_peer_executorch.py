"""The tiny-LLM case's peer (opt-in, `bench/llm --peer executorch`): ExecuTorch 1.5.1 lowers the
same PEFT model (first adapter; foundation weights in its own .ptd); its forward is timed
interleaved with lora_runner processes, and its KV-cache generation with tools/generate, 1 thread.

The peer runs in the venv bench/_peer_executorch.py names, through bench/executorch_peer.py; it gets the
model as torch.export.save'd programs:
- "t1" / "t32": the stateless forward at T=1 and T=32 (ExecuTorch's XNNPACK flow lowers static
  shapes here; edgeshare's program is one dynamic export for both lengths);
- "cached": the SAME KV-cache wrapper edgeshare exports as "forward_cached" (exir.hf_cache.
  CachedCausalLM over the PEFT model, input_ids [1, T] with T in 1..max_seq_len and start_pos, the
  cache as buffers written in place, the last position's logits), exported here as edgeshare's
  exporter exports it (strict=False, cached_dynamic_shapes), with transformers' own attention over
  the whole cache instead of edgeshare's operator, which ExecuTorch does not have. ExecuTorch keeps the mutated buffers in the method's planned memory, so
  one method prefills the 32-token prompt and decodes each new token, as tools/generate does.
  Lowering it is optional: if ExecuTorch refuses it, the forward figures stay and the refusal is
  listed under not_measured ("peer_generate").
"""

import os
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
from edgeshare.bench._llm_measure import PROMPT_TOKENS, LlmExported, forward_config, generate
from edgeshare.bench._llm_model import LlmFiles
from edgeshare.bench._peer import PeerProcess, peer_python, peer_script, save_program, write_manifest
from edgeshare.bench._peer_executorch import VENV
from edgeshare.bench._runner import run_runner
from edgeshare.bench._stats import MIB, median, ratio
from edgeshare.exir.hf import CausalLMLogits, load_hf_model, load_peft_adapter
from edgeshare.exir.hf_cache import CachedCausalLM, cached_dynamic_shapes

__all__ = ["LLM_PEER_GENERATE_KEYS", "LLM_PEER_KEYS", "PEER_NOT_MEASURED", "generate_figures", "measure_llm_peer"]

LLM_PEER_KEYS = (
    "peer_latency_ms_t1",
    "peer_latency_ms_t32",
    "peer_edgeshare_latency_ms_t1",
    "peer_edgeshare_latency_ms_t32",
    "latency_t1_over_peer",
    "latency_t32_over_peer",
)
# With generation: prefill_over_peer < 1 and decode_rate_over_peer > 1 mean edgeshare is faster.
LLM_PEER_GENERATE_KEYS = (
    "peer_prefill_ms",
    "peer_decode_tokens_per_s",
    "peer_edgeshare_prefill_ms",
    "peer_edgeshare_decode_tokens_per_s",
    "prefill_over_peer",
    "decode_rate_over_peer",
)
# measure_llm_peer's key for what it could not measure (run_llm merges it into "not_measured").
PEER_NOT_MEASURED = "peer_not_measured"
CACHED = "cached"


def _save(
    module: torch.nn.Module, inputs: tuple, out_dir: str, name: str, dynamic_shapes: Optional[Any] = None
) -> Dict[str, Any]:
    return {**save_program(module, inputs, out_dir, name, strict=False, dynamic_shapes=dynamic_shapes), "separate": True}


def _specs(files: LlmFiles, exported: LlmExported, folder: str, max_seq_len: Optional[int]) -> Dict[str, Any]:
    """The manifest's programs; "cached" (the KV-cache wrapper) when max_seq_len is given."""
    os.makedirs(folder, exist_ok=True)
    first = next(iter(files.adapter_dirs))
    peft_model = load_peft_adapter(load_hf_model(files.model_dir), first, files.adapter_dirs[first]).eval()
    module = CausalLMLogits(peft_model).eval()
    specs = {f"t{t}": _save(module, (torch.from_numpy(np.load(exported.inputs[t])),), folder, f"t{t}") for t in (1, 32)}
    if max_seq_len is not None:
        prompt = torch.from_numpy(np.load(exported.inputs[PROMPT_TOKENS]))
        # ExecuTorch has no edgeshare::cached_attention: transformers' own attention over the cache.
        cached = CachedCausalLM(peft_model, max_seq_len, own_attention=False).eval()
        start = torch.tensor(0, dtype=torch.long)
        shapes = cached_dynamic_shapes(max_seq_len)
        specs[CACHED] = _save(cached, (prompt, start), folder, CACHED, shapes)
        specs[CACHED].update({"dynamic_t_max": max_seq_len, "optional": True})
    return specs


def _forward_figures(peer: PeerProcess, ours: Dict[int, List[float]], theirs: Dict[int, List[float]]) -> Dict:
    out: Dict[str, Any] = {}
    for tokens in (1, 32):
        info = peer.ready["programs"][f"t{tokens}"]
        out[f"peer_latency_ms_t{tokens}"] = median(theirs[tokens])
        out[f"peer_edgeshare_latency_ms_t{tokens}"] = median(ours[tokens])
        out[f"latency_t{tokens}_over_peer"] = ratio(
            out[f"peer_edgeshare_latency_ms_t{tokens}"], out[f"peer_latency_ms_t{tokens}"]
        )
        out[f"peer_max_abs_error_t{tokens}"] = info.get("max_abs_error")
        out[f"peer_export_s_t{tokens}"] = info.get("export_s")
        out[f"peer_pte_mb_t{tokens}"] = info.get("pte_bytes", 0) / MIB
        out["peer_ptd_mb"] = info.get("ptd_bytes", 0) / MIB
    return out


def generate_figures(
    info: Dict[str, Any],
    ours: List[Dict[str, Any]],
    theirs: List[Dict[str, Any]],
    theirs_warm: List[Dict[str, Any]],
    reference: List[int],
) -> Dict[str, Any]:
    """Medians of the interleaved generations (ours: fresh tools/generate processes; theirs: freshly
    loaded methods; theirs_warm: the same method again); every run's tokens must equal transformers'."""

    def of(runs: List[Dict[str, Any]], key: str) -> float:
        return median(g[key] for g in runs)

    out: Dict[str, Any] = {
        "peer_prefill_ms": of(theirs, "prefill_ms"),
        "peer_decode_tokens_per_s": of(theirs, "decode_tokens_per_s"),
        "peer_prefill_ms_warm": of(theirs_warm, "prefill_ms"),
        "peer_decode_tokens_per_s_warm": of(theirs_warm, "decode_tokens_per_s"),
        "peer_edgeshare_prefill_ms": of(ours, "prefill_ms"),
        "peer_edgeshare_decode_tokens_per_s": of(ours, "decode_tokens_per_s"),
        "peer_generate_tokens_match": all(g["tokens"] == reference for g in theirs + theirs_warm + ours),
        "peer_max_abs_error_cached": info.get("max_abs_error"),
        "peer_export_s_cached": info.get("export_s"),
        "peer_pte_mb_cached": info.get("pte_bytes", 0) / MIB,
    }
    out["prefill_over_peer"] = ratio(out["peer_edgeshare_prefill_ms"], out["peer_prefill_ms"])
    out["decode_rate_over_peer"] = ratio(out["peer_edgeshare_decode_tokens_per_s"], out["peer_decode_tokens_per_s"])
    return out


def measure_llm_peer(
    files: LlmFiles,
    exported: LlmExported,
    work_dir: str,
    repeats: int,
    iterations: Dict[int, int],
    warmup: int,
    log: Callable[[str], None] = lambda message: None,
    generation: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Lowers the first adapter's model with ExecuTorch and times it beside edgeshare -> figures.

    Args:
      files, exported: the model and edgeshare's files.
      work_dir: the peer's files go in work_dir/peer_executorch.
      repeats, iterations, warmup: as for edgeshare's forward (tokens -> timed runs).
      log: progress messages.
      generation: when the programs have "forward_cached": {"max_seq_len": N, "new_tokens": K,
        "tokens": transformers' greedy tokens}; then the KV-cache wrapper is lowered too and greedy
        generation is timed interleaved with tools/generate (LLM_PEER_GENERATE_KEYS). None: forward
        only.

    Returns:
      The figures (LLM_PEER_KEYS, and LLM_PEER_GENERATE_KEYS when measured); what could not be
      measured, and why, under PEER_NOT_MEASURED.

    Raises:
      BenchError: the venv, the peer's export or load, or a timing failed.
    """
    start = time.perf_counter()
    python = peer_python(VENV, log)
    folder = os.path.join(work_dir, "peer_executorch")
    specs = _specs(files, exported, folder, generation["max_seq_len"] if generation else None)
    manifest_path = write_manifest(folder, {"out_dir": folder, "programs": specs})
    script = peer_script("executorch_peer.py")
    log("[tiny-llm] peer executorch: lowering with its XNNPACK flow")
    peer = PeerProcess(python, script, manifest_path, os.path.join(folder, "peer.log"))
    not_measured: Dict[str, str] = {}
    cached_info = peer.ready["programs"].get(CACHED)
    if generation is None:
        not_measured["peer_generate"] = "the programs have no 'forward_cached' method"
    elif cached_info is not None and "error" in cached_info:
        not_measured["peer_generate"] = f"ExecuTorch could not lower the KV-cache wrapper: {cached_info['error']}"
    generating = generation is not None and not not_measured
    ours: Dict[int, List[float]] = {1: [], 32: []}
    theirs: Dict[int, List[float]] = {1: [], 32: []}
    ours_generate: List[Dict[str, Any]] = []
    theirs_generate: List[Dict[str, Any]] = []
    theirs_warm: List[Dict[str, Any]] = []
    try:
        log(f"[tiny-llm] peer executorch: timing interleaved ({repeats} repeats)")
        for _ in range(repeats):
            for tokens in (1, 32):
                n = iterations[tokens]
                ours[tokens] += run_runner(forward_config(exported, exported.programs[0], tokens, n, warmup))["latency_ms"]
                theirs[tokens] += peer.time(f"t{tokens}", 1, n, warmup)
            if generating:
                prompt = exported.inputs[PROMPT_TOKENS]
                ours_generate.append(generate(exported, prompt, generation["new_tokens"]))
                # Cold, as tools/generate's fresh process is (the program reloaded, untimed), then warm.
                theirs_generate.append(peer.generate(CACHED, 1, generation["new_tokens"], 0, True))
                theirs_warm.append(peer.generate(CACHED, 1, generation["new_tokens"], 0, False))
    finally:
        peer.close()
    out: Dict[str, Any] = {"peer": f"executorch {str(peer.ready.get('executorch', '?')).split('+')[0]}"}
    out.update(_forward_figures(peer, ours, theirs))
    if generating:
        out.update(
            generate_figures(cached_info or {}, ours_generate, theirs_generate, theirs_warm, generation["tokens"])
        )
    out[PEER_NOT_MEASURED] = not_measured
    out["peer_stage_s"] = time.perf_counter() - start
    return out
