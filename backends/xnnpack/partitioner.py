"""XnnpackPartitioner: tags the float32 nodes the XNNPACK delegate runs.

What it accepts is the op-row registry (backends/xnnpack/op_rows/, one module per op family): a
node is tagged when its output is a float32 tensor of rank <= 6 with no empty dimension, a row
handles its target and the row's check says yes.

Dynamic shapes (torch.export with dynamic_shapes, e.g. the token count T up to --max-seq-len): a
value may have dims that are plain symbols with a finite bound (s70 in [1, 128]); the delegate
plans memory for the bound and binds the symbols from its inputs' real sizes at every execute. A
node reading or computing a compound size (s0*4, s0 + 1), a symbol without an upper bound, a view
whose sizes are computed at run time (view(x, [1, sym_size(x, 1), 64])) or a softmax over a
symbolic dim stays a kernel call. The rows are listed at the end of this
docstring (generated from the registry).

The checks mirror what the C++ delegate (runtime/xnn_executor.cc) accepts at init: a node tagged
here must never make a program fail to load. One known difference from torch remains: XNNPACK's
clamp (relu, hardtanh, clamp), maximum and minimum do not propagate NaN inputs as torch does.

Open data (a DataPlacement with open=True: a swappable adapter's weights, which the runtime may
rebind to another adapter file) is never packed. A linear whose weight is open (and that has no
bias) is delegated as FULLY_CONNECTED_UNPACKED: the weight stays the program's external constant
and becomes an input of the delegate call, whose product reads the bytes bound at each execute as
stored (so a swap re-packs nothing and switches pointers only). Any other node reading open data
stays a kernel call.

fp16 fully connected weights (`XnnpackPartitioner(fc_weight_dtype="fp16")`): every delegated
linear's weight and bias are stored as IEEE half under "<key>.fp16" (half the bytes, in the same
file the data policy sends the fp32 weight to) and run by XNNPACK's f16 fully connected operator,
whose input is converted to half and whose output back to float32. The numbers change: see
FP16_TOLERANCE.

int8 foundation weights (`XnnpackPartitioner(quantize="int8")`): every delegated linear whose weight
is pinned foundation data (placed in a .ptd, not open) is stored as int8 per output row with float32
scales (exir/quantize.py, scheme qc8w) under "<key>.qc8w" and "<key>.qc8w.scales", and run by the
delegate's dynamically quantized fully connected kernels. A token embedding over pinned foundation
data becomes the same int8 entries, gathered outside the delegate (exir/embedding_qc8w.py): a tied
embedding and lm_head hold one int8 entry. Adapter weights stay float32 unless adapter_dtype says otherwise (below).

int4 foundation weights (`XnnpackPartitioner(quantize="int4", group_size=32)`): as int8, but each
such linear's weight is signed 4-bit in groups of group_size along the input dim with float16
scales (scheme qc4w) under "<key>.qc4w" and "<key>.qc4w.scales", except int8 (qc8w) for the
output layer (exir/fc_formats.py's OUTPUT_LAYER_NAMES; lm_head="int4" makes it int4 too), for a
weight tied to the token embedding (one int8 entry serves both) and for a weight whose input size
is not a multiple of the group size. An untied token embedding is int4 too, under the same
"<key>.qc4w" entries, gathered outside the delegate one row at a time by edgeshare::embedding_qc4w
(exir/embedding_qc4w.py); it stays int8 per row when tied (the int8 entry serves both) or when
its width is not a multiple of the group size. `quantize="int4k"` is int4 with every v_proj and
down_proj linear in int8 blocks of 32 (qb8w; exir/fc_formats.py's INT4K mix), which are not
fallbacks. `quantize="int5"` is as int4 with signed 5-bit blocks of 32 and float16 scales (qb5w)
under "<key>.qb5w" and "<key>.qb5w.scales" (an untied table gathered by edgeshare::embedding_qb5w),
and `quantize="int5k"` int5 with int4k's projections in qb8w (INT5K). These choices are
exir/fc_formats.py's (`foundation_format`; each format's key suffixes, quantizer and fallback are
its row's). The partitioner records the format of each foundation weight on its placeholder (QUANT_SCHEME_META)
and returns the int8 ones with their reason (PartitionResult.fallbacks) and the format of each
gathered table (PartitionResult.gathered_formats).

fp16 or int8 adapters (`XnnpackPartitioner(adapter_dtype="fp16" | "int8")`, --adapter-dtype): every
delegated linear over a weight the program keeps (a per-adapter program's LoRA A and B) stores it
in that option's row of exir/fc_formats.py (f16w: half weight and bias; qc8w: int8 per output row
with float32 scales, run by the packed int8 kernels, whose activations are quantized in blocks of 32 too)
in the program's own data; the foundation's weights and foundation.ptd are as without the option.
A swappable program's open weights are stored in that row in each adapter's .ptd (int8's scales
as their own open entry) and read as stored by FULLY_CONNECTED_UNPACKED (activations float32).

Supported ops (one line per row of the registry):
"""

