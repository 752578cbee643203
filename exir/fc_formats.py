"""The formats a fully connected layer's weight is stored in: one row per scheme.

    f32   float32, under the weight's own key (the default)
    f16w  IEEE half under "<key>.fp16"; activations and sums stay float32
    qc8w  int8 per output row under "<key>.qc8w", float32 scales [out] under "<key>.qc8w.scales"
          (--quantize int8-row; --adapter-dtype int8)
    qb8w  int8 in blocks of 32 inputs under "<key>.qb8w", float16 scales [out, in / 32] under
          "<key>.qb8w.scales" (--quantize int8); a layer of another input size is qc8w
    qc4w  signed 4-bit in groups along the input dim under "<key>.qc4w" (uint8 [out, in / 2]), float16
          scales [out, in / group] under "<key>.qc4w.scales"; the output layer, a table tied to it
          and a layer it cannot group are qc8w
    qb5w  signed 5-bit in blocks of 32 inputs under "<key>.qb5w" (uint8 [out, in * 5 / 8]), float16
          scales [out, in / 32] under "<key>.qb5w.scales" (--quantize int5); the output layer, a table
          tied to it and a layer of another input size are qc8w

A mix (FC_MIXES) is a --quantize value that stores no format of its own: it stores most weights in
one row and the projections it names in another, as llama.cpp's 4-bit mixes keep the sensitive
tensors at more bits (`--quantize int4k`: qc4w, with every v_proj and down_proj in qb8w; `--quantize
int5k`: qb5w likewise).

A row says everything the exporter needs about its scheme: the option value that asks for it
(`--fc-weight-dtype fp32|fp16`, `--quantize int8|int8-row|int4`, and the compile spec and placeholder meta
the XNNPACK partitioner writes), the stored element type (torch dtype and the files' ScalarType),
the delegate graph's QuantScheme, the key suffixes, the group sizes, its quantizer and its
fallback. The C++ delegate's rows (backends/xnnpack/runtime) name the same scheme ids, ScalarTypes
and QuantSchemes, so one test can compare the two lists. The partitioner, its preprocess,
exir/quantize.py, exir/embedding_qc8w.py and tools/export_lora read these rows; nothing else
decides from a dtype or a scheme name.

The rows that are not grouped also store adapters (`--adapter-dtype fp32|fp16|int8`: f32, f16w,
qc8w, each row's adapter_value): an adapter's linear weights, in the adapter's own data, under the
same suffixes.

    fmt = fc_format("qc4w")
    stored = fmt.holding(in_size=30, group_size=32)        # QC8W: 30 is no multiple of 32 (qb8w's either)
    q, scales = stored.quantize(weight, group_size=32)
"""

import dataclasses
from typing import Callable, Dict, Optional, Tuple

import torch
from edgeshare.exir._quantizers import (
    QB5W_BLOCK,
    QB8W_BLOCK,
    QC4W_GROUP_SIZES,
    quantize_qb5w,
    quantize_qb8w,
    quantize_qc4w,
    quantize_qc8w,
)
from edgeshare.exir.tensor_layout import scalar_type_of

__all__ = [
    "F16W",
    "F32",
    "FC_FORMATS",
    "FC_MIXES",
    "FcFormat",
    "FcMix",
    "INT4K",
    "INT5K",
    "OUTPUT_LAYER_NAMES",
    "QB5W",
    "QB8W",
    "QC4W",
    "QC8W",
    "UnknownFormatError",
    "adapter_formats",
    "fc_format",
    "format_for_adapter_dtype",
    "foundation_format",
    "format_for_option",
    "is_output_layer",
    "mix_for_option",
    "quantized_formats",
    "unquantized_formats",
]

Quantizer = Callable[[torch.Tensor, int, Optional[torch.Tensor]], Tuple[torch.Tensor, torch.Tensor]]


class UnknownFormatError(ValueError):
    """A scheme id or option value no row has."""


