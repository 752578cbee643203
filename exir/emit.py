"""Emission: lowered programs -> a Program (FlatBuffers object API), its segments and named data.

Per method, in graph order:
  - user inputs and every tensor an instruction writes are memory-planned (memory_id 1); inputs
    and outputs are live for the whole method, so inputs survive execute();
  - weights whose placement has an external tag become Tensor values with external_key and
    external_digest (the SHA-256 of their bytes, which go to that tag's .ptd; none for an open
    placement, which the runtime may rebind); other weights become constant_segment tensors in
    the .pte;
  - call_delegate nodes become DelegateCalls (inputs, then outputs) and their named data is merged;
  - every other ATen node becomes a KernelCall on "aten::<name>" with overload "" for .default,
    its schema arguments in order (defaults filled in), then its outputs;
  - nodes computed from constants alone (e.g. aten.full) are folded into constant segments;
  - a buffer the method mutates (a KV cache) is state: a planned tensor live across executes, set
    to its initial bytes at load; the op computing its new value (index_put, ...) writes the state
    tensor in place when nothing reads the old value after it, else a copy call ends the method;
  - dynamic dims (torch.export's dynamic_shapes with a max): a tensor's sizes hold their upper
    bound (from the program's range constraints), dynamic_dims names the symbolic ones, and memory
    is planned for the bound; size nodes (aten.sym_size.int, python arithmetic on SymInts) become
    KernelCalls writing Int values ("aten::sym_size.int", "sym::add", ...); an int list with a
    symbolic item becomes a SymIntList of Int values, a tensor list (cat's, index's) a ValueList.
"""

import dataclasses
import hashlib
import math
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import sympy
import torch
from edgeshare.exir._serialize._format import Segment, named_data_to_fb
from edgeshare.exir.data_policy import DATA_KEY_META, DATA_OPEN_META, EXTERNAL_TAG_META
from edgeshare.exir.errors import UnsupportedModelError
from edgeshare.exir.graph import lifted_inputs, lifted_tensor, mutated_buffers
from edgeshare.exir.lower import LoweredBackendModule, call_delegate
from edgeshare.exir.memory_planning import PlannedTensor, plan_memory
from edgeshare.exir.named_data_store import NamedDataStore
from edgeshare.exir.runtime_kernels import supports
from edgeshare.exir.tensor_layout import TensorLayout, scalar_type_of, tensor_bytes, tensor_digest, tensor_view
from edgeshare.schema import program_generated as fb
from torch._ops import OpOverload
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import bound_sympy

__all__ = ["EmittedProgram", "emit_program"]

PLANNED_MEMORY_ID = 1


@dataclasses.dataclass
class EmittedProgram:
    """The emitter's output.

    Attributes:
      program: the Program, without segments table (the serializer fills it).
      segments: the .pte's segments (constants, delegate blobs, named data).
      store: every named datum of the program and its data files.
    """

    program: "fb.ProgramT"
    segments: List[Segment]
    store: NamedDataStore


class _Segments:
    """The .pte's segments, deduplicated by content."""

    def __init__(self) -> None:
        self.segments: List[Segment] = []
        self._index: Dict[Tuple[bytes, int], int] = {}

    def add(self, data: bytes, alignment: int, digest: Optional[bytes] = None) -> int:
        ident = (hashlib.sha256(data).digest() if digest is None else digest, len(data))
        index = self._index.get(ident)
        if index is None:
            index = len(self.segments)
            self._index[ident] = index
            self.segments.append(Segment(data, alignment))
        elif self.segments[index].alignment < alignment:
            self.segments[index] = Segment(data, alignment)
        return index


def _tensor_value(tensor: torch.Tensor, what: str) -> "fb.TensorT":
    t = fb.TensorT()
    layout = TensorLayout.of(tensor, what)
    t.scalarType = layout.scalar_type
    t.sizes = list(layout.sizes)
    t.dimOrder = list(layout.dim_order)
    return t


# Python arithmetic on sizes that torch.export records as call_function nodes, and the size
# kernel each one becomes.
_SIZE_OPS = {
    operator.add: "sym::add",
    operator.sub: "sym::sub",
    operator.mul: "sym::mul",
    operator.floordiv: "sym::floordiv",
    operator.mod: "sym::mod",
    operator.neg: "sym::neg",
    torch.sym_max: "sym::max",
    torch.sym_min: "sym::min",
}


def _is_symbolic(size: Any) -> bool:
    return isinstance(size, torch.SymInt) and not size.node.expr.is_number