import copy
import operator
from typing import Callable, Dict, Mapping, Optional

import torch
from edgeshare.backends.xnnpack import op_rows
from edgeshare.exir.compile_spec import CompileSpec
from edgeshare.exir.data_policy import DATA_KEY_META, DATA_OPEN_META, EXTERNAL_TAG_META
from edgeshare.exir.embedding_qc8w import quantize_embeddings
from edgeshare.exir.export_options import AdapterOptions, OptionError, QuantizationOptions
from edgeshare.exir.fc_formats import F32, FcFormat, foundation_format, quantized_formats
from edgeshare.exir.graph import is_lifted, lifted_inputs, lifted_tensor
from edgeshare.exir.partition import (
    DelegationSpec,
    Partitioner,
    PartitionResult,
    tag_supported_nodes,
)
from edgeshare.exir.quantize import IMPORTANCE_META, QUANT_SCHEME_META
from edgeshare.exir.stored_linear import store_open_linears
from torch.export import ExportedProgram

__all__ = ["FP16_TOLERANCE", "QUANT_SCHEME_META", "QuantizationOptions", "XnnpackPartitioner", "is_lifted_weight"]

BACKEND_ID = "XnnpackBackend"
MAX_RANK = op_rows.MAX_RANK

# The compile specs that carry QuantizationOptions to preprocess, each absent at its default: the
# unquantized format's option, the quantized format's option, a grouped format's group size.
FC_WEIGHT_DTYPE_SPEC = "fc_weight_dtype"
QUANTIZE_SPEC = "quantize"
GROUP_SIZE_SPEC = "group_size"
# The adapter format's --adapter-dtype value (its adapter_value; AdapterOptions.adapter_dtype), absent at "fp32".
ADAPTER_DTYPE_SPEC = "adapter_dtype"

# The documented error bound of fc_weight_dtype="fp16" against torch eager in float32:
#   |got - want| <= FP16_TOLERANCE * max(1, max|want|)   (elementwise; max over the output tensor)
# for models like the demo LoRA MLP (fully connected layers of up to 512 input channels, outputs of
# magnitude <= 1); exir/README.md has the demo's measured errors (backends/xnnpack/fp16_test.py
# prints them). The delegate rounds only the weights and biases to half: activations and sums stay
# float32 (its f32 x f16w kernels), so the error is the weights' rounding carried through the
# model: check a model of your own against eager before relying on it.
FP16_TOLERANCE = 1e-2

__doc__ += op_rows.summary() + "\n"

# The partitioner's public name for exir.graph.is_lifted.
is_lifted_weight = is_lifted


