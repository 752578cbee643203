"""The LoRA case's export stage: every model's programs over one shared foundation.ptd."""

import dataclasses
import filecmp
import os
import time
from typing import Dict, List

from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._lora_model import BenchModel
from edgeshare.bench._runner import BenchError
from edgeshare.exir import FoundationDataPolicy, to_edge
from edgeshare.exir.lora import LoraExportResult, export_lora, export_method

__all__ = ["Exported", "export_model"]


@dataclasses.dataclass
class Exported:
    """The files of one model, all over one foundation.ptd.

    Attributes:
      foundation: the shared .ptd.
      programs_b1: NUM_ADAPTERS LoRA programs for T=1.
      program_b32: the first adapter's program for T=32.
      bare_b1, bare_b32: the foundation alone (no adapter) for T=1 and T=32, as a baseline.
      export_s: seconds the exports took.
      result_b1: what export_lora wrote for T=1 (sizes, eager modules).
    """

    foundation: str
    programs_b1: List[str]
    program_b32: str
    bare_b1: str
    bare_b32: str
    export_s: float
    result_b1: LoraExportResult


def _same_foundation(model: BenchModel, reference: str, other: str) -> None:
    if not filecmp.cmp(reference, other, shallow=False):
        raise BenchError(f"{model.name}: {other} differs from {reference}")
    os.remove(other)  # One copy serves every program.


def _export_bare(model: BenchModel, out_dir: str, foundation_ptd: str) -> Dict[int, str]:
    """The foundation alone for T=1 and T=32 -> {tokens: .pte path}, over foundation_ptd."""
    bare: Dict[int, str] = {}
    for tokens in (1, 32):
        folder = os.path.join(out_dir, f"bare_t{tokens}")
        ep = export_method(model.foundation, (model.make_input(tokens),), f"{model.name} foundation")
        edge = to_edge({"forward": ep}, data_policy=FoundationDataPolicy(model.foundation)).to_backend(
            XnnpackPartitioner()
        )
        paths = edge.to_executorch().write_to_dir(folder, "foundation_only")
        bare[tokens] = paths[0]
        _same_foundation(model, foundation_ptd, os.path.join(folder, "foundation.ptd"))
    return bare


def export_model(model: BenchModel, out_dir: str) -> Exported:
    """Exports model's LoRA programs for T=1 (every adapter) and T=32 (the first adapter), and the
    bare foundation for both, all over the T=1 export's foundation.ptd.

    Args:
      model: what to export.
      out_dir: where the files go.

    Returns:
      The paths, the export time and the T=1 export's result.

    Raises:
      BenchError: another export wrote a different foundation.ptd than the T=1 export.
    """
    start = time.perf_counter()
    names = list(model.adapters)
    b1 = export_lora(
        model.foundation, model.adapters, (model.make_input(1),), os.path.join(out_dir, "t1"), XnnpackPartitioner()
    )
    first = names[0]
    b32 = export_lora(
        model.foundation,
        {first: model.adapters[first]},
        (model.make_input(32),),
        os.path.join(out_dir, "t32"),
        XnnpackPartitioner(),
    )
    _same_foundation(model, b1.foundation_path, b32.foundation_path)
    bare = _export_bare(model, out_dir, b1.foundation_path)
    return Exported(
        foundation=b1.foundation_path,
        programs_b1=[b1.program_paths[n] for n in names],
        program_b32=b32.program_paths[first],
        bare_b1=bare[1],
        bare_b32=bare[32],
        export_s=time.perf_counter() - start,
        result_b1=b1,
    )
