"""XnnpackBackend: turns a partition into an XNNPACK graph flatbuffer ("ESX1").

Weights are not embedded: each becomes a CONSTANT value carrying its named-data key and SHA-256
digest, and its bytes go into the partition's NamedDataStore output under the key and external tag
the data policy recorded on its placeholder (so foundation weights land in foundation.ptd). Scalar
operands of elementwise ops are inline constants.

With the compile spec fc_weight_dtype=fp16 (XnnpackPartitioner(fc_weight_dtype="fp16")), the weight
and bias of every FULLY_CONNECTED node are HALF constants under "<key>.fp16" (same external tag),
digested over their half bytes. "<key>.fp16" cannot be another weight's key: "<key>" is a tensor,
so no module is called "<key>" and no parameter "<key>.fp16" exists. A weight read by any other
node keeps an fp32 constant under "<key>" for those reads.
"""

import hashlib
import math
import struct
from typing import Dict, List, Optional

import flatbuffers
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.backends.xnnpack.partitioner import (
    BINARY_OPS,
    FC_WEIGHT_DTYPE_SPEC,
    FC_WEIGHT_DTYPES,
    RESHAPE_OPS,
)
from edgeshare.exir.compile_spec import CompileSpec
from edgeshare.exir.data_policy import DATA_KEY_META, EXTERNAL_TAG_META
from edgeshare.exir.errors import LoweringError
from edgeshare.exir.lower import BackendDetails, PreprocessResult
from edgeshare.exir.named_data_store import NamedDataStore
from edgeshare.exir.tensor_layout import TensorLayout, tensor_bytes

__all__ = ["XnnpackBackend", "GRAPH_FILE_IDENTIFIER", "WEIGHT_ALIGNMENT"]

GRAPH_FILE_IDENTIFIER = b"ESX1"
GRAPH_VERSION = 1
WEIGHT_ALIGNMENT = 64
FLOAT = 6
HALF = 5
FP16_KEY_SUFFIX = ".fp16"

aten = torch.ops.aten
_OpKind = xfb.OpKind

_BINARY = {
    aten.add.Tensor: _OpKind.ADD,
    aten.add.Scalar: _OpKind.ADD,
    aten.sub.Tensor: _OpKind.SUBTRACT,
    aten.sub.Scalar: _OpKind.SUBTRACT,
    aten.mul.Tensor: _OpKind.MULTIPLY,
    aten.mul.Scalar: _OpKind.MULTIPLY,
    aten.div.Tensor: _OpKind.DIVIDE,
    aten.div.Scalar: _OpKind.DIVIDE,
    aten.maximum.default: _OpKind.MAXIMUM,
    aten.minimum.default: _OpKind.MINIMUM,
}
assert set(_BINARY) == BINARY_OPS

_UNARY = {
    aten.sigmoid.default: _OpKind.SIGMOID,
    aten.silu.default: _OpKind.SILU,
    aten.hardswish.default: _OpKind.HARDSWISH,
    aten.abs.default: _OpKind.ABS,
    aten.neg.default: _OpKind.NEGATE,
    aten.sqrt.default: _OpKind.SQRT,
    aten._softmax.default: _OpKind.SOFTMAX,
}


def _arg(node: torch.fx.Node, index: int, name: str, default):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


