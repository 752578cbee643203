"""The swappable side of the llama.cpp peer stage: the same model and adapters exported for
adapter swapping (lora.pte over foundation.ptd, one small .ptd per adapter), timed in the same
interleaved rounds as the adapter's own program and llama.cpp.

Per (format, bound, threads) measured this way, each round runs
- a fresh tools/generate of lora.pte bound to the first adapter's .ptd (greedy, the peer stage's
  prompt and warm-up), beside the own program's run (adapter1.pte) the stage makes anyway;
- a fresh lora_runner that loads lora.pte over the first adapter and binds every adapter in turn
  with Method::rebind_data, `SWAP_ROUNDS` rounds; the swap figure is the median bind after the
  first round (files open, each adapter's table made), the counterpart of llama.cpp's switch
  (llama_set_adapters_lora + KV cache clear) in the same stage.
"""

import time
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_model import LlmFiles
from edgeshare.bench._llm_swap import median_swap, swap_config
from edgeshare.bench._runner import BenchError, run_generate, run_runner
from edgeshare.bench._stats import median, ratio

__all__ = ["SWAP_ROUNDS", "SwappableRuns", "export_swappable", "swappable_fields", "time_swappable"]

# Rounds of binds over every adapter per lora_runner process.
SWAP_ROUNDS = 10

# (format, bound, threads) -> {"generate": [tools/generate reports], "swaps": [lora_runner reports]}.
SwappableRuns = Dict[Tuple[str, int, int], Dict[str, List[Dict[str, Any]]]]


def export_swappable(
    files: LlmFiles, options: Mapping[str, Any], bound: int, out: str, log: Callable[[str], None]
) -> Dict[str, Any]:
    """export_hf_swappable of the stage's model and adapters with the format's partitioner options.

    Returns:
      {"program": lora.pte, "foundation": foundation.ptd, "adapters": [.ptd per adapter, in order],
       "export_s": seconds}.

    Raises:
      BenchError: an adapter did not share lora.pte's structure (it would need its own program).
    """
    from edgeshare.exir.hf import export_hf_swappable  # noqa: PLC0415

    start = time.perf_counter()
    result = export_hf_swappable(files.model_dir, files.adapter_dirs, out, bound, XnnpackPartitioner(**options))
    if result.own_programs:
        raise BenchError(f"adapters {sorted(result.own_programs)} did not share lora.pte's structure")
    seconds = time.perf_counter() - start
    log(f"[llamacpp] edgeshare swappable at bound {bound} exported in {seconds:.0f} s")
    return {
        "program": result.swappable_program,
        "foundation": result.foundation_path,
        "adapters": [result.adapter_files[name] for name in files.adapter_dirs],
        "export_s": seconds,
    }


def time_swappable(
    export: Dict[str, Any], prompt: str, new_tokens: int, threads: int, warmup_tokens: int
) -> Dict[str, Dict[str, Any]]:
    """One round: the swappable program generating as the first adapter, and the timed binds.

    Raises:
      BenchError: tools/generate or lora_runner failed.
    """
    adapters = export["adapters"]
    data = [export["foundation"], adapters[0]]
    generated = run_generate(export["program"], data, prompt, new_tokens, threads, warmup_tokens)
    config = swap_config(export["foundation"], export["program"], adapters, SWAP_ROUNDS)
    config.threads = threads
    return {"generate": generated, "swaps": run_runner(config)}


def swappable_fields(
    own: Sequence[Dict[str, Any]], runs: Dict[str, List[Dict[str, Any]]], adapters: int, switch_ms: float
) -> Dict[str, Any]:
    """A peer row's swappable figures from its rounds.

    Args:
      own: the adapter's own program's tools/generate reports of the same rounds.
      runs: {"generate": [...], "swaps": [...]} of the swappable program.
      adapters: adapters bound in turn per round.
      switch_ms: llama.cpp's median switch in the same stage.

    Returns:
      edgeshare_swap_ms (median bind, files open), swap_over_llamacpp_switch, swappable_prefill_ms,
      swappable_decode_tokens_per_s, their ratios to the own program (swappable_prefill_over_own:
      above 1 slower; swappable_decode_rate_over_own: below 1 slower) and
      swappable_tokens_match_own (every run's tokens equal the own program's first run's).
    """
    generated = runs["generate"]
    out: Dict[str, Any] = {
        "edgeshare_swap_ms": median_swap(runs["swaps"], adapters),
        "swappable_prefill_ms": median(r["prefill_ms"] for r in generated),
        "swappable_decode_tokens_per_s": median(r["decode_tokens_per_s"] for r in generated),
        "swappable_tokens_match_own": bool(own) and all(r["tokens"] == own[0]["tokens"] for r in generated),
    }
    out["swap_over_llamacpp_switch"] = ratio(out["edgeshare_swap_ms"], switch_ms)
    out["swappable_prefill_over_own"] = ratio(out["swappable_prefill_ms"], median(r["prefill_ms"] for r in own))
    out["swappable_decode_rate_over_own"] = ratio(
        out["swappable_decode_tokens_per_s"], median(r["decode_tokens_per_s"] for r in own)
    )
    return out

