"""The pipeline's entry point: to_edge -> EdgeProgramManager.to_backend -> .to_executorch.

edge = to_edge({"forward": torch.export.export(model, example_inputs)}, data_policy=LoraDataPolicy())
edge = edge.to_backend(XnnpackPartitioner())
et = edge.to_executorch()
et.write_to_dir("out", "model")        # out/model.pte, out/foundation.ptd
"""

import copy
import dataclasses
import os
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Union

import torch
from edgeshare.exir._serialize import foundation_identity, serialize_ptd, serialize_pte, write_ptd
from edgeshare.exir.data_policy import (
    DATA_KEY_META,
    DATA_OPEN_META,
    EXTERNAL_TAG_META,
    DataPlacement,
    DataPolicy,
    InlineDataPolicy,
    program_key,
)
from edgeshare.exir.emit import emit_program
from edgeshare.exir.errors import DataPlacementError, UnsupportedModelError
from edgeshare.exir.graph import lifted_inputs, lifted_tensor
from edgeshare.exir.lower import to_backend
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.tensor_layout import TensorLayout, scalar_type_of, tensor_digest
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

__all__ = [
    "DataFileEntry",
    "EdgeProgramManager",
    "ExecutorchBackendConfig",
    "ExecutorchProgramManager",
    "edge_decompositions",
    "to_edge",
]


def edge_decompositions() -> Dict:
    """The core-ATen decomposition table minus aten.linear (kept whole for backends)."""
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.linear.default, None)
    return table


def _check_method_name(method: str) -> None:
    if not isinstance(method, str):
        raise TypeError(f"method names must be str, got {type(method).__name__}")
    if not method or "/" in method:
        raise UnsupportedModelError(f"method name '{method}' must be non-empty and contain no '/'")


def _check_dtypes(method: str, ep: ExportedProgram) -> None:
    """Every tensor has a dtype the files can hold; sizes may be symbolic (a dynamic token dim)."""
    for node in ep.graph.nodes:
        vals = node.meta.get("val")
        for val in vals if isinstance(vals, (tuple, list)) else [vals]:
            if isinstance(val, torch.Tensor):
                scalar_type_of(val.dtype, f"method '{method}', node '{node.name}'")


# Checks torch.export leaves in the graph that verify what export already proved; they compute
# nothing, and the runtime has no kernel for them.
_ASSERTION_OPS = (
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
)


def _remove_assertions(ep: ExportedProgram) -> None:
    graph = ep.graph_module.graph
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _ASSERTION_OPS and not node.users:
            graph.erase_node(node)
    graph.eliminate_dead_code()
    ep.graph_module.recompile()


def _apply_data_policy(method: str, ep: ExportedProgram, policy: DataPolicy) -> None:
    """Records each weight's key and tag on its placeholder's meta."""
    by_key: Dict[str, str] = {}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for name, lifted in lifted_inputs(ep).items():
        fqn = lifted.fqn
        tensor = lifted_tensor(ep, fqn)
        if not isinstance(tensor, torch.Tensor):
            continue
        placement = None
        if lifted.kind != InputKind.CONSTANT_TENSOR:
            placement = policy(method, fqn, tensor)
        if placement is None:
            placement = DataPlacement(program_key(method, fqn), None)
        if not isinstance(placement, DataPlacement):
            raise TypeError(f"method '{method}': data policy returned {type(placement).__name__} for '{fqn}'")
        other = by_key.get(placement.key)
        if other is not None:
            other_tensor = lifted_tensor(ep, other)
            if (
                other_tensor.shape != tensor.shape
                or other_tensor.dtype != tensor.dtype
                or tensor_digest(other_tensor) != tensor_digest(tensor)
            ):
                raise DataPlacementError(
                    f"method '{method}': weights '{other}' and '{fqn}' both map to key "
                    f"'{placement.key}' with different values"
                )
        by_key[placement.key] = fqn
        node = placeholders[name]
        node.meta[DATA_KEY_META] = placement.key
        node.meta[EXTERNAL_TAG_META] = placement.external_tag
        node.meta[DATA_OPEN_META] = placement.open