class _Bounds:
    """Upper bounds of a program's symbolic sizes, from its range constraints."""

    def __init__(self, ep: ExportedProgram) -> None:
        self.ranges = dict(ep.range_constraints)

    def size(self, size: Union[int, torch.SymInt], what: str) -> int:
        if not _is_symbolic(size):
            return int(size)
        expr = size.node.expr
        upper = bound_sympy(expr, self.ranges).upper
        if upper in (int_oo, sympy.oo) or not upper.is_number:
            raise UnsupportedModelError(
                f"{what}: size {expr} has no upper bound; give the dynamic dim a max (torch.export.Dim(name, max=N))"
            )
        return int(upper)

    def tensor(self, tensor: torch.Tensor, what: str) -> Tuple[List[int], List[int]]:
        """The tensor's sizes at their upper bound and the indices of its symbolic dims."""
        sizes = [self.size(s, what) for s in tensor.shape]
        dynamic = [d for d, s in enumerate(tensor.shape) if _is_symbolic(s)]
        return sizes, dynamic


def _evalue(kind: int, val: Any) -> "fb.EValueT":
    e = fb.EValueT()
    e.valType = kind
    e.val = val
    return e


def _is_size(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (int, torch.SymInt)) and not isinstance(node.meta.get("val"), bool)


