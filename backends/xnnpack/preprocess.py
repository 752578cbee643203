"""XnnpackBackend: turns a partition into an XNNPACK graph flatbuffer ("ESX1").

Weights are not embedded: each becomes a CONSTANT value carrying its named-data key and SHA-256
digest, and its bytes go into the partition's NamedDataStore output under the key and external tag
the data policy recorded on its placeholder (so foundation weights land in foundation.ptd). Scalar
operands of elementwise ops are inline constants.

A partition of a program exported with dynamic shapes has values whose dims are plain symbols
(the partitioner admits no other): each such dim is written at its symbol's bound with a reference
to the symbol (Value.dim_symbols, Graph.symbols, graph version 2), and the delegate binds the
symbols from its inputs' real sizes at every execute. A static partition's blob is unchanged
(version 1, no symbols).

With the compile spec fc_weight_dtype=fp16 (XnnpackPartitioner(fc_weight_dtype="fp16")), the weight
and bias of every FULLY_CONNECTED node are HALF constants under "<key>.fp16" (same external tag),
digested over their half bytes. "<key>.fp16" cannot be another weight's key: "<key>" is a tensor,
so no module is called "<key>" and no parameter "<key>.fp16" exists. A weight read by any other
node keeps an fp32 constant under "<key>" for those reads.

With the compile spec quantize=int8 (XnnpackPartitioner(quantize="int8")), the weight of every
FULLY_CONNECTED node that is pinned external data (the foundation) is a CHAR constant under
"<key>.qc8w" with quant_scheme QC8W and its float32 scales under "<key>.qc8w.scales" (same external
tag), each digested over its own bytes (exir/quantize.py); its bias and every program-kept
(adapter) weight stay float32 (unless adapter_dtype, below). A weight read by any other node keeps
its fp32 constant too.

With quantize=int4 and group_size=G, such a weight is a BYTE constant with quant_scheme QC4W and
group_size G under "<key>.qc4w" (uint8 [out, in / 2]) with its float16 scales under
"<key>.qc4w.scales" ([out, in / G]), unless the partitioner recorded int8 for it on its placeholder
(QUANT_SCHEME_META: the output layer, a tied embedding, an input size not a multiple of G); then it
is QC8W as above.

With the compile spec adapter_dtype=fp16 or int8 (XnnpackPartitioner(adapter_dtype=...)), a weight
the program keeps (an adapter's: not pinned in a shared .ptd) read as a fully connected weight is
stored as that option's row stores it (f16w: HALF weight and bias under "<key>.fp16"; qc8w: CHAR
weight and float32 scales under "<key>.qc8w" and "<key>.qc8w.scales"), in the program's own data.
An open (swappable) weight the partitioner stored in the row (exir/stored_linear.py) is a delegate
INPUT of that dtype (HALF, or CHAR with its float32 scales as a further input).
"""

import hashlib
import math
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import flatbuffers
import torch
from edgeshare.backends.xnnpack import op_rows
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.backends.xnnpack.partitioner import (
    ADAPTER_DTYPE_SPEC,
    FC_WEIGHT_DTYPE_SPEC,
    GROUP_SIZE_SPEC,
    QUANT_SCHEME_META,
    QUANTIZE_SPEC,
)
from edgeshare.exir.compile_spec import CompileSpec
from edgeshare.exir.data_policy import DATA_KEY_META, DATA_OPEN_META, EXTERNAL_TAG_META
from edgeshare.exir.errors import LoweringError
from edgeshare.exir.export_options import AdapterOptions, QuantizationOptions
from edgeshare.exir.fc_formats import F32, FcFormat, format_for_option
from edgeshare.exir.graph import lifted_inputs, lifted_tensor
from edgeshare.exir.lower import BackendDetails, PreprocessResult
from edgeshare.exir.named_data_store import NamedDataStore
from edgeshare.exir.quantize import IMPORTANCE_META, quantized
from edgeshare.exir.tensor_layout import TensorLayout, scalar_type_of, tensor_bytes, tensor_digest, tensor_view
from torch.export import ExportedProgram

