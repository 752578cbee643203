"""Swappable adapters: one program for every adapter of one structure, one small .ptd per adapter.

export_swappable() writes, beside the usual foundation.pte and foundation.ptd (same keys and
bytes as export_lora writes them):

    OUT/lora.pte        the program of every adapter that shares the first adapter's structure
    OUT/<name>.ptd      per such adapter: only its own weights, under keys equal across adapters
    OUT/<other>.pte     per adapter of another structure: its own program, as export_lora writes it

In lora.pte the foundation weights are pinned by digest (the foundation's tag) and the adapter's
weights are open external data under ADAPTER_TAG (DataPlacement.open: no digest, never packed by
a delegate; the LoRA products run as kernels on the mapped bytes), so the runtime can bind another
adapter's .ptd to a loaded method (Method::rebind_data) without fetching or packing anything of
the foundation:

    result = export_swappable(foundation, {"chat": chat_model, "code": code_model}, (x,), "out",
                              XnnpackPartitioner())
    # load out/lora.pte over out/foundation.ptd + out/chat.ptd, then rebind out/code.ptd

Two adapters share a structure when their programs are equal byte for byte once their own weights
are moved out: same adapted modules, ranks, dtypes and everything else the graph holds (the LoRA
scale alpha / r is a constant of the graph, so adapters with another alpha get their own program).
"""

import dataclasses
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir.data_policy import DataPlacement, DataPolicy, FoundationDataPolicy, canonical_name
from edgeshare.exir.errors import ExportError
from edgeshare.exir.export import ExecutorchBackendConfig, ExecutorchProgramManager, to_edge
from edgeshare.exir.lora import (
    ExtraMethod,
    _export_extra_methods,
    _foundation_superset,
    check_adapter_name,
    export_method,
)
from edgeshare.exir.partition import Partitioner
from torch import nn

__all__ = [
    "ADAPTER_KEY_PREFIX",
    "ADAPTER_TAG",
    "SWAPPABLE_PROGRAM",
    "SwappableDataPolicy",
    "SwappableExportResult",
    "adapter_key",
    "export_swappable",
]

ADAPTER_TAG = "adapter"
# Adapter keys never collide with foundation keys (a layer an adapter trains in full keeps its
# foundation name otherwise).
ADAPTER_KEY_PREFIX = "adapter/"
SWAPPABLE_PROGRAM = "lora"


def peft_adapter_names(module: nn.Module) -> Tuple[str, ...]:
    """The adapter names PEFT models inside module were loaded under ("default" usually)."""
    names = set()
    for sub in module.modules():
        config = getattr(sub, "peft_config", None)
        if isinstance(config, Mapping):
            names.update(str(k) for k in config)
    return tuple(sorted(names))


def adapter_key(name: str, adapter_names: Iterable[str] = ()) -> str:
    """The key of an adapter weight: "adapter/" + its name without PEFT's adapter-name component
    ("...q_proj.lora_A.default.weight" -> "adapter/...q_proj.lora_A.weight") and LoRA wrapper
    components, so that every adapter of one structure has the same keys."""
    drop = set(adapter_names)
    # PEFT's "base_model.model." wherever a wrapper module (CausalLMLogits) puts it.
    name = name.replace(".base_model.model.", ".")
    parts = name.split(".")
    kept = [p for i, p in enumerate(parts) if not (p in drop and i > 0 and parts[i - 1].startswith("lora_"))]
    return ADAPTER_KEY_PREFIX + canonical_name(".".join(kept))


class SwappableDataPolicy(DataPolicy):
    """Foundation weights (by identity, as FoundationDataPolicy decides) pinned in the foundation's
    .ptd; every other weight open under adapter_tag with adapter_key(name).

    Args:
      foundation: the policy that recognises foundation weights.
      adapter_names: PEFT adapter names to drop from keys.
      adapter_tag: the tag (file) of the adapter's weights.
    """

    def __init__(
        self, foundation: FoundationDataPolicy, adapter_names: Iterable[str] = (), adapter_tag: str = ADAPTER_TAG
    ) -> None:
        self.foundation = foundation
        self.adapter_names = tuple(adapter_names)
        self.adapter_tag = adapter_tag

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        key = self.foundation.foundation_key(tensor)
        if key is not None:
            return DataPlacement(key, self.foundation.foundation_tag)
        return DataPlacement(adapter_key(name, self.adapter_names), self.adapter_tag, open=True)


@dataclasses.dataclass
class SwappableExportResult:
    """What export_swappable wrote.

    Attributes:
      files: path -> size in bytes of every file written.
      foundation_path: foundation.ptd.
      foundation_program: foundation.pte (the bare foundation, method "forward").
      swappable_program: lora.pte, shared by the adapters in adapter_files.
      adapter_files: adapter name -> its .ptd (for swappable_program), in the given order.
      adapter_keys: the keys every adapter .ptd holds (equal across them).
      own_programs: adapter name -> its own .pte, for adapters of another structure.
      modules: adapter name -> the eager model that was exported.
    """

    files: Dict[str, int]
    foundation_path: str
    foundation_program: str
    swappable_program: str
    adapter_files: Dict[str, str]
    adapter_keys: List[str]
    own_programs: Dict[str, str]
    modules: Dict[str, nn.Module]