def to_edge(
    programs: Union[ExportedProgram, Mapping[str, ExportedProgram]],
    data_policy: Optional[DataPolicy] = None,
    rewrite: Optional[Callable[[str, ExportedProgram], ExportedProgram]] = None,
) -> "EdgeProgramManager":
    """Lowers exported programs to the edge dialect (core ATen, aten.linear kept).

    Args:
      programs: one ExportedProgram (method "forward") or {method name: ExportedProgram}.
      data_policy: decides where each weight goes; None keeps every weight in the program.
      rewrite: called with each method's name and decomposed program before the data policy
        places its weights; what it returns is the method's program (it may raise to stop).

    Returns:
      An EdgeProgramManager over the decomposed methods.

    Raises:
      UnsupportedModelError: an unsupported dtype or a bad method name, naming the method and
        node. Dynamic dims (torch.export's dynamic_shapes, with a max) are kept: the program is
        planned for their upper bound and runs at any size within it.
      DataPlacementError: the policy put two different weights under one key.
      TypeError: programs is not an ExportedProgram or a dict of them.
    """
    if isinstance(programs, ExportedProgram):
        programs = {"forward": programs}
    if not isinstance(programs, Mapping) or not programs:
        raise TypeError("to_edge needs an ExportedProgram or a non-empty {method name: ExportedProgram}")
    policy = data_policy if data_policy is not None else InlineDataPolicy()
    if not isinstance(policy, DataPolicy):
        raise TypeError(f"data_policy must be a DataPolicy, got {type(policy).__name__}")
    edge: Dict[str, ExportedProgram] = {}
    for method, ep in programs.items():
        _check_method_name(method)
        if not isinstance(ep, ExportedProgram):
            raise TypeError(f"method '{method}': expected an ExportedProgram, got {type(ep).__name__}")
        _check_dtypes(method, ep)
        decomposed = ep.run_decompositions(edge_decompositions())
        _remove_assertions(decomposed)
        if rewrite is not None:
            decomposed = rewrite(method, decomposed)
        _check_dtypes(method, decomposed)
        _apply_data_policy(method, decomposed, policy)
        edge[method] = decomposed
    return EdgeProgramManager(edge)


@dataclasses.dataclass(frozen=True)
class ExecutorchBackendConfig:
    """Options of to_executorch.

    Attributes:
      segment_alignment: alignment of the .pte's segments.
      tensor_alignment: alignment of the .ptd's segments (4096: mmap-able pages).
      constant_alignment: alignment each constant / named datum asks for.
      memory_alignment: alignment of memory-planned tensor offsets.
    """

    segment_alignment: int = 64
    tensor_alignment: int = 4096
    constant_alignment: int = 16
    memory_alignment: int = 16


