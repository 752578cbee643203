"""An export's options as plain data, each checked once when it is made.

tools/export_lora (and the wheel's edgeshare-export, which runs it), the Python API (export_lora,
export_hf_lora, export_swappable through XnnpackPartitioner) and the XNNPACK backend's preprocess
build these objects; a bad value fails where the object is made, with one line naming the field and
the command-line flag that sets it.

    quant = QuantizationOptions(quantize="int4", group_size=64)      # --quantize int4 --group-size 64
    mixed = QuantizationOptions(quantize="int4k")                    # int4, v_proj/down_proj int8
    partitioner = XnnpackPartitioner(options=quant)
    layout = ExportOptions(multi_method=True, program_name="lora")  # --methods --name lora
"""

import dataclasses
import re
from typing import Optional, Tuple

from edgeshare.exir.errors import ExportError
from edgeshare.exir.fc_formats import (
    F32,
    FC_MIXES,
    FcFormat,
    FcMix,
    adapter_formats,
    fc_format,
    format_for_adapter_dtype,
    format_for_option,
    mix_for_option,
    quantized_formats,
    unquantized_formats,
)

__all__ = ["AdapterOptions", "ExportOptions", "OptionError", "QuantizationOptions"]

_STEM = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class OptionError(ExportError):
    """An export option has a value it cannot take, or two options conflict (naming both)."""


def _one_of(field: str, flag: str, value: object, allowed: Tuple[object, ...]) -> None:
    if value not in allowed:
        raise OptionError(f"{field} must be one of {allowed}, got {value!r} ({flag})")


def _fallback_options() -> Tuple[str, ...]:
    """The --quantize values that keep the output layer in another format (and so take --lm-head
    and --group-size): such rows, and the mixes over them."""
    rows = tuple(f.option for f in quantized_formats() if f.output_layer_fallback)
    return rows + tuple(m.option for m in FC_MIXES if m.base_format.option in rows)


def _quantize_options() -> Tuple[str, ...]:
    """The --quantize values: "none", each quantized row's option, each mix's."""
    return ("none", *(f.option for f in quantized_formats()), *(m.option for m in FC_MIXES))


@dataclasses.dataclass(frozen=True)
class QuantizationOptions:
    """How fully connected weights are stored (exir/fc_formats.py's rows).

    Attributes:
      fc_weight_dtype: --fc-weight-dtype, an unquantized format's option ("fp32", "fp16"): the
        format of every delegated linear's weight when quantize is "none".
      quantize: --quantize, "none", a quantized format's option ("int8", "int4") or a mix's
        ("int4k", exir/fc_formats.py's FC_MIXES): the format of the foundation's linear weights
        (adapters: AdapterOptions.adapter_dtype).
      group_size: --group-size, with a grouped format: the group along the input dim (None: the
        format's first group size).
      lm_head: --lm-head, with a format that has a fallback: the output layer's format option
        (None: the fallback's).

    Raises:
      OptionError: a value no row has, a quantized format with fp16 weights, or group_size or
        lm_head without a format that takes them.
    """

    fc_weight_dtype: str = F32.option
    quantize: str = "none"
    group_size: Optional[int] = None
    lm_head: Optional[str] = None

    def __post_init__(self) -> None:
        unquantized = tuple(f.option for f in unquantized_formats())
        _one_of("fc_weight_dtype", "--fc-weight-dtype", self.fc_weight_dtype, unquantized)
        _one_of("quantize", "--quantize", self.quantize, _quantize_options())
        if self.quantize != "none" and self.fc_weight_dtype != F32.option:
            raise OptionError(
                f"--quantize cannot be combined with --fc-weight-dtype {self.fc_weight_dtype} (quantize and "
                "fc_weight_dtype cannot both change the weights)"
            )
        takes = _fallback_options()
        if self.quantize not in takes and (self.group_size is not None or self.lm_head is not None):
            raise OptionError(
                f"--group-size and --lm-head apply to --quantize {' or '.join(takes)} (group_size and lm_head "
                f"with quantize={self.quantize!r})"
            )
        if self.group_size is not None:
            _one_of("group_size", "--group-size", self.group_size, self.quantized_format.group_sizes)
        if self.lm_head is not None:
            fmt = self.quantized_format
            # The fallback under the name --adapter-dtype gives it (int4's: "int8", per row).
            _one_of("lm_head", "--lm-head", self.lm_head, (fc_format(fmt.fallback).adapter_value, fmt.option))

    @property
    def quantized_format(self) -> Optional[FcFormat]:
        """The foundation's quantized format (a mix's base row), or None."""
        if self.quantize == "none":
            return None
        mix = mix_for_option(self.quantize)
        return mix.base_format if mix is not None else format_for_option(self.quantize)

    @property
    def mix(self) -> Optional[FcMix]:
        """The mix quantize asks for, or None."""
        return mix_for_option(self.quantize)

    @property
    def fc_format(self) -> FcFormat:
        """The format of delegated linear weights that are not quantized."""
        return format_for_option(self.fc_weight_dtype)

    @property
    def group(self) -> int:
        """The group size in effect (the quantized format's first when none was given; with none
        grouped, the grouped formats' first)."""
        if self.group_size is not None:
            return self.group_size
        fmt = self.quantized_format
        grouped = [fmt] if fmt is not None and fmt.grouped else [f for f in quantized_formats() if f.grouped]
        return grouped[0].group_sizes[0]

    @property
    def output_layer_format(self) -> Optional[FcFormat]:
        """The output layer's format under a quantized format (its fallback unless lm_head says)."""
        fmt = self.quantized_format
        if fmt is None:
            return None
        if self.lm_head == fmt.option:
            return fmt
        return fc_format(fmt.fallback) if fmt.output_layer_fallback else fmt


