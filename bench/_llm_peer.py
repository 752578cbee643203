"""The tiny-LLM case's peer (opt-in, `bench/llm --peer executorch`): ExecuTorch 1.5.1 lowers the
same PEFT model (first adapter; foundation weights in its own .ptd) and its forward is timed
interleaved with lora_runner processes, 1 thread.

The peer runs in the venv bench/_peer.py makes, through bench/executorch_peer.py; it gets the
model as torch.export.save'd programs at T=1 and T=32 (ExecuTorch's XNNPACK flow lowers static
shapes here; edgeshare's program is one dynamic export for both lengths).
"""

import os
import statistics
import time
from typing import Any, Callable, Dict, List

import numpy as np
import torch
from edgeshare.bench._llm_measure import LlmExported, run_forward
from edgeshare.bench._llm_model import LlmFiles
from edgeshare.bench._peer import PeerProcess, peer_python
from edgeshare.exir.hf import CausalLMLogits, load_hf_model, load_peft_adapter

__all__ = ["LLM_PEER_KEYS", "measure_llm_peer"]

LLM_PEER_KEYS = (
    "peer_latency_ms_t1",
    "peer_latency_ms_t32",
    "peer_edgeshare_latency_ms_t1",
    "peer_edgeshare_latency_ms_t32",
    "latency_t1_over_peer",
    "latency_t32_over_peer",
)


def _save(module: torch.nn.Module, ids: torch.Tensor, out_dir: str, name: str) -> Dict[str, Any]:
    pt2 = os.path.join(out_dir, f"{name}.pt2")
    inputs = os.path.join(out_dir, f"{name}_inputs.pt")
    with torch.no_grad():
        torch.export.save(torch.export.export(module, (ids,), strict=False), pt2)
    torch.save((ids,), inputs)
    return {"pt2": pt2, "inputs": inputs, "separate": True}


def _specs(files: LlmFiles, exported: LlmExported, folder: str) -> Dict[str, Dict[str, Any]]:
    os.makedirs(folder, exist_ok=True)
    first = next(iter(files.adapter_dirs))
    module = CausalLMLogits(load_peft_adapter(load_hf_model(files.model_dir), first, files.adapter_dirs[first]))
    return {
        f"t{t}": _save(module.eval(), torch.from_numpy(np.load(exported.inputs[t])), folder, f"t{t}") for t in (1, 32)
    }


def measure_llm_peer(
    files: LlmFiles,
    exported: LlmExported,
    work_dir: str,
    repeats: int,
    iterations: Dict[int, int],
    warmup: int,
    log: Callable[[str], None] = lambda message: None,
) -> Dict[str, Any]:
    """Lowers the first adapter's model with ExecuTorch and times it beside edgeshare -> figures.

    Raises:
      BenchError: the venv, the peer's export or load, or a timing failed.
    """
    import json  # noqa: PLC0415

    start = time.perf_counter()
    python = peer_python("executorch", log)
    folder = os.path.join(work_dir, "peer_executorch")
    manifest_path = os.path.join(folder, "manifest.json")
    specs = _specs(files, exported, folder)
    with open(manifest_path, "w") as f:
        json.dump({"out_dir": folder, "programs": specs}, f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "executorch_peer.py")
    log("[tiny-llm] peer executorch: lowering with its XNNPACK flow")
    peer = PeerProcess(python, script, manifest_path, os.path.join(folder, "peer.log"))
    ours: Dict[int, List[float]] = {1: [], 32: []}
    theirs: Dict[int, List[float]] = {1: [], 32: []}
    try:
        log(f"[tiny-llm] peer executorch: timing interleaved ({repeats} repeats)")
        for _ in range(repeats):
            for tokens in (1, 32):
                n = iterations[tokens]
                ours[tokens] += run_forward(exported, exported.programs[0], tokens, n, warmup)["latency_ms"]
                theirs[tokens] += peer.time(f"t{tokens}", 1, n, warmup)
    finally:
        peer.close()
    out: Dict[str, Any] = {"peer": f"executorch {str(peer.ready.get('executorch', '?')).split('+')[0]}"}
    for tokens in (1, 32):
        info = peer.ready["programs"][f"t{tokens}"]
        out[f"peer_latency_ms_t{tokens}"] = float(statistics.median(theirs[tokens]))
        out[f"peer_edgeshare_latency_ms_t{tokens}"] = float(statistics.median(ours[tokens]))
        out[f"latency_t{tokens}_over_peer"] = (
            out[f"peer_edgeshare_latency_ms_t{tokens}"] / out[f"peer_latency_ms_t{tokens}"]
        )
        out[f"peer_max_abs_error_t{tokens}"] = info.get("max_abs_error")
        out[f"peer_export_s_t{tokens}"] = info.get("export_s")
        out[f"peer_pte_mb_t{tokens}"] = info.get("pte_bytes", 0) / (1024.0 * 1024.0)
        out["peer_ptd_mb"] = info.get("ptd_bytes", 0) / (1024.0 * 1024.0)
    out["peer_stage_s"] = time.perf_counter() - start
    return out