@dataclasses.dataclass(frozen=True)
class FcFormat:
    """One fully connected weight format.

    Attributes:
      scheme: the scheme id, as the C++ rows and the docs spell it ("f32", "f16w", "qc8w", "qc4w").
      option: the value that asks for it: of --fc-weight-dtype for an unquantized format ("fp32",
        "fp16"), of --quantize for a quantized one ("int8", "int4"); also the compile spec's value
        and the name an export's summary gives its bytes.
      dtype: the stored weight entry's element type (scalar_type: the files' number for it).
      quant_scheme: the delegate graph's QuantScheme for it (xnnpack_graph.fbs).
      key_suffix: appended to the float weight's key to name the stored entry ("" for f32).
      scales_suffix: appended to name the scales' entry (None: no scales).
      scales_dtype: the scales' element type (None: no scales).
      group_sizes: the groups along the input dim it takes (empty: not grouped).
      quantizer: float32 weight, group size, importance (None, or float32 [in]: how much each
        input's error counts) -> (stored values, scales); None when unquantized.
      weighs_importance: whether its quantizer uses an importance (calibration) at all.
      fallback: the scheme of the format a weight it cannot hold is stored in (None: it holds all).
      packed_bits: the bits a value takes where several share a stored byte (4 for int4: the entry
        is uint8 [out, in / 2]; 5 for int5: [out, in * 5 / 8]), None where each is an element.
      adapter_option: the --adapter-dtype value that asks for it, when not its option.
      output_layer_fallback: whether an output layer (and a table tied to one) takes the fallback
        unless --lm-head asks for this format (int4: llama.cpp's 4-bit mixes keep it at 8 bits);
        such a format also takes --group-size.
    """

    scheme: str
    option: str
    dtype: torch.dtype
    quant_scheme: str
    key_suffix: str
    scales_suffix: Optional[str] = None
    scales_dtype: Optional[torch.dtype] = None
    group_sizes: Tuple[int, ...] = ()
    quantizer: Optional[Quantizer] = None
    fallback: Optional[str] = None
    packed_bits: Optional[int] = None
    weighs_importance: bool = False
    adapter_option: Optional[str] = None
    output_layer_fallback: bool = False

    @property
    def scalar_type(self) -> int:
        """The stored weight entry's ScalarType in the files (schema/scalar_type.fbs)."""
        return scalar_type_of(self.dtype, f"fc format {self.scheme}")

    @property
    def value_bits(self) -> int:
        """The bits one value takes in the stored entry (the C++ row's value_bits)."""
        if self.packed_bits is not None:
            return self.packed_bits
        return torch.finfo(self.dtype).bits if self.dtype.is_floating_point else torch.iinfo(self.dtype).bits

    @property
    def quantized(self) -> bool:
        """Whether the weight is stored as integers with scales (the foundation's formats)."""
        return self.quantizer is not None

    @property
    def grouped(self) -> bool:
        """Whether its scales are per group along the input dim."""
        return bool(self.group_sizes)

    def why_not(self, in_size: int, group_size: int) -> Optional[str]:
        """Why a weight of in_size inputs cannot be stored in this format with group_size (a format
        of one group size: with its own), or None."""
        group = self.group(group_size)
        if self.grouped and in_size % group:
            return f"input size {in_size} is not a multiple of the group size {group}"
        return None

    def holding(self, in_size: int, group_size: int) -> "FcFormat":
        """This format, or its fallback when it cannot hold a weight of in_size inputs."""
        if self.why_not(in_size, group_size) is None or self.fallback is None:
            return self
        return fc_format(self.fallback).holding(in_size, group_size)

    def quantize(
        self, weight: torch.Tensor, group_size: int, importance: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The stored values and scales of a float32 weight (group_size: for a grouped format;
        importance: for a format that weighs it).

        Raises:
          ValueError: the format is not quantized, an importance for a format that does not weigh
            one, or as its quantizer.
        """
        if self.quantizer is None:
            raise ValueError(f"fc format {self.scheme} has no quantizer")
        if importance is not None and not self.weighs_importance:
            raise ValueError(f"fc format {self.scheme} ({self.option}) takes no calibration")
        return self.quantizer(weight, self.group(group_size) if self.grouped else group_size, importance)

    def group(self, group_size: int) -> int:
        """The group size its stored entries carry for an export's group_size (0 for a format
        without groups; its own for a format of one group size)."""
        if not self.grouped:
            return 0
        return self.group_sizes[0] if len(self.group_sizes) == 1 else group_size

    @property
    def adapter_value(self) -> str:
        """The --adapter-dtype value that asks for it (a format that holds adapters)."""
        return self.adapter_option or self.option

    @property
    def holds_adapters(self) -> bool:
        """Whether --adapter-dtype may ask for it: a LoRA B's input size is the rank (16 or less
        often), which no group fits, so the grouped formats store no adapter."""
        return not self.grouped

    def stored(self, weight: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The entries a float32 weight is stored as: its values in the row's dtype, and its
        scales (None for an unquantized row).

        Raises:
          ValueError: a grouped format, or as its quantizer.
        """
        if self.grouped:
            raise ValueError(f"fc format {self.scheme} has no stored() (grouped)")
        w = weight.detach().to(torch.float32)
        if self.quantizer is None:
            return w.to(self.dtype).contiguous(), None
        return self.quantize(w, 0)

    def rounded(self, weight: torch.Tensor) -> torch.Tensor:
        """The float32 values a float32 weight has once stored in this format and read back: what
        the delegate's kernels multiply by, so an eager reference that runs them agrees tightly.

        Raises:
          ValueError: a grouped format (its unpacking is the gather's, not a weight's).
        """
        if self.grouped:
            raise ValueError(f"fc format {self.scheme} has no rounded() (grouped)")
        values, scales = self.stored(weight)
        if scales is None:
            return values.to(torch.float32)
        return values.to(torch.float32) * scales.to(torch.float32)[:, None]


