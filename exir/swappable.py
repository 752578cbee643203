"""Swappable adapters: one program for every adapter of one structure, one small .ptd per adapter.

export_swappable() writes, beside the usual foundation.pte and foundation.ptd (same keys and
bytes as export_lora writes them):

    OUT/lora.pte        the program of every adapter that shares the first adapter's structure
    OUT/<name>.ptd      per such adapter: only its own weights, under keys equal across adapters
    OUT/<other>.pte     per adapter of another structure: its own program, as export_lora writes it

In lora.pte the foundation weights are pinned by digest (the foundation's tag) and the adapter's
weights are open external data under ADAPTER_TAG (DataPlacement.open: no digest, never packed by
a delegate; XnnpackPartitioner makes them inputs of its delegate calls, whose LoRA products read the
mapped bytes bound at each execute), so the runtime can bind another
adapter's .ptd to a loaded method (Method::rebind_data) without fetching or packing anything of
the foundation:

    result = export_swappable(foundation, {"chat": chat_model, "code": code_model}, (x,), "out",
                              XnnpackPartitioner())
    # load out/lora.pte over out/foundation.ptd + out/chat.ptd, then rebind out/code.ptd

Two adapters share a structure when their models differ in their weights' values only (same adapted
modules, ranks, dtypes, alpha and every other setting: _pipeline.structure_signature; the LoRA scale
alpha / r is a constant of the graph, so adapters with another alpha get their own program). The
program is lowered once; each further adapter of its structure only has its weights written.
"""

