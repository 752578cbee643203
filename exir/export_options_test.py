"""Export options: each bad value or combination refused where the object is made, in one line
naming the field and its flag; the CLI and the partitioner build the same objects."""

import sys

import pytest
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.export_options import AdapterOptions, ExportOptions, OptionError, QuantizationOptions
from edgeshare.exir.fc_formats import F16W, F32, INT4K, QB8W, QC4W, QC8W


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"fc_weight_dtype": "bf16"}, "fc_weight_dtype must be one of ('fp32', 'fp16'), got 'bf16'"),
        (
            {"quantize": "int2"},
            "quantize must be one of ('none', 'int8-row', 'int8', 'int4', 'int5', 'int4k', 'int5k'), got 'int2' "
            "(--quantize)",
        ),
        ({"quantize": "int8", "fc_weight_dtype": "fp16"}, "--quantize cannot be combined with --fc-weight-dtype fp16"),
        ({"quantize": "int8", "group_size": 64}, "--group-size and --lm-head apply to --quantize int4"),
        ({"lm_head": "int4"}, "--group-size and --lm-head apply to --quantize int4 or int5 or int4k or int5k"),
        ({"quantize": "int4", "group_size": 48}, "group_size must be one of (32, 64, 128), got 48 (--group-size)"),
        ({"quantize": "int4", "lm_head": "fp16"}, "lm_head must be one of ('int8', 'int4'), got 'fp16' (--lm-head)"),
        (
            {"quantize": "int8", "lm_head": "int8"},
            "--group-size and --lm-head apply to --quantize int4 or int5 or int4k or int5k",
        ),
        ({"quantize": "int5", "group_size": 64}, "group_size must be one of (32,), got 64 (--group-size)"),
        ({"quantize": "int5k", "lm_head": "int4"}, "lm_head must be one of ('int8', 'int5'), got 'int4' (--lm-head)"),
        ({"quantize": "int4k", "group_size": 16}, "group_size must be one of (32, 64, 128), got 16 (--group-size)"),
    ],
)
def test_bad_quantization_options_are_refused_in_one_line(kwargs, message):
    with pytest.raises(OptionError) as e:
        QuantizationOptions(**kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_quantization_options_name_their_formats():
    assert QuantizationOptions().quantized_format is None
    assert QuantizationOptions(fc_weight_dtype="fp16").fc_format is F16W
    int4 = QuantizationOptions(quantize="int4")
    assert int4.quantized_format is QC4W and int4.group == 32 and int4.output_layer_format is QC8W
    assert QuantizationOptions(quantize="int4", lm_head="int8").output_layer_format is QC8W
    assert QuantizationOptions(quantize="int4", lm_head="int4").output_layer_format is QC4W
    int8 = QuantizationOptions(quantize="int8")
    assert int8.quantized_format is QB8W and int8.group == 32 and int8.output_layer_format is QB8W
    assert QuantizationOptions(quantize="int8-row").output_layer_format is QC8W
    assert int4.mix is None and int8.mix is None
    # int4k: int4's row (its group, output layer and compile spec), and a mix naming its other row.
    int4k = QuantizationOptions(quantize="int4k", group_size=64, lm_head="int4")
    assert int4k.quantized_format is QC4W and int4k.group == 64 and int4k.output_layer_format is QC4W
    assert int4k.mix is INT4K and INT4K.sensitive_format is QB8W
    assert XnnpackPartitioner(quantize="int4k").options.mix is INT4K


def test_bad_layout_and_adapter_options_are_refused():
    with pytest.raises(OptionError, match=r"program_name \(--name\) must be a file stem"):
        ExportOptions(program_name="a/b")
    with pytest.raises(OptionError, match="--methods cannot be combined with --swappable"):
        ExportOptions(multi_method=True, adapters=AdapterOptions(swappable=True))
    with pytest.raises(OptionError, match="--foundation-by names cannot be combined with --swappable"):
        AdapterOptions(foundation_by="names", swappable=True)
    with pytest.raises(OptionError, match=r"foundation_by must be one of \('bytes', 'names'\)"):
        AdapterOptions(foundation_by="digest")
    with pytest.raises(OptionError, match=r"adapter_dtype must be one of \('fp32', 'fp16', 'int8'\), got 'int4'"):
        AdapterOptions(adapter_dtype="int4")


def test_adapter_options_name_their_format_row():
    assert AdapterOptions().adapter_format is F32
    assert AdapterOptions(adapter_dtype="fp16").adapter_format is F16W
    assert AdapterOptions(adapter_dtype="int8").adapter_format is QC8W
    assert XnnpackPartitioner(adapter_dtype="int8").adapter_format is QC8W
    with pytest.raises(OptionError, match="got 'bf16' \\(--adapter-dtype\\)"):
        XnnpackPartitioner(adapter_dtype="bf16")


def test_the_partitioner_takes_the_options_or_builds_the_same_from_its_keywords():
    options = QuantizationOptions(quantize="int4", group_size=64)
    assert XnnpackPartitioner(options=options).options is options
    assert XnnpackPartitioner(quantize="int4", group_size=64).options == options
    with pytest.raises(OptionError, match="not both"):
        XnnpackPartitioner(quantize="int8", options=options)
    with pytest.raises(ValueError, match="group_size must be one of"):
        XnnpackPartitioner(quantize="int4", group_size=48)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
