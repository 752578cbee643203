"""The LoRA case's measurement stage: lora_runner in fresh processes, and torch eager timings."""

import dataclasses
from typing import Any, Dict, List, Tuple

from edgeshare.bench._lora_export import Exported
from edgeshare.bench._lora_model import NUM_ADAPTERS, BenchModel
from edgeshare.bench._runner import RunnerConfig, run_runner, torch_latency_ms

__all__ = ["Measured", "measure"]


@dataclasses.dataclass
class Measured:
    """Everything measured for one model.

    Attributes:
      runs: configuration name -> the runner's reports, one per repeat.
      torch_ms: (what, tokens) -> torch eager samples; what is "lora", "foundation" or
        "lora_2threads".
      iterations_b1, iterations_b32: timed runs per process at T=1 and T=32.
      repeats: fresh processes per configuration.
    """

    runs: Dict[str, List[Dict[str, Any]]]
    torch_ms: Dict[Tuple[str, int], List[float]]
    iterations_b1: int
    iterations_b32: int
    repeats: int


def _configs(exported: Exported, n1: int, n32: int, warmup: int) -> Dict[str, RunnerConfig]:
    """name -> its runner; "1" also gives the T=1 latency."""
    programs = exported.programs_b1

    def config(paths: List[str], share: bool = True, iterations: int = 0, threads: int = 1) -> RunnerConfig:
        return RunnerConfig(paths, [exported.foundation], share, iterations, warmup, threads)

    return {
        "1": config(programs[:1], iterations=n1),
        "2_shared": config(programs[:2]),
        "2_unshared": config(programs[:2], share=False),
        "8_shared": config(programs[:NUM_ADAPTERS]),
        "8_unshared": config(programs[:NUM_ADAPTERS], share=False),
        "1_b32": config([exported.program_b32], iterations=n32),
        "foundation": config([exported.bare_b1], iterations=n1),
        "foundation_b32": config([exported.bare_b32], iterations=n32),
        "1_2threads": config(programs[:1], iterations=n1, threads=2),
        "1_b32_2threads": config([exported.program_b32], iterations=n32, threads=2),
    }


def _torch_samples(
    model: BenchModel, exported: Exported, n1: int, n32: int, repeats: int, warmup: int
) -> Dict[Tuple[str, int], List[float]]:
    module = exported.result_b1.modules[next(iter(model.adapters))]
    torch_ms = {
        (what, tokens): torch_latency_ms(m, model.make_input(tokens), n * repeats, warmup)
        for what, m in (("lora", module), ("foundation", model.foundation))
        for tokens, n in ((1, n1), (32, n32))
    }
    for tokens, n in ((1, n1), (32, n32)):
        torch_ms[("lora_2threads", tokens)] = torch_latency_ms(
            module, model.make_input(tokens), n * repeats, warmup, threads=2
        )
    return torch_ms


def measure(model: BenchModel, exported: Exported, repeats: int, n1: int, n32: int, warmup: int) -> Measured:
    """Runs every configuration in a fresh lora_runner process, `repeats` times, round-robin (so that
    slow phases of a noisy machine hit every configuration alike), then times torch eager.

    Args:
      model: the model (for torch eager).
      exported: its files.
      repeats: fresh processes per configuration.
      n1, n32: timed runs per process at T=1 and T=32 (per repeat for torch).
      warmup: untimed runs before them.

    Returns:
      The raw samples.

    Raises:
      BenchError: a runner process failed.
    """
    configs = _configs(exported, n1, n32, warmup)
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, config in configs.items():
            runs[name].append(run_runner(config))
    torch_ms = _torch_samples(model, exported, n1, n32, repeats, warmup)
    return Measured(runs=runs, torch_ms=torch_ms, iterations_b1=n1, iterations_b32=n32, repeats=repeats)