import dataclasses
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from edgeshare.exir._pipeline import (
    Lowerer,
    OutputFiles,
    SharedData,
    check_out_dir,
    structure_signature,
)
from edgeshare.exir._serialize import with_foundation_digest, write_ptd
from edgeshare.exir._weights import module_weights
from edgeshare.exir.data_policy import (
    DATA_KEY_META,
    EXTERNAL_TAG_META,
    DataPlacement,
    DataPolicy,
    FoundationDataPolicy,
    canonical_name,
)
from edgeshare.exir.errors import ExportError
from edgeshare.exir.export import DataFileEntry, EdgeProgramManager, ExecutorchBackendConfig, ExecutorchProgramManager
from edgeshare.exir.graph import lifted_inputs
from edgeshare.exir.lora import ExtraMethod, check_adapter_name
from edgeshare.exir.named_data_store import NamedDataStore
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.stored_linear import STORED_FROM_META, stored_entry
from edgeshare.exir.tensor_layout import TensorLayout, digest_cache, tensor_digest, tensor_view
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
      fallbacks: foundation weight key -> why it is stored in its format's fallback (the
        partitioner's choice; exir/fc_formats.py).
      gathered_formats: token embedding key -> the format option its gather reads.
    """

    files: Dict[str, int]
    foundation_path: str
    foundation_program: str
    swappable_program: str
    adapter_files: Dict[str, str]
    adapter_keys: List[str]
    own_programs: Dict[str, str]
    modules: Dict[str, nn.Module]
    fallbacks: Dict[str, str] = dataclasses.field(default_factory=dict)
    gathered_formats: Dict[str, str] = dataclasses.field(default_factory=dict)


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
      partitioner: e.g. XnnpackPartitioner() (it reads the adapter weights unpacked), or None.
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

    check_out_dir(out_dir)
    with digest_cache():
        lowerer = Lowerer(partitioner, config, example_inputs, dynamic_shapes, extra_methods, say, tag)
        bare, _ = lowerer.lower(foundation, "the foundation", policy, foundation=True)
        shared = SharedData(tag, reference="foundation")
        shared.add("foundation", bare)
        signatures = {name: structure_signature(module) for name, module in modules.items()}
        first = next(iter(modules))
        lowerer.expect(s for n, s in signatures.items() if s != signatures[first])
        program: Optional[ExecutorchProgramManager] = None
        open_weights: List[_OpenWeight] = []
        adapter_entries: Dict[str, Dict[str, DataFileEntry]] = {}
        own: Dict[str, ExecutorchProgramManager] = {}
        for name, module in modules.items():
            what = f"adapter '{name}'"
            if signatures[name] != signatures[first]:
                say(f"adapter '{name}' has another structure than '{first}': its own program")
                own[name], _ = lowerer.lower(module, what, policy, signatures[name])
                shared.add(name, own[name])
            elif program is None:
                swappable_policy = SwappableDataPolicy(policy, peft_adapter_names(module))
                program, edge = lowerer.lower(module, f"{what} (swappable)", swappable_policy)
                shared.add(name, program)
                open_weights = _open_weights(edge)
                adapter_entries[name] = program.data_entries.get(ADAPTER_TAG, {})
            else:
                say(f"{what}: the swappable program's structure; writing its weights only")
                adapter_entries[name] = _adapter_entries(lowerer, module, open_weights)
        return _write(out_dir, tag, bare, shared, program, adapter_entries, own, dict(modules), lowerer, say)


@dataclasses.dataclass(frozen=True)
class _OpenWeight:
    """A weight the swappable program reads from the adapter's file: its method, name and key, and
    when the partitioner stored it in an adapter format row, the float weight it is made from and
    how (exir/stored_linear.py's STORED_FROM_META: fqn, scheme, part)."""

    method: str
    name: str
    key: str
    stored_from: Optional[Tuple[str, str, str]] = None


def _open_weights(edge: EdgeProgramManager) -> List[_OpenWeight]:
    """The adapter-file weights of the lowered swappable program, in emission order."""
    found: List[_OpenWeight] = []
    for method in edge.methods:
        ep = edge.exported_program(method)
        lifted = lifted_inputs(ep)
        for node in ep.graph.nodes:
            if node.op == "placeholder" and node.name in lifted and node.meta.get(EXTERNAL_TAG_META) == ADAPTER_TAG:
                stored = node.meta.get(STORED_FROM_META)
                found.append(_OpenWeight(method, lifted[node.name].fqn, node.meta[DATA_KEY_META], stored))
    return found


def _adapter_entries(lowerer: Lowerer, module: nn.Module, weights: Sequence[_OpenWeight]) -> Dict[str, DataFileEntry]:
    """The adapter file of module for the swappable program: its weights under the program's keys,
    stored as the emitter stores them (so equal to what lowering module would write).

    Raises:
      ExportError: module lacks a weight the program reads, or has it in another dtype or shape.
    """
    tensors = {m: module_weights(mod) for m, mod in lowerer.method_modules(module).items()}
    store = NamedDataStore()
    alignment = lowerer.config.constant_alignment
    for weight in weights:
        name = weight.name if weight.stored_from is None else weight.stored_from[0]
        tensor = tensors[weight.method].get(name)
        if tensor is None:
            raise ExportError(f"method '{weight.method}': the adapter model has no weight '{name}'")
        tensor = tensor.detach()
        if weight.stored_from is not None:
            _, scheme, part = weight.stored_from
            try:
                tensor = stored_entry(tensor, scheme, part)
            except ValueError as e:
                raise ExportError(f"method '{weight.method}': adapter weight '{name}': {e}") from None
        layout = TensorLayout.of(tensor, weight.name)
        store.add_named_data(weight.key, tensor_view(tensor), alignment, ADAPTER_TAG, layout, tensor_digest(tensor))
    output = store.get_named_data_store_output()
    return {
        key: DataFileEntry(
            output.buffers[e.buffer_index].data,
            output.buffers[e.buffer_index].alignment,
            e.tensor_layout,
            output.buffers[e.buffer_index].digest,
        )
        for key, e in output.external_data.get(ADAPTER_TAG, {}).items()
    }


def _write(
    out_dir: str,
    tag: str,
    bare: ExecutorchProgramManager,
    shared: SharedData,
    program: ExecutorchProgramManager,
    adapter_entries: Dict[str, Dict[str, DataFileEntry]],
    own: Dict[str, ExecutorchProgramManager],
    modules: Dict[str, nn.Module],
    lowerer: Lowerer,
    say: Callable[[str], None],
) -> SwappableExportResult:
    alignment = lowerer.config.tensor_alignment
    for name, entries in adapter_entries.items():
        if not entries:
            raise ExportError(f"adapter '{name}' has no weights of its own (nothing to swap)")
    identity = shared.identity()

    def pte(stem: str, et: ExecutorchProgramManager) -> str:
        return files.write_bytes(f"{stem}.pte", with_foundation_digest(et.buffer, identity, f"{stem}.pte"))

    with OutputFiles(out_dir, say) as files:
        foundation_program = pte(tag, bare)
        foundation_path = shared.write(files, alignment)
        swappable_program = pte(SWAPPABLE_PROGRAM, program)
        adapter_files = {
            name: files.write(f"{name}.ptd", lambda f, e=entries: write_ptd(f, e, alignment, identity))
            for name, entries in adapter_entries.items()
        }
        own_programs = {name: pte(name, et) for name, et in own.items()}
        sizes = files.commit()
    keys = sorted(next(iter(adapter_entries.values())), key=lambda k: k.encode("utf-8"))  # the file's order
    return SwappableExportResult(
        sizes,
        foundation_path,
        foundation_program,
        swappable_program,
        adapter_files,
        keys,
        own_programs,
        modules,
        dict(lowerer.fallbacks),
        dict(lowerer.gathered_formats),
    )