__all__ = ["XnnpackBackend", "GRAPH_FILE_IDENTIFIER", "WEIGHT_ALIGNMENT"]

GRAPH_FILE_IDENTIFIER = b"ESX1"
GRAPH_VERSION = 1
# A graph with symbolic dims: an older delegate, which would run it at the bounds, refuses it.
DYNAMIC_GRAPH_VERSION = 2
WEIGHT_ALIGNMENT = 64
FLOAT = F32.scalar_type

_OpKind = xfb.OpKind


class _GraphBuilder:
    """Builds one partition's graph; rows emit their nodes through it (op_rows.Emitter)."""

    def __init__(
        self,
        method: str,
        index: int,
        ep: ExportedProgram,
        store: NamedDataStore,
        options: QuantizationOptions = QuantizationOptions(),
        adapter_format: FcFormat = F32,
    ) -> None:
        self.what = f"method '{method}', partition {index}"
        self.ep = ep
        self.store = store
        # The unquantized row other than f32 the fully connected weights and biases are stored in
        # (fc_weight_dtype=fp16: f16w), or None.
        self.fc_unquantized = None if options.fc_format is F32 else options.fc_format
        self.requested = options.quantized_format
        self.quantize = self.requested is not None
        self.group_size = options.group
        # The format of adapter weights (not pinned foundation data) read as a fully connected
        # weight, when it is not float32.
        self.adapter_format = None if adapter_format is F32 else adapter_format
        # quantize: the quantized constant of a foundation weight read as a fully connected weight.
        self.q_ids: Dict[torch.fx.Node, int] = {}
        self.values: List["xfb.ValueT"] = []
        self.nodes: List["xfb.NodeT"] = []
        self.ids: Dict[torch.fx.Node, int] = {}
        # fc_unquantized or an unquantized adapter row: the constant (HALF for f16w) of a weight
        # read as a fully connected weight or bias.
        self.unquantized_ids: Dict[torch.fx.Node, int] = {}
        self.num_inputs = 0
        self.num_outputs = 0
        self._row: Optional[op_rows.OpRow] = None  # the row emitting now
        # Symbols in order of first use: symbol -> its number in dim_symbols (1 for the first).
        self.symbols: Dict[op_rows.SymDim, int] = {}

    def _dims(self, dims: Sequence[Any], what: str) -> Tuple[List[int], Optional[List[int]]]:
        """(sizes, dim_symbols) of a shape whose dims are ints or SymInts; dim_symbols is None
        when every dim is exact."""
        sizes: List[int] = []
        symbols: List[int] = []
        for d in dims:
            if isinstance(d, int):
                sizes.append(int(d))
                symbols.append(0)
                continue
            sym = op_rows.sym_dim(d)
            if sym is None:
                raise LoweringError(
                    f"{self.what}: {what} has dim {d}; XNNPACK takes exact sizes and plain bounded symbols"
                )
            sizes.append(sym.bound)
            symbols.append(self.symbols.setdefault(sym, len(self.symbols) + 1))
        return sizes, (symbols if any(symbols) else None)

    def _value(self, kind: int, dims, io_index: int = 0, what: str = "a value") -> int:
        sizes, symbols = self._dims(dims, what)
        return self._raw_value(kind, sizes, symbols, io_index)

    def _raw_value(self, kind: int, sizes: List[int], symbols: Optional[List[int]], io_index: int = 0) -> int:
        v = xfb.ValueT()
        v.kind = kind
        v.dtype = FLOAT
        v.dims = sizes
        v.dimSymbols = symbols
        v.ioIndex = io_index
        self.values.append(v)
        return len(self.values) - 1

    def _scalar(self, x: float) -> int:
        # Rank 0, as torch sees a number: [1] would turn a rank-0 operand's result into [1].
        index = self._value(xfb.ValueKind.CONSTANT, [])
        self.values[index].inlineData = list(struct.pack("<f", float(x)))
        return index

    def _check_pinned(self, node: torch.fx.Node, fqn: str) -> None:
        if node.meta.get(DATA_OPEN_META, False):
            raise LoweringError(
                f"{self.what}: weight '{fqn}' is open (rebindable) data; a delegate would pack it "
                "(XnnpackPartitioner leaves the nodes reading it to kernels)"
            )

    def _weight(self, node: torch.fx.Node, fqn: str) -> int:
        self._check_pinned(node, fqn)
        tensor = lifted_tensor(self.ep, fqn)
        if tensor.dtype != torch.float32:
            raise LoweringError(f"{self.what}: weight '{fqn}' is {tensor.dtype}, XNNPACK takes float32")
        digest = tensor_digest(tensor)
        key = node.meta.get(DATA_KEY_META, fqn)
        tag = node.meta.get(EXTERNAL_TAG_META)
        layout = TensorLayout.of(tensor, key)
        self.store.add_named_data(key, tensor_view(tensor), WEIGHT_ALIGNMENT, tag, layout, digest)
        index = self._value(xfb.ValueKind.CONSTANT, tensor.shape)
        self.values[index].key = key
        self.values[index].digest = list(digest)
        return index

    def _unquantized_weight(self, node: torch.fx.Node, fqn: str, fmt: FcFormat) -> int:
        """The constant of a weight read as a fully connected weight or bias, in the dtype and
        under the key suffix of fmt, an unquantized row (f16w)."""
        self._check_pinned(node, fqn)
        tensor = lifted_tensor(self.ep, fqn)
        if tensor.dtype != torch.float32:
            raise LoweringError(f"{self.what}: weight '{fqn}' is {tensor.dtype}, XNNPACK takes float32")
        stored = tensor.detach().to(fmt.dtype)
        if bool((torch.isinf(stored) & torch.isfinite(tensor)).any()):
            raise LoweringError(
                f"{self.what}: weight '{fqn}' has values beyond {fmt.option}'s range "
                f"(|w| > {torch.finfo(fmt.dtype).max:g}); "
                "export it with fc_weight_dtype='fp32'"
            )
        data = tensor_bytes(stored)
        key = node.meta.get(DATA_KEY_META, fqn) + fmt.key_suffix
        tag = node.meta.get(EXTERNAL_TAG_META)
        self.store.add_named_data(key, data, WEIGHT_ALIGNMENT, tag, TensorLayout.of(stored, key))
        index = self._value(xfb.ValueKind.CONSTANT, tensor.shape)
        self.values[index].dtype = fmt.scalar_type
        self.values[index].key = key
        self.values[index].digest = list(hashlib.sha256(data).digest())
        return index

    def _quantized_weight(self, node: torch.fx.Node, fqn: str, fmt: Optional[FcFormat] = None) -> int:
        """The QC4W or QC8W constant of a weight read as a fully connected weight: a foundation
        weight in the format the partitioner recorded, or an adapter weight in fmt."""
        tensor = lifted_tensor(self.ep, fqn)
        if tensor.dtype != torch.float32:
            raise LoweringError(f"{self.what}: weight '{fqn}' is {tensor.dtype}, XNNPACK takes float32")
        importance = node.meta.get(IMPORTANCE_META) if fmt is None else None
        fmt = fmt if fmt is not None else self._stored_format(node, tensor)
        if not fmt.weighs_importance:
            importance = None
        try:
            q, scales = quantized(tensor, fmt.option, self.group_size, importance=importance)
        except ValueError as e:
            raise LoweringError(f"{self.what}: weight '{fqn}': {e}") from None
        base = node.meta.get(DATA_KEY_META, fqn)
        tag = node.meta.get(EXTERNAL_TAG_META)
        entries = []
        for key, t in ((base + fmt.key_suffix, q), (base + fmt.scales_suffix, scales)):
            digest = tensor_digest(t)
            self.store.add_named_data(key, tensor_view(t), WEIGHT_ALIGNMENT, tag, TensorLayout.of(t, key), digest)
            entries.append((key, digest))
        index = self._value(xfb.ValueKind.CONSTANT, tensor.shape)
        value = self.values[index]
        value.dtype = fmt.scalar_type
        value.quantScheme = getattr(xfb.QuantScheme, fmt.quant_scheme)
        value.groupSize = fmt.group(self.group_size)
        value.key, value.digest = entries[0][0], list(entries[0][1])
        value.scalesKey, value.scalesDigest = entries[1][0], list(entries[1][1])
        return index

    def _stored_format(self, node: torch.fx.Node, tensor: torch.Tensor) -> FcFormat:
        """The format the partitioner recorded for a foundation weight (the requested one when it
        recorded none: a partition preprocessed on its own), or the one that format's row falls
        back to for a weight it cannot hold."""
        fmt = format_for_option(node.meta.get(QUANT_SCHEME_META, self.requested.option))
        return fmt.holding(int(tensor.shape[1]), self.group_size) if tensor.dim() == 2 else fmt

    @staticmethod
    def _quantizable(node: torch.fx.Node) -> bool:
        """Pinned external data (the foundation): what quantize=int8 stores as int8."""
        return node.meta.get(EXTERNAL_TAG_META) is not None and not node.meta.get(DATA_OPEN_META, False)

    @staticmethod
    def _fc_param_uses(node: torch.fx.Node, weight_only: bool = False) -> Tuple[bool, bool]:
        """(read as a fully connected weight or bias, read any other way) of a placeholder; with
        weight_only, a read as a bias counts as another way."""
        as_param, other = False, False
        for user in node.users:
            row = op_rows.row_for(user.target) if user.op == "call_function" else None
            if row is None or row.half_weights is None:
                other = True
                continue
            params = row.half_weights(user)[: 1 if weight_only else None]
            if any(h is node for h in params):
                as_param = True
            # Also read in another argument position (e.g. as a linear's input)?
            reads = sum(a is node for a in list(user.args) + list(user.kwargs.values()))
            if reads > sum(h is node for h in params):
                other = True
        return as_param, other

    def _adapter_weight(self, node: torch.fx.Node, fqn: str, fmt: FcFormat) -> None:
        """An adapter's weight in its format's row: quantized rows store a fully connected weight
        (its bias stays float32), the half row its weight and bias; any other read keeps float32."""
        as_param, other = self._fc_param_uses(node, weight_only=fmt.quantized)
        if other or not as_param:
            self.ids[node] = self._weight(node, fqn)
        if as_param and fmt.quantized:
            self._check_pinned(node, fqn)
            self.q_ids[node] = self._quantized_weight(node, fqn, fmt)
        elif as_param:
            self.unquantized_ids[node] = self._unquantized_weight(node, fqn, fmt)

    # op_rows.Emitter -------------------------------------------------------------------------
    def tensor(self, x: torch.fx.Node) -> int:
        return self.ids[x]

    def operand(self, x: Any) -> int:
        if isinstance(x, torch.fx.Node):
            return self.ids[x]
        return self._scalar(x)

    def fc_param(self, x: torch.fx.Node) -> int:
        if x in self.q_ids:
            return self.q_ids[x]
        return (self.unquantized_ids if x in self.unquantized_ids else self.ids)[x]

    def node(
        self,
        kind: str,
        inputs: Sequence[int],
        out: torch.fx.Node,
        output_min: float = -math.inf,
        output_max: float = math.inf,
        alpha: float = 0.0,
    ) -> None:
        if self._row is None or kind not in self._row.kinds:
            row = self._row.name if self._row is not None else None
            raise LoweringError(f"{self.what}: op row '{row}' emits {kind}, which it does not list in its kinds")
        y = self._value(xfb.ValueKind.INTERMEDIATE, out.meta["val"].shape, what=f"node '{out.name}'")
        n = xfb.NodeT()
        n.op = getattr(_OpKind, kind)
        n.inputs = list(inputs)
        n.outputs = [y]
        n.outputMin = float(output_min)
        n.outputMax = float(output_max)
        n.alpha = float(alpha)
        self.nodes.append(n)
        self.ids[out] = y

    def build(self) -> bytes:
        lifted = {name: spec.fqn for name, spec in lifted_inputs(self.ep).items()}
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                if node.name in lifted and self.adapter_format is not None and not self._quantizable(node):
                    self._adapter_weight(node, lifted[node.name], self.adapter_format)
                elif node.name in lifted and self.fc_unquantized is not None:
                    as_param, other = self._fc_param_uses(node)
                    if other or not as_param:
                        self.ids[node] = self._weight(node, lifted[node.name])
                    if as_param:
                        self.unquantized_ids[node] = self._unquantized_weight(
                            node, lifted[node.name], self.fc_unquantized
                        )
                elif node.name in lifted and self.quantize and self._quantizable(node):
                    self._check_pinned(node, lifted[node.name])
                    as_weight, other = self._fc_param_uses(node, weight_only=True)
                    if other or not as_weight:
                        self.ids[node] = self._weight(node, lifted[node.name])
                    if as_weight:
                        self.q_ids[node] = self._quantized_weight(node, lifted[node.name])
                elif node.name in lifted:
                    self.ids[node] = self._weight(node, lifted[node.name])
                else:
                    self.ids[node] = self._value(
                        xfb.ValueKind.INPUT, node.meta["val"].shape, self.num_inputs, f"input '{node.name}'"
                    )
                    # An open weight stored in an adapter row is read in its own dtype.
                    dtype = node.meta["val"].dtype
                    if dtype != torch.float32:
                        self.values[self.ids[node]].dtype = scalar_type_of(dtype, f"{self.what}: input '{node.name}'")
                    self.num_inputs += 1
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                for k, out in enumerate(node.args[0]):
                    self._output(out, k)
        return self._finish()

    def _finish(self) -> bytes:
        graph = xfb.GraphT()
        graph.version = GRAPH_VERSION
        if self.symbols:
            graph.version = DYNAMIC_GRAPH_VERSION
            graph.symbols = [self._symbol(s) for s in self.symbols]
        graph.values = self.values
        graph.nodes = self.nodes
        graph.numInputs = self.num_inputs
        graph.numOutputs = self.num_outputs
        builder = flatbuffers.Builder(1024)
        builder.Finish(graph.Pack(builder), file_identifier=GRAPH_FILE_IDENTIFIER)
        return bytes(builder.Output())

    @staticmethod
    def _symbol(sym: op_rows.SymDim) -> "xfb.SymbolT":
        s = xfb.SymbolT()
        s.name = sym.name
        s.max = sym.bound
        return s

    def _output(self, out: torch.fx.Node, k: int) -> None:
        index = self.ids[out]
        value = self.values[index]
        if value.kind == xfb.ValueKind.INTERMEDIATE:
            value.kind = xfb.ValueKind.OUTPUT
            value.ioIndex = k
        else:
            y = self._raw_value(xfb.ValueKind.OUTPUT, list(value.dims), value.dimSymbols, k)
            n = xfb.NodeT()
            n.op = _OpKind.COPY
            n.inputs = [index]
            n.outputs = [y]
            self.nodes.append(n)
        self.num_outputs += 1

    def _call(self, node: torch.fx.Node) -> None:
        row = op_rows.row_for(node.target)
        if row is None:
            raise LoweringError(f"{self.what}: node '{node.name}' ({node.target}) is not supported by XNNPACK")
        self._row = row
        try:
            row.emit(self, node)
        finally:
            self._row = None


