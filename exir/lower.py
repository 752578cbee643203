"""Lowering: backends, their preprocess results, and to_backend over every method at once.

to_backend() asks each method's partitioner for tagged partitions, cuts every partition of every
method out as its own small ExportedProgram (its weights as parameters, node.meta carried over),
then calls each backend's preprocess_multimethod() ONCE with all of them, so a backend sees what
methods share. Each partition is then replaced in its method's graph by one call_delegate node
whose first argument is a LoweredBackendModule holding the processed bytes.
"""

import copy
import dataclasses
import heapq
import operator
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type

import torch
from edgeshare.exir.compile_spec import CompileSpec
from edgeshare.exir.data_policy import DATA_OPEN_META
from edgeshare.exir.errors import LoweringError
from edgeshare.exir.graph import lifted_inputs, lifted_tensor
from edgeshare.exir.named_data_store import NamedDataStoreOutput
from edgeshare.exir.partition import DELEGATION_TAG, Partitioner, PartitionResult
from torch._export.verifier import Verifier
from torch._ops import HigherOrderOperator, OpOverload
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)
from torch.utils import _pytree as pytree

__all__ = [
    "BackendDetails",
    "CompileSpec",
    "LoweredBackendModule",
    "LoweredPrograms",
    "PreprocessResult",
    "call_delegate",
    "get_backend",
    "to_backend",
]


@dataclasses.dataclass
class PreprocessResult:
    """What a backend's preprocess returns for one partition.

    Attributes:
      processed_bytes: the blob the runtime backend's init() receives.
      debug_handle_map: optional map from delegate-internal ids to node debug handles.
      data_store_output: named data (weights) the blob refers to by key, with their placement.
    """

    processed_bytes: bytes
    debug_handle_map: Optional[Dict[int, Tuple[int, ...]]] = None
    data_store_output: Optional[NamedDataStoreOutput] = None


_BACKENDS: Dict[str, Type["BackendDetails"]] = {}