class _GraphBuilder:
    def __init__(
        self, method: str, index: int, ep: ExportedProgram, store: NamedDataStore, fc_fp16: bool = False
    ) -> None:
        self.what = f"method '{method}', partition {index}"
        self.ep = ep
        self.store = store
        self.fc_fp16 = fc_fp16
        self.values: List["xfb.ValueT"] = []
        self.nodes: List["xfb.NodeT"] = []
        self.ids: Dict[torch.fx.Node, int] = {}
        # fc_fp16: the HALF constant of a weight read as a fully connected weight or bias.
        self.half_ids: Dict[torch.fx.Node, int] = {}
        self.num_inputs = 0
        self.num_outputs = 0

    def _value(self, kind: int, dims, io_index: int = 0) -> int:
        v = xfb.ValueT()
        v.kind = kind
        v.dtype = FLOAT
        v.dims = [int(d) for d in dims]
        v.ioIndex = io_index
        self.values.append(v)
        return len(self.values) - 1

    def _scalar(self, x: float) -> int:
        # Rank 0, as torch sees a number: [1] would turn a rank-0 operand's result into [1].
        index = self._value(xfb.ValueKind.CONSTANT, [])
        self.values[index].inlineData = list(struct.pack("<f", float(x)))
        return index

    def _weight(self, node: torch.fx.Node, fqn: str) -> int:
        tensor = self.ep.state_dict[fqn] if fqn in self.ep.state_dict else self.ep.constants[fqn]
        if tensor.dtype != torch.float32:
            raise LoweringError(f"{self.what}: weight '{fqn}' is {tensor.dtype}, XNNPACK takes float32")
        data = tensor_bytes(tensor)
        key = node.meta.get(DATA_KEY_META, fqn)
        tag = node.meta.get(EXTERNAL_TAG_META)
        self.store.add_named_data(key, data, WEIGHT_ALIGNMENT, tag, TensorLayout.of(tensor, key))
        index = self._value(xfb.ValueKind.CONSTANT, tensor.shape)
        self.values[index].key = key
        self.values[index].digest = list(hashlib.sha256(data).digest())
        return index

    def _half_weight(self, node: torch.fx.Node, fqn: str) -> int:
        tensor = self.ep.state_dict[fqn] if fqn in self.ep.state_dict else self.ep.constants[fqn]
        if tensor.dtype != torch.float32:
            raise LoweringError(f"{self.what}: weight '{fqn}' is {tensor.dtype}, XNNPACK takes float32")
        half = tensor.detach().to(torch.float16)
        if bool((torch.isinf(half) & torch.isfinite(tensor)).any()):
            raise LoweringError(
                f"{self.what}: weight '{fqn}' has values beyond fp16's range (|w| > 65504); "
                "export it with fc_weight_dtype='fp32'"
            )
        data = tensor_bytes(half)
        key = node.meta.get(DATA_KEY_META, fqn) + FP16_KEY_SUFFIX
        tag = node.meta.get(EXTERNAL_TAG_META)
        self.store.add_named_data(key, data, WEIGHT_ALIGNMENT, tag, TensorLayout.of(half, key))
        index = self._value(xfb.ValueKind.CONSTANT, tensor.shape)
        self.values[index].dtype = HALF
        self.values[index].key = key
        self.values[index].digest = list(hashlib.sha256(data).digest())
        return index

    @staticmethod
    def _fc_param_uses(node: torch.fx.Node):
        """(read as a fully connected weight or bias, read any other way) of a placeholder."""
        as_param, other = False, False
        for user in node.users:
            if user.op == "call_function" and user.target is aten.linear.default:
                bias = _arg(user, 2, "bias", None)
                if user.args[1] is node or bias is node:
                    as_param = True
                if user.args[0] is node:
                    other = True
            else:
                other = True
        return as_param, other

    def _input(self, x) -> int:
        if isinstance(x, torch.fx.Node):
            return self.ids[x]
        return self._scalar(x)

    def _node(self, op: int, inputs: List[int], out: torch.fx.Node, lo: float = -math.inf,
              hi: float = math.inf, alpha: float = 0.0) -> None:
        y = self._value(xfb.ValueKind.INTERMEDIATE, out.meta["val"].shape)
        n = xfb.NodeT()
        n.op = op
        n.inputs = inputs
        n.outputs = [y]
        n.outputMin = float(lo)
        n.outputMax = float(hi)
        n.alpha = float(alpha)
        self.nodes.append(n)
        self.ids[out] = y

    def build(self) -> bytes:
        lifted = {}
        for spec in self.ep.graph_signature.input_specs:
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                lifted[spec.arg.name] = spec.target
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                if node.name in lifted and self.fc_fp16:
                    as_param, other = self._fc_param_uses(node)
                    if other or not as_param:
                        self.ids[node] = self._weight(node, lifted[node.name])
                    if as_param:
                        self.half_ids[node] = self._half_weight(node, lifted[node.name])
                elif node.name in lifted:
                    self.ids[node] = self._weight(node, lifted[node.name])
                else:
                    self.ids[node] = self._value(xfb.ValueKind.INPUT, node.meta["val"].shape, self.num_inputs)
                    self.num_inputs += 1
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                for k, out in enumerate(node.args[0]):
                    self._output(out, k)
        graph = xfb.GraphT()
        graph.version = GRAPH_VERSION
        graph.values = self.values
        graph.nodes = self.nodes
        graph.numInputs = self.num_inputs
        graph.numOutputs = self.num_outputs
        builder = flatbuffers.Builder(1024)
        builder.Finish(graph.Pack(builder), file_identifier=GRAPH_FILE_IDENTIFIER)
        return bytes(builder.Output())

    def _output(self, out: torch.fx.Node, k: int) -> None:
        index = self.ids[out]
        value = self.values[index]
        if value.kind == xfb.ValueKind.INTERMEDIATE:
            value.kind = xfb.ValueKind.OUTPUT
            value.ioIndex = k
        else:
            y = self._value(xfb.ValueKind.OUTPUT, value.dims, k)
            n = xfb.NodeT()
            n.op = _OpKind.COPY
            n.inputs = [index]
            n.outputs = [y]
            self.nodes.append(n)
        self.num_outputs += 1

    def _call(self, node: torch.fx.Node) -> None:
        t = node.target
        args = node.args
        if t is aten.linear.default:
            params = self.half_ids if self.fc_fp16 else self.ids
            inputs = [self.ids[args[0]], params[args[1]]]
            bias = _arg(node, 2, "bias", None)
            if bias is not None:
                inputs.append(params[bias])
            self._node(_OpKind.FULLY_CONNECTED, inputs, node)
        elif t in _BINARY:
            self._node(_BINARY[t], [self._input(args[0]), self._input(args[1])], node)
        elif t in _UNARY:
            self._node(_UNARY[t], [self.ids[args[0]]], node)
        elif t is aten.pow.Tensor_Scalar:
            if args[1] != 2:
                raise LoweringError(f"{self.what}: node '{node.name}' raises to {args[1]}; XNNPACK squares only")
            self._node(_OpKind.SQUARE, [self.ids[args[0]]], node)
        elif t in RESHAPE_OPS:
            self._node(_OpKind.COPY, [self.ids[args[0]]], node)
        elif t is aten.relu.default:
            self._node(_OpKind.CLAMP, [self.ids[args[0]]], node, 0.0, math.inf)
        elif t is aten.hardtanh.default:
            lo, hi = _arg(node, 1, "min_val", -1.0), _arg(node, 2, "max_val", 1.0)
            self._node(_OpKind.CLAMP, [self.ids[args[0]]], node, lo, hi)
        elif t is aten.clamp.default:
            lo, hi = _arg(node, 1, "min", None), _arg(node, 2, "max", None)
            self._node(
                _OpKind.CLAMP, [self.ids[args[0]]], node,
                -math.inf if lo is None else lo, math.inf if hi is None else hi,
            )
        elif t is aten.leaky_relu.default:
            self._node(_OpKind.LEAKY_RELU, [self.ids[args[0]]], node, alpha=_arg(node, 1, "negative_slope", 0.01))
        elif t is aten.elu.default:
            self._node(_OpKind.ELU, [self.ids[args[0]]], node, alpha=_arg(node, 1, "alpha", 1.0))
        else:
            raise LoweringError(f"{self.what}: node '{node.name}' ({t}) is not supported by XNNPACK")