class XnnpackBackend(BackendDetails):
    """Builds XNNPACK graphs; weights go to named data under their policy key and tag."""

    @classmethod
    def preprocess(cls, edge_program: ExportedProgram, compile_specs: List[CompileSpec]) -> PreprocessResult:
        """Builds the graph of one partition.

        Args:
          edge_program: the partition.
          compile_specs: the partitioner's QuantizationOptions (fc_weight_dtype: b"fp32" or
            b"fp16"; quantize: b"none", b"int8" or b"int4"; group_size: b"32", b"64" or b"128").

        Returns:
          The graph blob and its weights as named data.

        Raises:
          LoweringError: an unknown compile spec or value.
        """
        return cls._preprocess("forward", 0, edge_program, None, compile_specs)

    @staticmethod
    def _options(what: str, compile_specs: List[CompileSpec]) -> Tuple[QuantizationOptions, FcFormat]:
        """The partitioner's QuantizationOptions and adapter format, from its compile specs."""
        values: Dict[str, Any] = {}
        fields = {FC_WEIGHT_DTYPE_SPEC: "fc_weight_dtype", QUANTIZE_SPEC: "quantize", GROUP_SIZE_SPEC: "group_size"}
        adapter_dtype = F32.option
        for spec in compile_specs or []:
            if spec.key not in fields and spec.key != ADAPTER_DTYPE_SPEC:
                raise LoweringError(f"XnnpackBackend: {what}: unknown compile spec '{spec.key}'")
            value: Any = bytes(spec.value).decode("utf-8", "replace")
            if spec.key == ADAPTER_DTYPE_SPEC:
                adapter_dtype = value
                continue
            if spec.key == GROUP_SIZE_SPEC:
                value = int(value) if value.isdigit() else value
            values[fields[spec.key]] = value
        try:
            return QuantizationOptions(**values), AdapterOptions(adapter_dtype=adapter_dtype).adapter_format
        except ValueError as e:
            raise LoweringError(f"XnnpackBackend: {what}: compile specs: {e}") from None

    @classmethod
    def _preprocess(
        cls,
        method: str,
        index: int,
        ep: ExportedProgram,
        shared: Optional[NamedDataStore],
        compile_specs: Optional[List[CompileSpec]] = None,
    ) -> PreprocessResult:
        store = NamedDataStore()
        options, adapter_format = cls._options(f"method '{method}', partition {index}", compile_specs or [])
        blob = _GraphBuilder(method, index, ep, store, options, adapter_format).build()
        output = store.get_named_data_store_output()
        if shared is not None:
            shared.merge(output)
        return PreprocessResult(blob, None, output)

    @classmethod
    def preprocess_multimethod(
        cls,
        edge_programs: Dict[str, List[ExportedProgram]],
        compile_specs: Dict[str, List[List[CompileSpec]]],
    ) -> Dict[str, List[PreprocessResult]]:
        """Builds every partition's graph, checking weight keys across methods as it goes.

        A weight two methods share (same key, same bytes) is stored once once the outputs are
        merged; the same key with different bytes fails here, naming the key.

        Args:
          edge_programs: method name -> partitions.
          compile_specs: method name -> compile specs per partition.

        Returns:
          method name -> one PreprocessResult per partition.

        Raises:
          LoweringError: partition and compile-spec counts differ for a method.
          NamedDataError: a key holds different bytes in two partitions.
        """
        shared = NamedDataStore()
        results: Dict[str, List[PreprocessResult]] = {}
        for method, programs in edge_programs.items():
            specs = compile_specs.get(method, [])
            if len(specs) != len(programs):
                raise LoweringError(
                    f"XnnpackBackend: method '{method}' has {len(programs)} partitions but "
                    f"{len(specs)} compile spec lists"
                )
            results[method] = [
                cls._preprocess(method, i, p, shared, s) for i, (p, s) in enumerate(zip(programs, specs))
            ]
        return results