def export_swappable(
    foundation: nn.Module,
    modules: Mapping[str, nn.Module],
    example_inputs: Sequence[Any],
    out_dir: str,
    partitioner: Optional[Partitioner],
    foundation_policy: Optional[FoundationDataPolicy] = None,
    dynamic_shapes: Optional[Any] = None,
    config: Optional[ExecutorchBackendConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
    extra_methods: Sequence[ExtraMethod] = (),
) -> SwappableExportResult:
    """Exports adapters of one structure as one swappable program plus a .ptd each (see module doc).

    Args:
      foundation: the bare foundation model.
      modules: adapter name -> the adapter's whole model (its foundation weights equal the
        foundation's); the first one's structure decides who shares lora.pte.
      example_inputs: example inputs of the models.
      out_dir: the folder to write (created if missing).
      partitioner: e.g. XnnpackPartitioner() (it leaves the adapter weights to kernels), or None.
      foundation_policy: recognises foundation weights; None: FoundationDataPolicy(foundation).
      dynamic_shapes: torch.export's dynamic_shapes for every program.
      extra_methods: more methods of every program beside "forward" (e.g. the KV-cache
        "forward_cached"); a swap rebinds the adapter for all of them.
      config: serialization options.
      progress: called with one line per step.

    Returns:
      What was written.

    Raises:
      AdapterNameError: an adapter name is not a file stem, or is "foundation" or "lora".
      UnsupportedModelError: a model cannot be exported.
      ExportError: no adapters, or a program uses foundation bytes the bare foundation lacks.
    """
    say = progress or (lambda line: None)
    if not modules:
        raise ExportError("export_swappable needs at least one adapter")
    policy = foundation_policy if foundation_policy is not None else FoundationDataPolicy(foundation)
    tag = policy.foundation_tag
    for name in modules:
        check_adapter_name(name, tag)
        if name == SWAPPABLE_PROGRAM:
            raise ExportError(f"adapter name '{name}' is the swappable program's file stem; choose another")

    def lower(module: nn.Module, what: str, data_policy: DataPolicy) -> ExecutorchProgramManager:
        say(f"exporting and lowering {what}")
        ep = export_method(module.eval(), tuple(example_inputs), what, dynamic_shapes)
        extras = _export_extra_methods(module, extra_methods, what, say)
        edge = to_edge({"forward": ep, **extras}, data_policy=data_policy)
        if partitioner is not None:
            edge = edge.to_backend(partitioner)
        return edge.to_executorch(config)

    bare = lower(foundation, "the foundation", policy)
    swappable: Dict[str, ExecutorchProgramManager] = {}
    own: Dict[str, ExecutorchProgramManager] = {}
    for name, module in modules.items():
        et = lower(module, f"adapter '{name}' (swappable)", SwappableDataPolicy(policy, peft_adapter_names(module)))
        first = next(iter(swappable.values()), None)
        if first is None or et.buffer == first.buffer:
            swappable[name] = et
        else:
            say(f"adapter '{name}' has another structure than '{next(iter(swappable))}': its own program")
            own[name] = lower(module, f"adapter '{name}'", policy)
    foundation_file = bare.data_files[tag]
    _foundation_superset(
        [("foundation", foundation_file)] + [(n, et.data_files[tag]) for n, et in {**swappable, **own}.items()], tag
    )
    return _write(out_dir, tag, bare, swappable, own, dict(modules), say)


def _write(
    out_dir: str,
    tag: str,
    bare: ExecutorchProgramManager,
    swappable: Dict[str, ExecutorchProgramManager],
    own: Dict[str, ExecutorchProgramManager],
    modules: Dict[str, nn.Module],
    say: Callable[[str], None],
) -> SwappableExportResult:
    os.makedirs(out_dir, exist_ok=True)
    files: Dict[str, int] = {}

    def write(stem: str, ext: str, data: bytes) -> str:
        path = os.path.join(out_dir, f"{stem}.{ext}")
        say(f"writing {path}")
        with open(path, "wb") as f:
            f.write(data)
        files[path] = len(data)
        return path

    foundation_program = write(tag, "pte", bare.buffer)
    foundation_path = write(tag, "ptd", bare.data_files[tag])
    program = write(SWAPPABLE_PROGRAM, "pte", next(iter(swappable.values())).buffer)
    adapter_files: Dict[str, str] = {}
    keys: List[str] = []
    for name, et in swappable.items():
        data = et.data_files.get(ADAPTER_TAG)
        if data is None:
            raise ExportError(f"adapter '{name}' has no weights of its own (nothing to swap)")
        adapter_files[name] = write(name, "ptd", data)
        keys = list(deserialize_ptd(data, adapter_files[name]).named_data)
    own_programs = {name: write(name, "pte", et.buffer) for name, et in own.items()}
    return SwappableExportResult(
        files, foundation_path, foundation_program, program, adapter_files, keys, own_programs, modules
    )