class XnnpackBackend(BackendDetails):
    """Builds XNNPACK graphs; weights go to named data under their policy key and tag."""

    @classmethod
    def preprocess(cls, edge_program: ExportedProgram, compile_specs: List[CompileSpec]) -> PreprocessResult:
        """Builds the graph of one partition.

        Args:
          edge_program: the partition.
          compile_specs: the partitioner's options (fc_weight_dtype: b"fp32" or b"fp16").

        Returns:
          The graph blob and its weights as named data.

        Raises:
          LoweringError: an unknown compile spec or value.
        """
        return cls._preprocess("forward", 0, edge_program, None, compile_specs)

    @staticmethod
    def _fc_fp16(what: str, compile_specs: List[CompileSpec]) -> bool:
        dtype = "fp32"
        for spec in compile_specs or []:
            if spec.key != FC_WEIGHT_DTYPE_SPEC:
                raise LoweringError(f"XnnpackBackend: {what}: unknown compile spec '{spec.key}'")
            dtype = bytes(spec.value).decode("utf-8", "replace")
            if dtype not in FC_WEIGHT_DTYPES:
                raise LoweringError(
                    f"XnnpackBackend: {what}: compile spec {FC_WEIGHT_DTYPE_SPEC}={dtype!r} is not one of "
                    f"{FC_WEIGHT_DTYPES}"
                )
        return dtype == "fp16"

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
        fc_fp16 = cls._fc_fp16(f"method '{method}', partition {index}", compile_specs or [])
        blob = _GraphBuilder(method, index, ep, store, fc_fp16).build()
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