class EdgeProgramManager:
    """Edge programs by method name, before or after lowering.

    Args:
      programs: method name -> edge program.
      fallbacks: after lowering, weight key -> why the partitioner stored it in its format's
        fallback (LoweredPrograms.fallbacks).
      gathered_formats: after lowering, token embedding key -> the format option its gather reads.
    """

    def __init__(
        self,
        programs: Dict[str, ExportedProgram],
        fallbacks: Optional[Mapping[str, str]] = None,
        gathered_formats: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._programs = dict(programs)
        self.fallbacks: Dict[str, str] = dict(fallbacks or {})
        self.gathered_formats: Dict[str, str] = dict(gathered_formats or {})

    @property
    def methods(self) -> List[str]:
        """The method names, in order."""
        return list(self._programs)

    def exported_program(self, method: str = "forward") -> ExportedProgram:
        """Returns one method's program.

        Raises:
          KeyError: no such method (the message lists the methods).
        """
        try:
            return self._programs[method]
        except KeyError:
            raise KeyError(f"no method '{method}' (methods: {self.methods})") from None

    def with_weights(
        self, weights: Mapping[str, Mapping[str, torch.Tensor]], data_policy: Optional[DataPolicy] = None
    ) -> "EdgeProgramManager":
        """The same programs over other weights of the same names, dtypes and shapes (another
        adapter of one structure), without exporting or decomposing again.

        Each method's graph is copied (this manager is left as it is, so it can serve again) and the
        data policy is applied to the new weights.

        Args:
          weights: method name -> {parameter or buffer name: tensor}, as the module exported for
            that method names them; a name it lacks keeps this program's tensor (a constant torch
            made while tracing).
          data_policy: decides where each weight goes; None keeps every weight in the program.

        Returns:
          A new manager over the copied programs.

        Raises:
          DataPlacementError: a weight the programs use is missing from weights, or has another
            dtype or shape (naming the method and weight).
        """
        policy = data_policy if data_policy is not None else InlineDataPolicy()
        programs: Dict[str, ExportedProgram] = {}
        for method, ep in self._programs.items():
            given = weights.get(method, {})

            def pick(name: str, old: torch.Tensor, table: str) -> torch.Tensor:
                new = given.get(name)
                if new is None:
                    if table == "state_dict":
                        raise DataPlacementError(f"method '{method}': no weight '{name}' to put in the program")
                    return old
                if new.dtype != old.dtype or new.shape != old.shape:
                    raise DataPlacementError(
                        f"method '{method}': weight '{name}' is {tuple(new.shape)} {new.dtype}, the program's "
                        f"is {tuple(old.shape)} {old.dtype}"
                    )
                if isinstance(old, torch.nn.Parameter) and not isinstance(new, torch.nn.Parameter):
                    return torch.nn.Parameter(new.detach(), requires_grad=False)  # same storage
                return new

            gm = copy.deepcopy(ep.graph_module)
            copied = ExportedProgram(
                root=gm,
                graph=gm.graph,
                graph_signature=copy.deepcopy(ep.graph_signature),
                state_dict={k: pick(k, v, "state_dict") for k, v in ep.state_dict.items()},
                range_constraints=ep.range_constraints,
                module_call_graph=copy.deepcopy(ep.module_call_graph),
                constants={k: pick(k, v, "constants") for k, v in ep.constants.items()},
                verifiers=ep.verifiers,
            )
            _apply_data_policy(method, copied, policy)
            programs[method] = copied
        return EdgeProgramManager(programs)

    def to_backend(self, partitioner: Union[Partitioner, Mapping[str, Partitioner]]) -> "EdgeProgramManager":
        """Delegates what the partitioner(s) tag, preprocessing all methods' partitions at once.

        Args:
          partitioner: one partitioner for every method, or {method name: partitioner}.

        Returns:
          A new manager over the lowered programs.

        Raises:
          LoweringError: naming the method, when a partitioner or backend breaks the contract.
        """
        if isinstance(partitioner, Partitioner):
            partitioners = {m: partitioner for m in self._programs}
        elif isinstance(partitioner, Mapping):
            partitioners = dict(partitioner)
        else:
            raise TypeError(f"to_backend needs a Partitioner or a dict of them, got {type(partitioner).__name__}")
        lowered = to_backend(self._programs, partitioners)
        return EdgeProgramManager(lowered.programs, lowered.fallbacks, lowered.gathered_formats)

    def to_executorch(
        self, config: Optional[ExecutorchBackendConfig] = None, foundation_tag: Optional[str] = None
    ) -> "ExecutorchProgramManager":
        """Plans memory, emits and serializes the program and its data files.

        Args:
          config: alignment options; None for the defaults.
          foundation_tag: the external tag of the foundation data file the program is exported
            over: the program records that file's identity (Program.foundation_digest), made of
            the entries this program puts in it. When the file will hold more entries (shared by
            several programs), exir._serialize.with_foundation_digest sets the whole file's
            identity in place.
            None, or a program with nothing in that file: no identity is recorded.

        Returns:
          The .pte bytes and one .ptd per external tag.

        Raises:
          UnsupportedModelError, NamedDataError: naming the method, node or key at fault.
        """
        config = config or ExecutorchBackendConfig()
        emitted = emit_program(self._programs, config.constant_alignment, config.memory_alignment)
        output = emitted.store.get_named_data_store_output()
        data_entries: Dict[str, Dict[str, DataFileEntry]] = {}
        for tag in sorted(output.external_data):
            data_entries[tag] = {
                key: DataFileEntry(
                    output.buffers[e.buffer_index].data,
                    output.buffers[e.buffer_index].alignment,
                    e.tensor_layout,
                    output.buffers[e.buffer_index].digest,
                )
                for key, e in output.external_data[tag].items()
            }
        if data_entries.get(foundation_tag):
            emitted.program.foundationDigest = list(foundation_identity(data_entries[foundation_tag]))
        pte = serialize_pte(emitted.program, emitted.segments, config.segment_alignment)
        named_data = {
            key: len(output.buffers[output.pte_data[key].buffer_index].data)
            for key in sorted(output.pte_data, key=lambda k: k.encode("utf-8"))  # the file's order
        }
        return ExecutorchProgramManager(pte, data_entries, self.methods, config.tensor_alignment, named_data)


class DataFileEntry(NamedTuple):
    """One entry of a .ptd to write: its bytes (in place), alignment, layout and SHA-256."""

    data: Union[bytes, memoryview]
    alignment: int
    layout: Optional[TensorLayout]
    digest: bytes


class ExecutorchProgramManager:
    """The serialized program and what its data files hold.

    The .ptd images are made only when asked for (data_files): an exporter that writes one shared
    file for many programs streams it from data_entries instead (exir._serialize.write_ptd).

    Attributes:
      buffer: the .pte bytes.
      data_entries: {external tag: {key: DataFileEntry}}.
      methods: the method names.
      tensor_alignment: the .ptd segments' alignment.
      named_data: the program's own named data (in the .pte): key -> size in bytes, in key order.
    """

    def __init__(
        self,
        buffer: bytes,
        data_entries: Dict[str, Dict[str, "DataFileEntry"]],
        methods: List[str],
        tensor_alignment: int = ExecutorchBackendConfig.tensor_alignment,
        named_data: Optional[Dict[str, int]] = None,
    ) -> None:
        self.buffer = buffer
        self.data_entries = data_entries
        self.methods = methods
        self.tensor_alignment = tensor_alignment
        self.named_data = dict(named_data or {})
        self._data_files: Optional[Dict[str, bytes]] = None

    @property
    def data_files(self) -> Dict[str, bytes]:
        """{external tag: .ptd bytes}, e.g. {"foundation": ...} (made on first use)."""
        if self._data_files is None:
            self._data_files = {
                tag: serialize_ptd(entries, self.tensor_alignment) for tag, entries in self.data_entries.items()
            }
        return self._data_files

    def write_to_dir(self, folder: str, name: str) -> List[str]:
        """Writes <folder>/<name>.pte and <folder>/<tag>.ptd for each data file.

        Args:
          folder: the directory (created if missing).
          name: the program's file stem.

        Returns:
          The written paths, .pte first.
        """
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, f"{name}.pte")]
        with open(paths[0], "wb") as f:
            f.write(self.buffer)
        for tag, entries in self.data_entries.items():
            path = os.path.join(folder, f"{tag}.ptd")
            with open(path, "wb") as f:
                write_ptd(f, entries, self.tensor_alignment)
            paths.append(path)
        return paths