class _Checker:
    """node -> whether XNNPACK runs it: the generic output check, then the node's row."""

    def __init__(self, ep: ExportedProgram) -> None:
        self.ctx = op_rows.CheckContext(ep, lifted_inputs(ep))

    def __call__(self, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or node.target is operator.getitem:
            return False
        if not op_rows.float_tensor(node):
            return False
        row = op_rows.row_for(node.target)
        opens = [a for a in node.all_input_nodes if a.op == "placeholder" and a.meta.get(DATA_OPEN_META, False)]
        if opens and (row is None or not row.reads_open or not row.reads_open(node, opens)):
            return False  # Open data must stay rebindable: only a row that reads it unpacked takes it.
        return row is not None and row.check(self.ctx, node)


class XnnpackPartitioner(Partitioner):
    """Tags every node the XNNPACK delegate runs; partitions are "xnnpack_<i>".

    Args:
      is_supported_override: optional extra filter (node -> bool) applied after the built-in
        checks, e.g. to keep some layers out of the delegate.
      fc_weight_dtype: "fp32" (default; the program is exactly what it was without the option) or
        "fp16": every delegated linear's weight and bias are stored as IEEE half bytes under
        "<key>.fp16" (dtype HALF in the delegate graph, digest of the half bytes), placed like the
        fp32 weight would be (foundation weights still go to the foundation file, under their
        canonical name + ".fp16", so foundation.ptd holds half the bytes), and run by XNNPACK's f16
        fully connected operator between f32->f16 and f16->f32 converts. A weight also read
        elsewhere (an elementwise op in the delegate, or a kernel outside it) keeps its fp32 copy
        for that use. Documented error against torch eager: |got - want| <= FP16_TOLERANCE *
        max(1, max|want|) with FP16_TOLERANCE = 1e-2 (measured on the demo LoRA MLP: max abs error
        2.9e-3 with outputs up to 0.47; foundation.ptd 1,064,960 bytes instead of 2,113,536).
        Weights beyond half's range (|w| > 65504) are refused at export.
      quantize: "none" (default), "int8": every delegated linear over a pinned foundation weight
        gets that weight as int8 per output row with float32 scales (exir/quantize.py), or "int4":
        as int4 in groups with float16 scales (int8 for the output layer, a weight tied to the
        embedding, and an input size that is not a multiple of the group); adapter weights and
        biases stay float32.
      group_size: the int4 group along the input dim, one of its row's group sizes (None: the first).
      lm_head: "int8" (default) or "int4", the output layer's format under quantize="int4".
      options: the four above as one QuantizationOptions (then they are not given).
      importance: foundation weight key -> float32 [in], how much each input's error counts
        (exir/calibration.py's importance_from_text): the scale search of a format that weighs
        it (int4) uses it for those weights. None: every input counts alike.
      adapter_dtype: AdapterOptions.adapter_dtype, "fp32" (default), "fp16" or "int8": every
        delegated linear over a weight the program keeps (an adapter's: not pinned in a shared
        .ptd) gets that weight (and for fp16 its bias) in that format's row (f16w, qc8w) under
        the row's key suffixes in the program's own data. An open (swappable) weight read only
        as a linear's weight without bias is stored in the row in the adapter's data file (its
        scales a further open entry) and read as stored (exir/stored_linear.py).

    Raises:
      OptionError: (a ValueError) as QuantizationOptions or AdapterOptions, or options given
        with the others.
    """

    def __init__(
        self,
        is_supported_override: Optional[Callable[[torch.fx.Node], bool]] = None,
        fc_weight_dtype: str = F32.option,
        quantize: str = "none",
        group_size: Optional[int] = None,
        lm_head: Optional[str] = None,
        *,
        options: Optional[QuantizationOptions] = None,
        adapter_dtype: str = F32.option,
        importance: Optional[Mapping[str, torch.Tensor]] = None,
    ) -> None:
        given = QuantizationOptions(fc_weight_dtype, quantize, group_size, lm_head)
        if options is not None and given != QuantizationOptions():
            raise OptionError(
                "XnnpackPartitioner: pass options or fc_weight_dtype/quantize/group_size/lm_head, not both"
            )
        self._override = is_supported_override
        self.options = options if options is not None else given
        self.adapter_format = AdapterOptions(adapter_dtype=adapter_dtype).adapter_format
        self.importance: Mapping[str, torch.Tensor] = dict(importance or {})

    def weighing(self, importance: Mapping[str, torch.Tensor]) -> "XnnpackPartitioner":
        """This partitioner with an importance per foundation weight (see importance in __init__).

        Raises:
          OptionError: its format weighs no importance (--quantize int4 and int5 do, and their mixes).
        """
        fmt = self.options.quantized_format
        if fmt is None or not fmt.weighs_importance:
            weighing = [f.option for f in quantized_formats() if f.weighs_importance]
            raise OptionError(
                f"calibration (--calibration) applies to --quantize {' or '.join(weighing)}, "
                f"not {self.options.quantize}"
            )
        other = copy.copy(self)
        other.importance = dict(importance)
        return other

    def _foundation_formats(self, ep: ExportedProgram, requested: FcFormat) -> Dict[str, str]:
        """Records on each pinned foundation weight of rank 2 the format it is stored in; returns
        why for each one read by an op that is stored in the fallback."""
        fallbacks: Dict[str, str] = {}
        lifted = lifted_inputs(ep)
        for node in ep.graph.nodes:
            if node.op != "placeholder" or node.name not in lifted:
                continue
            if node.meta.get(EXTERNAL_TAG_META) is None or node.meta.get(DATA_OPEN_META, False):
                continue
            tensor = lifted_tensor(ep, lifted[node.name].fqn)
            if tensor.dim() != 2:
                continue
            key = node.meta.get(DATA_KEY_META, lifted[node.name].fqn)
            gathered = [u.op == "call_function" and u.target is torch.ops.aten.embedding.default for u in node.users]
            fmt, why = foundation_format(
                requested,
                key,
                int(tensor.shape[1]),
                self.options.group,
                self.options.output_layer_format,
                any(gathered),
                not all(gathered),
                self.options.mix,
            )
            node.meta[QUANT_SCHEME_META] = fmt.option
            if fmt.weighs_importance and key in self.importance:
                node.meta[IMPORTANCE_META] = self.importance[key]
            # A weight a mix stores in its other row on purpose (why == "") is no fallback.
            if fmt is not requested and why and any(u.op == "call_function" for u in node.users):
                fallbacks[key] = why
        return fallbacks

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        """Tags supported nodes of exported_program in place.

        Args:
          exported_program: an edge program.

        Returns:
          The program, DelegationSpec("XnnpackBackend") for each tag, the foundation weights stored
          in their format's fallback with the reason, and the format of each gathered table.
        """
        requested = self.options.quantized_format
        fallbacks: Dict[str, str] = {}
        gathered: Dict[str, str] = {}
        if requested is not None and requested.fallback is not None:
            fallbacks = self._foundation_formats(exported_program, requested)
        if requested is not None:
            # The token embedding's gather runs outside the delegate, over entries of the format
            # recorded on its table (int8 when nothing is).
            gathered = quantize_embeddings(exported_program, self.options.group)
        if self.adapter_format is not F32:
            # Open (swappable) adapter weights: stored in the adapter row, read as stored.
            store_open_linears(exported_program, self.adapter_format)
        checker = _Checker(exported_program)
        override = self._override

        def supported(node: torch.fx.Node) -> bool:
            return checker(node) and (override is None or bool(override(node)))

        tags = tag_supported_nodes(exported_program, supported, "xnnpack_")
        options = self.options
        compile_specs = []
        if options.fc_weight_dtype != F32.option:
            compile_specs.append(CompileSpec(FC_WEIGHT_DTYPE_SPEC, options.fc_weight_dtype.encode()))
        if requested is not None:
            compile_specs.append(CompileSpec(QUANTIZE_SPEC, requested.option.encode()))
            if len(requested.group_sizes) > 1:
                # A format of one group size (qb8w) takes no --group-size.
                compile_specs.append(CompileSpec(GROUP_SIZE_SPEC, str(options.group).encode()))
        if self.adapter_format is not F32:
            compile_specs.append(CompileSpec(ADAPTER_DTYPE_SPEC, self.adapter_format.adapter_value.encode()))
        specs: Dict[str, DelegationSpec] = {t: DelegationSpec(BACKEND_ID, list(compile_specs)) for t in tags}
        return PartitionResult(exported_program, specs, fallbacks, gathered)