@dataclasses.dataclass(frozen=True)
class AdapterOptions:
    """How adapters are read and written.

    Attributes:
      alpha: LoRA alpha of state-dict adapters (None: alpha = rank).
      foundation_by: --foundation-by, "bytes" (a weight is the foundation's when its dtype, shape
        and bytes equal a foundation tensor's) or "names" ("lora" in a name marks an adapter weight).
      swappable: --swappable, one program for the adapters of one structure plus a data file each.
      adapter_dtype: --adapter-dtype, the adapter value of an adapter format row ("fp32", "fp16", "int8"):
        how the adapters' linear weights are stored (the foundation's are as quantization says);
        like quantization it reaches the delegate through its partitioner
        (XnnpackPartitioner(adapter_dtype=...)), which tools/export_lora builds from it.

    Raises:
      OptionError: foundation_by is neither, swappable with names, or an adapter_dtype no row has.
    """

    alpha: Optional[float] = None
    foundation_by: str = "bytes"
    swappable: bool = False
    adapter_dtype: str = F32.option

    def __post_init__(self) -> None:
        _one_of("foundation_by", "--foundation-by", self.foundation_by, ("bytes", "names"))
        values = tuple(f.adapter_value for f in adapter_formats())
        _one_of("adapter_dtype", "--adapter-dtype", self.adapter_dtype, values)
        if self.swappable and self.foundation_by == "names":
            raise OptionError("--foundation-by names cannot be combined with --swappable")

    @property
    def adapter_format(self) -> FcFormat:
        """The format row of the adapters' linear weights."""
        return format_for_adapter_dtype(self.adapter_dtype)


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """The layout of an export's files and what its programs hold.

    Attributes:
      multi_method: --methods, one <program_name>.pte whose methods are the adapters.
      program_name: --name, that file's stem.
      foundation_tag: the shared data file's stem.
      foundation_program: the bare foundation's own .pte stem (None: none is written).
      quantization: how fully connected weights are stored.
      adapters: how adapters are read and written.

    Raises:
      OptionError: a stem that is not a file stem, or the multi-method file with swappable adapters
        (the foundation program's stem is checked against the adapters' names by export_lora).
    """

    multi_method: bool = False
    program_name: str = "lora"
    foundation_tag: str = "foundation"
    foundation_program: Optional[str] = None
    quantization: QuantizationOptions = QuantizationOptions()
    adapters: AdapterOptions = AdapterOptions()

    def __post_init__(self) -> None:
        for field, flag, value in (
            ("program_name", "--name", self.program_name),
            ("foundation_tag", "foundation_tag", self.foundation_tag),
        ):
            if not isinstance(value, str) or not _STEM.match(value):
                raise OptionError(f"{field} ({flag}) must be a file stem (letters, digits, '_', '.', '-'): {value!r}")
        if self.multi_method and self.adapters.swappable:
            raise OptionError("--methods cannot be combined with --swappable")