def _quantize_qc8w(
    weight: torch.Tensor, group_size: int, importance: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """quantize_qc8w: one scale per row, no groups, no importance."""
    return quantize_qc8w(weight)


F32 = FcFormat("f32", "fp32", torch.float32, "NONE", "")
F16W = FcFormat("f16w", "fp16", torch.float16, "NONE", ".fp16")
# "<key>.qc8w" cannot be another weight's key: "<key>" is a tensor, so no module is called "<key>"
# and no parameter "<key>.qc8w" exists (the same holds for every suffix here).
QC8W = FcFormat(
    "qc8w",
    "int8-row",
    torch.int8,
    "QC8W",
    ".qc8w",
    scales_suffix=".qc8w.scales",
    scales_dtype=torch.float32,
    quantizer=_quantize_qc8w,
    adapter_option="int8",
)
QB8W = FcFormat(
    "qb8w",
    "int8",
    torch.int8,
    "QB8W",
    ".qb8w",
    scales_suffix=".qb8w.scales",
    scales_dtype=torch.float16,
    group_sizes=(QB8W_BLOCK,),
    quantizer=quantize_qb8w,
    fallback="qc8w",
)
QC4W = FcFormat(
    "qc4w",
    "int4",
    torch.uint8,
    "QC4W",
    ".qc4w",
    scales_suffix=".qc4w.scales",
    scales_dtype=torch.float16,
    group_sizes=QC4W_GROUP_SIZES,
    quantizer=quantize_qc4w,
    fallback="qc8w",
    packed_bits=4,
    weighs_importance=True,
    output_layer_fallback=True,
)
# Q5_0's size (5.5 bits a weight with its scales) with qc4w's weighted scale search over 32 levels.
QB5W = FcFormat(
    "qb5w",
    "int5",
    torch.uint8,
    "QB5W",
    ".qb5w",
    scales_suffix=".qb5w.scales",
    scales_dtype=torch.float16,
    group_sizes=(QB5W_BLOCK,),
    quantizer=quantize_qb5w,
    fallback="qc8w",
    packed_bits=5,
    weighs_importance=True,
    output_layer_fallback=True,
)

FC_FORMATS: Tuple[FcFormat, ...] = (F32, F16W, QC8W, QB8W, QC4W, QB5W)

_BY_SCHEME: Dict[str, FcFormat] = {f.scheme: f for f in FC_FORMATS}
_BY_OPTION: Dict[str, FcFormat] = {f.option: f for f in FC_FORMATS}


def _lookup(rows: Dict[str, FcFormat], value: str, what: str) -> FcFormat:
    row = rows.get(value)
    if row is None:
        raise UnknownFormatError(f"{what} must be one of {tuple(rows)}, got {value!r}")
    return row


def fc_format(scheme: str) -> FcFormat:
    """The row of a scheme id ("f32", "f16w", "qc8w", "qb8w", "qc4w", "qb5w").

    Raises:
      UnknownFormatError: no row has that scheme id.
    """
    return _lookup(_BY_SCHEME, scheme, "fc weight scheme")


def format_for_option(option: str) -> FcFormat:
    """The row an option value asks for ("fp32", "fp16", "int8", "int8-row", "int4", "int5").

    Raises:
      UnknownFormatError: no row has that option value.
    """
    return _lookup(_BY_OPTION, option, "fc weight format")


def adapter_formats() -> Tuple[FcFormat, ...]:
    """The rows --adapter-dtype chooses between (f32 first: the default)."""
    return tuple(f for f in FC_FORMATS if f.holds_adapters)


def format_for_adapter_dtype(value: str) -> FcFormat:
    """The row an --adapter-dtype value asks for ("fp32", "fp16", "int8").

    Raises:
      UnknownFormatError: no adapter row has that value.
    """
    return _lookup({f.adapter_value: f for f in adapter_formats()}, value, "adapter dtype")


def unquantized_formats() -> Tuple[FcFormat, ...]:
    """The rows --fc-weight-dtype chooses between (f32 first: the default)."""
    return tuple(f for f in FC_FORMATS if not f.quantized)


def quantized_formats() -> Tuple[FcFormat, ...]:
    """The rows --quantize chooses between."""
    return tuple(f for f in FC_FORMATS if f.quantized)


# The child module an adapter wrapper keeps the foundation's Linear under (PEFT, models/lora.py).
_BASE_LAYER_NAMES = ("base_layer", "base")


@dataclasses.dataclass(frozen=True)
class FcMix:
    """A --quantize value that stores a model's foundation weights in two rows: the Linear layers
    named in `projections` in `sensitive`, every other weight as `base` would (its output layer,
    tables and fallbacks included). The delegate needs nothing new: each weight's entries carry
    their own row.

    Attributes:
      option: the --quantize value ("int4k").
      base: the scheme of the row every other weight is stored in ("qc4w"); its option is the
        compile spec's, its group size and --lm-head apply.
      sensitive: the scheme of the row the named projections are stored in ("qb8w").
      projections: the Linear module names stored in `sensitive` (a weight key's last module name:
        "model.layers.3.self_attn.v_proj.weight" is a v_proj).
    """

    option: str
    base: str
    sensitive: str
    projections: Tuple[str, ...]

    @property
    def base_format(self) -> FcFormat:
        """The row of every weight it does not name."""
        return fc_format(self.base)

    @property
    def sensitive_format(self) -> FcFormat:
        """The row of the projections it names."""
        return fc_format(self.sensitive)

    def names(self, key: str) -> bool:
        """Whether a weight key is one of its projections' (an adapted module's own base layer,
        PEFT's "v_proj.base_layer.weight" or edgeshare's "v_proj.base.weight", is the projection's)."""
        modules = key.split(".")[:-1]
        while modules and modules[-1] in _BASE_LAYER_NAMES:
            modules.pop()
        return bool(modules) and modules[-1] in self.projections


# llama.cpp's Q4_K_M keeps attn_v and ffn_down at 6 bits (its use_more_bits rule): the value
# projection writes the attention's output straight into the residual stream, and down_proj's
# inputs (the SwiGLU product) carry the widest outliers. qb8w costs no new kernel.
INT4K = FcMix("int4k", "qc4w", "qb8w", ("v_proj", "down_proj"))
# The same two projections at 8 bits over 5-bit blocks: about Q4_K_M's bytes on a model whose width
# is no multiple of 256 (where Q4_K_M itself is mostly Q5_0 with attn_v and ffn_down at 6-8 bits).
INT5K = FcMix("int5k", "qb5w", "qb8w", ("v_proj", "down_proj"))

FC_MIXES: Tuple[FcMix, ...] = (INT4K, INT5K)


def mix_for_option(option: str) -> Optional[FcMix]:
    """The mix a --quantize value asks for, or None (a row's option, or no quantization)."""
    return next((m for m in FC_MIXES if m.option == option), None)


# A Linear of one of these names is the model's output layer: kept at its format's fallback unless
# asked otherwise, as llama.cpp's 4-bit mixes keep the output layer at 6-8 bits.
OUTPUT_LAYER_NAMES: Tuple[str, ...] = ("lm_head", "output", "embed_out")


def is_output_layer(key: str) -> bool:
    """Whether a weight key ("lm_head.weight", "model.output.weight") is an output layer's."""
    parts = key.split(".")
    return len(parts) >= 2 and parts[-2] in OUTPUT_LAYER_NAMES


def foundation_format(
    requested: FcFormat,
    key: str,
    in_size: int,
    group_size: int,
    output_layer: FcFormat,
    gathered: bool,
    read_otherwise: bool,
    mix: Optional[FcMix] = None,
) -> Tuple[FcFormat, str]:
    """The format a quantized export stores one foundation matrix in, and why when it is not the
    requested one: one entry serves every reader of the weight, so a weight both gathered (a token
    embedding) and read by a linear (a tied lm_head) takes the fallback unless output_layer is the
    requested format, as does a table or a linear the format cannot hold and an output layer
    (unless output_layer is the requested format).

    Args:
      requested: the export's quantized format.
      key: the weight's key (its name decides whether it is an output layer).
      in_size: its input size (a table's width).
      group_size: the export's group size.
      output_layer: the format asked for the output layer.
      gathered: whether an embedding gathers from it.
      read_otherwise: whether anything else reads it (a linear).
      mix: the export's mix (requested is its base row), or None: a linear it names is stored in
        its sensitive row (that row's fallback when it cannot hold it, with the reason).

    Returns:
      (format, reason; "" when it is the requested format or the mix's choice).
    """
    if mix is not None and not gathered and mix.names(key):
        sensitive = mix.sensitive_format
        held = sensitive.holding(in_size, group_size)
        return held, ("" if held is sensitive else sensitive.why_not(in_size, group_size) or "")
    if requested.fallback is None:
        return requested, ""
    # A fallback may have one of its own (qb8w's qc8w never does).
    fallback = fc_format(requested.fallback).holding(in_size, group_size)
    if gathered and read_otherwise and output_layer is not requested:
        return fallback, "tied to the token embedding"
    why = requested.why_not(in_size, group_size)
    if gathered and why is not None:
        return fallback, f"embedding width {in_size} is not a multiple of the group size {group_size}"
    if output_layer is not requested and is_output_layer(key):
        return fallback, "output layer"
    if why is not None:
        return fallback, why
    return requested, ""