class _MethodEmitter:
    def __init__(
        self,
        method: str,
        ep: ExportedProgram,
        segments: _Segments,
        store: NamedDataStore,
        constant_alignment: int,
        memory_alignment: int,
    ) -> None:
        self.method = method
        self.ep = ep
        self.segments = segments
        self.store = store
        self.constant_alignment = constant_alignment
        self.memory_alignment = memory_alignment
        self.plan = fb.ExecutionPlanT()
        self.plan.name = method
        self.values: List[fb.EValueT] = []
        self.instructions: List[fb.InstructionT] = []
        self.operators: List[Tuple[str, str]] = []
        self.delegates: List[fb.BackendDelegateT] = []
        self.node_values: Dict[torch.fx.Node, Union[int, Tuple[int, ...]]] = {}
        self.planned: Dict[int, List[int]] = {}  # value index -> [nbytes, first, last]
        self.folded: Dict[torch.fx.Node, torch.Tensor] = {}
        self.bounds = _Bounds(ep)
        self.state: List["fb.StateBufferT"] = []
        self.state_values: Dict[str, int] = {}  # buffer placeholder name -> its state value
        self.writes_state: Dict[torch.fx.Node, int] = {}  # node -> the state value it writes

    # values -----------------------------------------------------------------------------------
    def _add(self, e: "fb.EValueT") -> int:
        self.values.append(e)
        return len(self.values) - 1

    def _planned_tensor(self, tensor: torch.Tensor, what: str, first_use: int) -> int:
        sizes, dynamic = self.bounds.tensor(tensor, what)
        t = fb.TensorT()
        t.scalarType = scalar_type_of(tensor.dtype, what)
        t.sizes = sizes
        t.dimOrder = list(range(len(sizes)))
        if dynamic:
            t.dynamicDims = dynamic
        t.allocation = fb.AllocationInfoT()
        t.allocation.memoryId = PLANNED_MEMORY_ID
        index = self._add(_evalue(fb.KernelTypes.Tensor, t))
        nbytes = math.prod(sizes) * tensor.element_size()
        self.planned[index] = [nbytes, first_use, first_use]
        return index

    def _constant_tensor(self, tensor: torch.Tensor, what: str) -> int:
        t = _tensor_value(tensor, what)
        t.constantSegment = self.segments.add(tensor_bytes(tensor), self.constant_alignment)
        return self._add(_evalue(fb.KernelTypes.Tensor, t))

    def _use(self, index: int) -> None:
        if index in self.planned:
            self.planned[index][2] = max(self.planned[index][2], len(self.instructions))

    def _scalar(self, value: Any, what: str) -> int:
        if value is None or isinstance(value, (torch.device, torch.layout, torch.memory_format)):
            return self._add(_evalue(fb.KernelTypes.Null, fb.NullT()))
        if isinstance(value, bool):
            b = fb.BoolT()
            b.boolVal = value
            return self._add(_evalue(fb.KernelTypes.Bool, b))
        if isinstance(value, int):
            i = fb.IntT()
            i.intVal = value
            return self._add(_evalue(fb.KernelTypes.Int, i))
        if isinstance(value, float):
            d = fb.DoubleT()
            d.doubleVal = value
            return self._add(_evalue(fb.KernelTypes.Double, d))
        if isinstance(value, str):  # e.g. gelu's approximate="tanh"
            text = fb.StringT()
            text.stringVal = value
            return self._add(_evalue(fb.KernelTypes.String, text))
        if isinstance(value, torch.dtype):
            i = fb.IntT()
            i.intVal = scalar_type_of(value, what)
            return self._add(_evalue(fb.KernelTypes.Int, i))
        if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            lst = fb.IntListT()
            lst.items = [int(v) for v in value]
            return self._add(_evalue(fb.KernelTypes.IntList, lst))
        raise UnsupportedModelError(f"{what}: argument {value!r} of type {type(value).__name__} is not supported")

    def _arg(self, value: Any, what: str) -> int:
        if isinstance(value, torch.fx.Node):
            if value in self.folded:
                index = self._constant_tensor(self.folded[value], what)
            else:
                index = self.node_values.get(value)
                if not isinstance(index, int):
                    raise UnsupportedModelError(f"{what}: argument '{value.name}' is not a single value")
            self._use(index)
            return index
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
            return self._list(value, what)
        return self._scalar(value, what)

    def _list(self, items: Sequence[Any], what: str) -> int:
        """A list naming other values: sizes (some computed at run time) or tensors (some None)."""
        if all(isinstance(v, int) or (isinstance(v, torch.fx.Node) and _is_size(v)) for v in items):
            sym = fb.SymIntListT()
            sym.items = [self._arg(v, what) for v in items]
            return self._add(_evalue(fb.KernelTypes.SymIntList, sym))
        if all(v is None or (isinstance(v, torch.fx.Node) and not _is_size(v)) for v in items):
            lst = fb.ValueListT()
            lst.items = [self._arg(v, what) for v in items]
            return self._add(_evalue(fb.KernelTypes.ValueList, lst))
        raise UnsupportedModelError(f"{what}: list argument {list(items)!r} mixes sizes and tensors")

    def _size_node(self, node: torch.fx.Node) -> None:
        """A node computing a size: a constant Int when torch.export proved it static, else a call
        to a size kernel writing an Int value."""
        val = node.meta.get("val")
        what = f"method '{self.method}', node '{node.name}'"
        if not _is_symbolic(val):
            self.node_values[node] = self._scalar(int(val), what)
            return
        if node.target is torch.ops.aten.sym_size.int:
            name, overload = "aten::sym_size", "int"
        elif node.target in _SIZE_OPS:
            name, overload = _SIZE_OPS[node.target], ""
        else:
            raise UnsupportedModelError(f"{what}: size computation {node.target} is not supported by the runtime")
        args = [self._arg(a, what) for a in node.args]
        out = fb.IntT()
        out.intVal = 0  # written by the kernel on every execute
        index = self._add(_evalue(fb.KernelTypes.Int, out))
        self.node_values[node] = index
        self._call(name, overload, args + [index], what)

    # nodes ------------------------------------------------------------------------------------
    def _placeholders(self) -> List[int]:
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        lifted = lifted_inputs(self.ep)
        inputs = []
        for node in self.ep.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs[node.name]
            what = f"method '{self.method}', input '{node.name}'"
            if spec.kind == InputKind.USER_INPUT:
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    raise UnsupportedModelError(f"{what} is not a tensor ({type(val).__name__})")
                index = self._planned_tensor(val, what, -1)
                self.node_values[node] = index
                inputs.append(index)
            elif node.name in self.mutated:
                self._state_tensor(node, lifted_tensor(self.ep, spec.target), what)
            elif node.name in lifted:
                tensor = lifted_tensor(self.ep, lifted[node.name].fqn)
                tag = node.meta.get(EXTERNAL_TAG_META)
                if tag is not None:
                    key = node.meta[DATA_KEY_META]
                    layout = TensorLayout.of(tensor, what)
                    digest = tensor_digest(tensor)
                    self.store.add_named_data(key, tensor_view(tensor), self.constant_alignment, tag, layout, digest)
                    t = _tensor_value(tensor, what)
                    t.externalKey = key
                    if not node.meta.get(DATA_OPEN_META, False):
                        # The identity the runtime checks against the data file's digest for the
                        # key: the same SHA-256 the store records for these bytes. Open data (a
                        # swappable adapter) has none, so the runtime may rebind it.
                        t.externalDigest = list(digest)
                    self.node_values[node] = self._add(_evalue(fb.KernelTypes.Tensor, t))
                else:
                    self.node_values[node] = self._constant_tensor(tensor, what)
            else:
                raise UnsupportedModelError(f"{what}: input kind {spec.kind.name} is not supported")
        return inputs

    def _state_tensor(self, node: torch.fx.Node, initial: torch.Tensor, what: str) -> None:
        index = self._planned_tensor(initial, what, -1)
        entry = fb.StateBufferT()
        entry.value = index
        if bool(torch.any(initial != 0)):
            entry.initialSegment = self.segments.add(tensor_bytes(initial), self.constant_alignment)
        self.state.append(entry)
        self.state_values[node.name] = index
        self.node_values[node] = index

    def _plan_state_writes(self) -> None:
        """Lets the op computing a buffer's new value write it in place when that is safe: the op
        is an index_put on the buffer itself and nothing reads the old value after it."""
        order = {n: i for i, n in enumerate(self.ep.graph.nodes)}
        nodes = {n.name: n for n in self.ep.graph.nodes}
        for placeholder, result in self.mutated.items():
            buffer, new = nodes[placeholder], nodes[result]
            in_place = (
                new.target in (torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default)
                and new.args[0] is buffer
                and all(order[user] <= order[new] for user in buffer.users)
            )
            if in_place:
                self.writes_state[new] = self.state_values[placeholder]

    def _fold(self, node: torch.fx.Node) -> bool:
        """Folds a node computed from constants alone (no placeholder feeds it)."""
        if not isinstance(node.target, OpOverload) or node.target._schema.is_mutable:
            return False
        if any(a not in self.folded for a in node.all_input_nodes):
            return False
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.numel() > 1 << 20:
            return False
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: self.folded[a])
        self.folded[node] = node.target(*args, **kwargs)
        return True

    def _delegate(self, node: torch.fx.Node) -> None:
        get_attr = node.args[0]
        module = getattr(self.ep.graph_module, get_attr.target)
        assert isinstance(module, LoweredBackendModule)
        what = f"method '{self.method}', delegate '{node.name}'"
        args = [self._arg(a, what) for a in node.args[1:]]
        outs = [self._planned_tensor(v, what, len(self.instructions)) for v in node.meta["val"]]
        self.node_values[node] = tuple(outs)
        delegate = fb.BackendDelegateT()
        delegate.id = module.backend_id
        delegate.segmentIndex = self.segments.add(module.processed_bytes, 16)
        specs = []
        for cs in module.compile_specs:
            c = fb.CompileSpecT()
            c.key = cs.key
            c.value = list(cs.value)
            specs.append(c)
        delegate.compileSpecs = specs
        if module.data_store_output is not None:
            self.store.merge(module.data_store_output)
        self.delegates.append(delegate)
        call = fb.DelegateCallT()
        call.delegateIndex = len(self.delegates) - 1
        call.args = args + outs
        self._instruction(fb.InstructionArguments.DelegateCall, call)

    def _instruction(self, kind: int, args: Any) -> None:
        ins = fb.InstructionT()
        ins.instrArgsType = kind
        ins.instrArgs = args
        self.instructions.append(ins)

    def _kernel(self, node: torch.fx.Node) -> None:
        op: OpOverload = node.target
        what = f"method '{self.method}', node '{node.name}' ({op})"
        schema = op._schema
        args = []
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args) and not arg.kwarg_only:
                value = node.args[i]
            elif arg.name in node.kwargs:
                value = node.kwargs[arg.name]
            elif arg.has_default_value():
                value = arg.default_value
            else:
                raise UnsupportedModelError(f"{what}: argument '{arg.name}' is missing")
            args.append(self._arg(value, what))
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
        outs = []
        for v in vals:
            if not isinstance(v, torch.Tensor):
                raise UnsupportedModelError(f"{what}: output {v!r} is not a tensor")
            if node in self.writes_state:
                outs.append(self.writes_state[node])
            else:
                outs.append(self._planned_tensor(v, what, len(self.instructions)))
        self.node_values[node] = tuple(outs) if isinstance(val, (tuple, list)) else outs[0]
        overload = "" if op._overloadname == "default" else op._overloadname
        self._call(schema.name, overload, args + outs, what)

    def _call(self, name: str, overload: str, args: List[int], what: str) -> None:
        full = f"{name}.{overload}" if overload else name
        if not supports(full):
            raise UnsupportedModelError(
                f"{what}: operator {full} has no kernel in the runtime and no delegate took the node"
            )
        if (name, overload) not in self.operators:
            self.operators.append((name, overload))
        call = fb.KernelCallT()
        call.opIndex = self.operators.index((name, overload))
        call.args = args
        self._instruction(fb.InstructionArguments.KernelCall, call)

    def emit(self) -> "fb.ExecutionPlanT":
        self.mutated = mutated_buffers(self.ep)
        inputs = self._placeholders()
        self._plan_state_writes()
        output_kinds = [spec.kind for spec in self.ep.graph_signature.output_specs]
        outputs: List[int] = []
        state_updates: List[Tuple[int, int]] = []  # (state value, its new value), copied at the end
        for node in self.ep.graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                continue
            if node.op == "output":
                what = f"method '{self.method}', output"
                leaves = torch.utils._pytree.tree_leaves(node.args[0])
                for i, out in enumerate(leaves):
                    if not isinstance(out, torch.fx.Node):
                        raise UnsupportedModelError(f"{what} {out!r} is not a tensor")
                    if out in self.folded:
                        index = self._constant_tensor(self.folded[out], what)
                    else:
                        index = self.node_values[out]
                    if not isinstance(index, int):
                        raise UnsupportedModelError(f"{what} '{out.name}' is not a single tensor")
                    if i < len(output_kinds) and output_kinds[i] == OutputKind.BUFFER_MUTATION:
                        state = self._state_of_output(i)
                        if index != state:
                            state_updates.append((state, index))
                    else:
                        outputs.append(index)
                for state, index in state_updates:
                    self._use(index)
                    self._call("aten::copy", "", [state, index, self._scalar(False, what), state], what)
                continue
            if node.op != "call_function":
                raise UnsupportedModelError(f"method '{self.method}', node '{node.name}': {node.op} is not supported")
            if node.target is call_delegate:
                self._delegate(node)
            elif _is_size(node):
                self._size_node(node)
            elif node.target is operator.getitem:
                src, idx = node.args
                if src in self.folded:
                    continue
                self.node_values[node] = self.node_values[src][idx]
            elif isinstance(node.target, OpOverload):
                if not self._fold(node):
                    self._kernel(node)
            else:
                raise UnsupportedModelError(
                    f"method '{self.method}', node '{node.name}': target {node.target} is not an ATen operator"
                )
        # Outputs live past the last instruction; so do inputs: a method may execute again on the
        # inputs set once (tools/run --iterations), so no intermediate may be planned over them.
        for index in outputs + inputs + [s.value for s in self.state]:
            if index in self.planned:
                self.planned[index][2] = len(self.instructions)
        tensors = [PlannedTensor(i, n, f, last) for i, (n, f, last) in self.planned.items()]
        offsets, total = plan_memory(tensors, self.memory_alignment)
        for index, offset in offsets.items():
            self.values[index].val.allocation.offset = offset
        plan = self.plan
        plan.values = self.values
        plan.inputs = inputs
        plan.outputs = outputs
        plan.instructions = self.instructions
        ops = []
        for name, overload in self.operators:
            o = fb.OperatorT()
            o.name = name
            o.overload = overload
            ops.append(o)
        plan.operators = ops
        plan.delegates = self.delegates
        plan.nonConstBufferSizes = [0, total]
        plan.state = self.state
        return plan

    def _state_of_output(self, i: int) -> int:
        """The state value a BUFFER_MUTATION output (position i) updates."""
        target = self.ep.graph_signature.output_specs[i].target
        for spec in self.ep.graph_signature.input_specs:
            if spec.kind == InputKind.BUFFER and spec.target == target:
                return self.state_values[spec.arg.name]
        raise UnsupportedModelError(f"method '{self.method}': mutated buffer '{target}' is not an input")


def emit_program(
    programs: Dict[str, ExportedProgram],
    constant_alignment: int = 16,
    memory_alignment: int = 16,
) -> EmittedProgram:
    """Emits every method into one Program.

    Args:
      programs: method name -> lowered program.
      constant_alignment: alignment of constant and named-data segments.
      memory_alignment: alignment of every memory-planned tensor's offset.

    Returns:
      The Program, its segments and the named-data store (program keys are already in segments).

    Raises:
      UnsupportedModelError: naming the method and node the runtime cannot run.
      NamedDataError: a named-data key conflicts across methods or partitions.
    """
    segments = _Segments()
    store = NamedDataStore()
    program = fb.ProgramT()
    program.executionPlans = [
        _MethodEmitter(m, ep, segments, store, constant_alignment, memory_alignment).emit()
        for m, ep in programs.items()
    ]
    output = store.get_named_data_store_output()
    named = []
    for key, entry in output.pte_data.items():
        buf = output.buffers[entry.buffer_index]
        index = segments.add(buf.data, buf.alignment, buf.digest)
        named.append(named_data_to_fb(fb, key, index, buf.digest, entry.tensor_layout))
    program.namedData = named
    return EmittedProgram(program, segments.segments, store)