class BackendDetails:
    """Base class of backends. A subclass registers itself under its class name (its id).

    Implement preprocess(), or preprocess_multimethod() to see every partition of every method at
    once (e.g. to store a weight two methods share once).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _BACKENDS[cls.__name__] = cls

    @classmethod
    def preprocess(cls, edge_program: ExportedProgram, compile_specs: List[CompileSpec]) -> PreprocessResult:
        """Compiles one partition.

        Args:
          edge_program: the partition as its own ExportedProgram.
          compile_specs: the partitioner's options for it.

        Returns:
          The processed blob and its named data.
        """
        raise NotImplementedError(f"{cls.__name__} implements neither preprocess nor preprocess_multimethod")

    @classmethod
    def preprocess_multimethod(
        cls,
        edge_programs: Dict[str, List[ExportedProgram]],
        compile_specs: Dict[str, List[List[CompileSpec]]],
    ) -> Dict[str, List[PreprocessResult]]:
        """Compiles every partition of every method (default: preprocess() on each).

        Args:
          edge_programs: method name -> its partitions, in order.
          compile_specs: method name -> one compile-spec list per partition.

        Returns:
          method name -> one PreprocessResult per partition, in the same order.

        Raises:
          LoweringError: the methods or partition counts of the two arguments differ.
        """
        if set(edge_programs) != set(compile_specs):
            raise LoweringError(
                f"{cls.__name__}: methods of edge programs {sorted(edge_programs)} and compile specs "
                f"{sorted(compile_specs)} differ"
            )
        results: Dict[str, List[PreprocessResult]] = {}
        for method, programs in edge_programs.items():
            specs = compile_specs[method]
            if len(programs) != len(specs):
                raise LoweringError(
                    f"{cls.__name__}: method '{method}' has {len(programs)} partitions but "
                    f"{len(specs)} compile spec lists"
                )
            results[method] = [cls.preprocess(p, s) for p, s in zip(programs, specs)]
        return results


def get_backend(backend_id: str) -> Type[BackendDetails]:
    """Returns the registered backend class called backend_id.

    Raises:
      LoweringError: no such backend is registered (its module was not imported).
    """
    try:
        return _BACKENDS[backend_id]
    except KeyError:
        raise LoweringError(
            f"no backend '{backend_id}' is registered (known: {sorted(_BACKENDS)}); import its module"
        ) from None


class LoweredBackendModule(torch.nn.Module):
    """A lowered partition, held by the method's graph and called through call_delegate.

    Attributes:
      backend_id: the backend's name.
      processed_bytes: the backend's blob.
      compile_specs: the options it was compiled with.
      original_module: the partition as an ExportedProgram (runs it eagerly).
      data_store_output: the named data the blob refers to.
      debug_handle_map: the backend's debug map, if any.
    """

    def __init__(
        self,
        backend_id: str,
        processed_bytes: bytes,
        compile_specs: List[CompileSpec],
        original_module: ExportedProgram,
        data_store_output: Optional[NamedDataStoreOutput],
        debug_handle_map: Optional[Dict[int, Tuple[int, ...]]] = None,
    ) -> None:
        super().__init__()
        self.backend_id = backend_id
        self.processed_bytes = processed_bytes
        self.compile_specs = list(compile_specs)
        self.original_module = original_module
        self.data_store_output = data_store_output
        self.debug_handle_map = debug_handle_map


def call_delegate(lowered: LoweredBackendModule, *args: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """The target of a delegate-call node: runs the partition eagerly (reference semantics).

    Args:
      lowered: the lowered partition.
      *args: its runtime inputs.

    Returns:
      Its outputs, as a tuple.
    """
    return tuple(lowered.original_module.module()(*args))


class _LoweredVerifier(Verifier):
    """Accepts call_delegate nodes and LoweredBackendModule attributes in a lowered program."""

    dialect = "EDGESHARE_LOWERED"

    def allowed_op_types(self) -> Tuple[type, ...]:
        return (OpOverload, HigherOrderOperator, type(call_delegate))

    def allowed_getattr_types(self) -> Tuple[type, ...]:
        return (torch.fx.GraphModule, pytree.TreeSpec, LoweredBackendModule)


@dataclasses.dataclass
class _Partition:
    method: str
    tag: str
    backend_id: str
    compile_specs: List[CompileSpec]
    nodes: List[torch.fx.Node]
    weight_inputs: List[torch.fx.Node]
    runtime_inputs: List[torch.fx.Node]
    outputs: List[torch.fx.Node]
    program: ExportedProgram


def _cut_partition(
    ep: ExportedProgram, method: str, tag: str, nodes: List[torch.fx.Node]
) -> Tuple[List[torch.fx.Node], List[torch.fx.Node], List[torch.fx.Node], ExportedProgram]:
    """Cuts tagged nodes out as their own ExportedProgram (weights as parameters, open data as inputs)."""
    lifted = lifted_inputs(ep)
    node_set = set(nodes)
    inputs: List[torch.fx.Node] = []
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in node_set and arg not in inputs:
                inputs.append(arg)
    # Open data (a swappable adapter's weights) stays the program's: the delegate takes it as an
    # input, so it reads whatever bytes the runtime binds at each execute and never holds a copy.
    weights = [
        n
        for n in inputs
        if n.op == "placeholder" and n.name in lifted and not n.meta.get(DATA_OPEN_META, False)
    ]
    runtime = [n for n in inputs if n not in weights]
    outputs = [n for n in nodes if any(u not in node_set for u in n.users)]
    for out in outputs:
        if not isinstance(out.meta.get("val"), torch.Tensor):
            raise LoweringError(f"method '{method}', partition '{tag}': output node '{out.name}' is not a tensor")
    if not outputs:
        raise LoweringError(f"method '{method}', partition '{tag}' has no outputs")

    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    input_specs = []
    state_dict: Dict[str, torch.Tensor] = {}
    for node in weights:
        fqn = lifted[node.name].fqn
        ph = graph.placeholder(node.name)
        ph.meta = copy.copy(node.meta)
        env[node] = ph
        value = lifted_tensor(ep, fqn)
        state_dict[fqn] = (
            value if isinstance(value, torch.nn.Parameter) else torch.nn.Parameter(value, requires_grad=False)
        )
        input_specs.append(InputSpec(InputKind.PARAMETER, TensorArgument(ph.name), fqn))
    for node in runtime:
        ph = graph.placeholder(node.name)
        ph.meta = copy.copy(node.meta)
        env[node] = ph
        input_specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(ph.name), None))
    for node in nodes:
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(tuple(env[o] for o in outputs))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    output_specs = [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(env[o].name), None) for o in outputs]
    example_in = tuple(n.meta["val"] for n in runtime)
    example_out = tuple(o.meta["val"] for o in outputs)
    call_graph = [
        ModuleCallEntry(
            "",
            ModuleCallSignature(
                inputs=[],
                outputs=[],
                in_spec=pytree.tree_flatten((example_in, {}))[1],
                out_spec=pytree.tree_flatten(example_out)[1],
            ),
        )
    ]
    program = ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=ExportGraphSignature(input_specs, output_specs),
        state_dict=state_dict,
        range_constraints={},
        module_call_graph=call_graph,
        constants={},
    )
    return weights, runtime, outputs, program


def _topological(graph: torch.fx.Graph) -> torch.fx.Graph:
    """Returns a copy of graph in a topological order that keeps the original order where it can."""
    order = list(graph.nodes)
    position = {n: i for i, n in enumerate(order)}
    pending = {n: len(set(n.all_input_nodes)) for n in order}
    ready = [(position[n], n.name) for n in order if pending[n] == 0]
    heapq.heapify(ready)
    by_name = {n.name: n for n in order}
    new_graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    while ready:
        _, name = heapq.heappop(ready)
        node = by_name[name]
        env[node] = new_graph.node_copy(node, lambda a: env[a])
        for user in node.users:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, (position[user], user.name))
    if len(env) != len(order):
        raise LoweringError("lowering produced a cycle in the graph")
    return new_graph


def _replace_partitions(
    ep: ExportedProgram, method: str, parts: List[_Partition], lowered: List[LoweredBackendModule]
) -> ExportedProgram:
    """Returns a copy of ep with each partition replaced by a call_delegate node."""
    gm = copy.deepcopy(ep.graph_module)
    by_name = {n.name: n for n in gm.graph.nodes}
    # An output of one partition that feeds a later one is replaced by a getitem of its call.
    replaced: Dict[str, torch.fx.Node] = {}
    for index, (part, module) in enumerate(zip(parts, lowered)):
        attr = f"lowered_module_{index}"
        setattr(gm, attr, module)
        nodes = [by_name[n.name] for n in part.nodes]
        outputs = [by_name[n.name] for n in part.outputs]
        runtime_inputs = [replaced.get(n.name, by_name[n.name]) for n in part.runtime_inputs]
        with gm.graph.inserting_after(nodes[-1]):
            get = gm.graph.get_attr(attr)
        with gm.graph.inserting_after(get):
            call = gm.graph.call_function(call_delegate, (get, *runtime_inputs))
        call.meta["val"] = tuple(o.meta["val"] for o in outputs)
        call.meta[DELEGATION_TAG] = part.tag
        last = call
        for k, out in enumerate(outputs):
            with gm.graph.inserting_after(last):
                item = gm.graph.call_function(operator.getitem, (call, k))
            item.meta = {"val": out.meta["val"]}
            out.replace_all_uses_with(item, delete_user_cb=lambda u, s=set(nodes): u not in s)
            replaced[out.name] = item
            last = item
        for node in reversed(nodes):
            if node.users:
                raise LoweringError(f"method '{method}', partition '{part.tag}': node '{node.name}' is still used")
            gm.graph.erase_node(node)
    # Drop weights nothing uses any more.
    lifted = lifted_inputs(ep)
    removed = set()
    for node in list(gm.graph.nodes):
        if node.op == "placeholder" and node.name in lifted and not node.users:
            removed.add(node.name)
            gm.graph.erase_node(node)
    new_graph = _topological(gm.graph)
    new_gm = torch.fx.GraphModule(gm, new_graph)
    input_specs = [s for s in ep.graph_signature.input_specs if s.arg.name not in removed]
    out_node = next(n for n in new_graph.nodes if n.op == "output")
    out_args = list(pytree.tree_leaves(out_node.args[0]))
    output_specs = []
    for spec, arg in zip(ep.graph_signature.output_specs, out_args):
        output_specs.append(
            OutputSpec(spec.kind, TensorArgument(arg.name) if isinstance(arg, torch.fx.Node) else spec.arg, spec.target)
        )
    state_dict = {k: v for k, v in ep.state_dict.items() if any(s.target == k for s in input_specs)}
    constants = {k: v for k, v in ep.constants.items() if any(s.target == k for s in input_specs)}
    root_entry = ep.module_call_graph[0]
    call_graph = [
        ModuleCallEntry(
            "",
            ModuleCallSignature(
                inputs=[], outputs=[], in_spec=root_entry.signature.in_spec, out_spec=root_entry.signature.out_spec
            ),
        )
    ]
    return ExportedProgram(
        root=new_gm,
        graph=new_gm.graph,
        graph_signature=ExportGraphSignature(input_specs, output_specs),
        state_dict=state_dict,
        range_constraints=ep.range_constraints,
        module_call_graph=call_graph,
        constants=constants,
        verifiers=[_LoweredVerifier],
    )


def _check_results(backend_id: str, expected: Dict[str, List[Any]], results: Any) -> None:
    if not isinstance(results, Mapping):
        raise LoweringError(f"{backend_id}.preprocess_multimethod returned {type(results).__name__}, not a dict")
    for method, programs in expected.items():
        got = results.get(method)
        if got is None:
            raise LoweringError(f"{backend_id}.preprocess_multimethod returned no results for method '{method}'")
        if len(got) != len(programs):
            raise LoweringError(
                f"{backend_id}.preprocess_multimethod returned {len(got)} results for method '{method}', "
                f"which has {len(programs)} partitions"
            )
        for i, result in enumerate(got):
            if not isinstance(result, PreprocessResult) or not isinstance(result.processed_bytes, (bytes, bytearray)):
                raise LoweringError(
                    f"{backend_id}.preprocess_multimethod: result {i} of method '{method}' is not a "
                    "PreprocessResult with bytes"
                )
    extra = set(results) - set(expected)
    if extra:
        raise LoweringError(f"{backend_id}.preprocess_multimethod returned unknown methods {sorted(extra)}")


@dataclasses.dataclass
class LoweredPrograms:
    """What to_backend returns.

    Attributes:
      programs: method name -> lowered program (partitions replaced by call_delegate nodes).
      fallbacks: weight key -> why it is stored in its format's fallback, as the partitioners
        chose (PartitionResult.fallbacks, in method order).
      gathered_formats: token embedding key -> the format option its gather reads
        (PartitionResult.gathered_formats).
    """

    programs: Dict[str, ExportedProgram]
    fallbacks: Dict[str, str]
    gathered_formats: Dict[str, str]


def to_backend(programs: Dict[str, ExportedProgram], partitioners: Dict[str, Partitioner]) -> LoweredPrograms:
    """Partitions every method, preprocesses all partitions per backend at once, and lowers them.

    Args:
      programs: method name -> edge program.
      partitioners: method name -> partitioner; methods without one are left as they are.

    Returns:
      The lowered programs and what the partitioners chose for the weights' formats.

    Raises:
      LoweringError: naming the method, when a partitioner or backend breaks the contract.
    """
    unknown = set(partitioners) - set(programs)
    if unknown:
        raise LoweringError(f"partitioners given for unknown methods {sorted(unknown)} (methods: {sorted(programs)})")
    parts_by_method: Dict[str, List[_Partition]] = {m: [] for m in programs}
    fallbacks: Dict[str, str] = {}
    gathered_formats: Dict[str, str] = {}
    for method, ep in programs.items():
        partitioner = partitioners.get(method)
        if partitioner is None:
            continue
        if not isinstance(partitioner, Partitioner):
            raise TypeError(f"method '{method}': partitioner must be a Partitioner, got {type(partitioner).__name__}")
        result = partitioner.partition(ep)
        if not isinstance(result, PartitionResult):
            raise LoweringError(
                f"method '{method}': {type(partitioner).__name__}.partition did not return a PartitionResult"
            )
        fallbacks.update(result.fallbacks)
        gathered_formats.update(result.gathered_formats)
        tagged = result.tagged_exported_program
        if tagged is not ep:
            programs = dict(programs)
            programs[method] = tagged
        groups: Dict[str, List[torch.fx.Node]] = {}
        for node in tagged.graph.nodes:
            tag = node.meta.get(DELEGATION_TAG)
            if tag is None or node.op != "call_function":
                continue
            if tag not in result.partition_tags:
                raise LoweringError(f"method '{method}': node '{node.name}' has tag '{tag}' with no delegation spec")
            groups.setdefault(tag, []).append(node)
        for tag, nodes in groups.items():
            spec = result.partition_tags[tag]
            get_backend(spec.backend_id)
            weights, runtime, outputs, sub = _cut_partition(tagged, method, tag, nodes)
            parts_by_method[method].append(
                _Partition(
                    method, tag, spec.backend_id, list(spec.compile_specs), nodes, weights, runtime, outputs, sub
                )
            )
    # One preprocess_multimethod call per backend, with every method's partitions.
    results: Dict[Tuple[str, str, str], PreprocessResult] = {}
    backends = sorted({p.backend_id for parts in parts_by_method.values() for p in parts})
    for backend_id in backends:
        edge_programs: Dict[str, List[ExportedProgram]] = {}
        specs: Dict[str, List[List[CompileSpec]]] = {}
        for method, parts in parts_by_method.items():
            mine = [p for p in parts if p.backend_id == backend_id]
            if mine:
                edge_programs[method] = [p.program for p in mine]
                specs[method] = [p.compile_specs for p in mine]
        out = get_backend(backend_id).preprocess_multimethod(edge_programs, specs)
        _check_results(backend_id, edge_programs, out)
        for method in edge_programs:
            mine = [p for p in parts_by_method[method] if p.backend_id == backend_id]
            for part, result in zip(mine, out[method]):
                results[(method, part.tag, backend_id)] = result
    lowered_programs: Dict[str, ExportedProgram] = {}
    for method, ep in programs.items():
        parts = parts_by_method[method]
        if not parts:
            lowered_programs[method] = ep
            continue
        modules = []
        for part in parts:
            r = results[(method, part.tag, part.backend_id)]
            modules.append(
                LoweredBackendModule(
                    part.backend_id,
                    bytes(r.processed_bytes),
                    part.compile_specs,
                    part.program,
                    r.data_store_output,
                    r.debug_handle_map,
                )
            )
        lowered_programs[method] = _replace_partitions(ep, method, parts, modules)
    return LoweredPrograms(lowered_programs, fallbacks, gathered_formats)
