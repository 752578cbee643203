"""batch_quality's window runner on a tiny Llama (the real model is the bench's own run): a window
longer than a step's rows, run through forward_batch 64 rows at a time, gives the adapter's own
program's logits; the table and a bad --tables."""

import os

import numpy as np
import pytest
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench.batch_quality import AGREE_KL, ROWS, Row, agreement, batch_logits, format_markdown, main
from edgeshare.exir.hf import export_hf_batch, export_hf_lora
from edgeshare.extension.python import DataFile, Program
from edgeshare.models import hf_tiny

WINDOW = ROWS + 37


def test_a_window_past_one_step_equals_the_adapter_s_program(tmp_path):
    tiny = hf_tiny.save_tiny_lora("llama", str(tmp_path / "in"))
    adapters = {"a": tiny.adapter_dirs["a"]}
    batch, lora = str(tmp_path / "batch"), str(tmp_path / "lora")
    export_hf_batch(
        tiny.model_dir, adapters, batch, slots=1, max_seq_len=WINDOW, max_rows=ROWS, partitioner=XnnpackPartitioner()
    )
    export_hf_lora(tiny.model_dir, adapters, lora, WINDOW, XnnpackPartitioner())
    window = np.random.default_rng(3).integers(0, hf_tiny.VOCAB, size=(1, WINDOW), dtype=np.int64)
    got = batch_logits(batch)(window)
    program = Program.load(
        os.path.join(lora, "a.pte"), [DataFile.open(os.path.join(lora, "foundation.ptd"))], methods=["forward"]
    )
    want = program.method("forward").execute(window)[0]
    assert got.shape == want.shape == (1, WINDOW, hf_tiny.VOCAB)
    assert float(np.abs(got - want).max()) < 1e-4


def test_the_table_has_a_row_per_table_type():
    rows = [Row("fp32", 21.2, 0.0, None, None, 100, 4088), Row("int8", 21.3, 0.5, 1e-7, 0.999, 30, 4088)]
    text = format_markdown(rows, 21.2)
    assert "| fp32 | 21.200 | +0.0000% |  |  | 100 |" in text
    assert "| int8 | 21.300 | +0.5000% | 1.00e-07 | 99.90% | 30 |" in text


def test_the_program_s_kl_is_in_the_table():
    text = format_markdown([Row("fp32", 21.2, 0.0, None, None, 100, 4088)], 21.25, 3.1e-3)
    assert "perplexity 21.250, KL 3.10e-03 from the fp32 tables." in text


def test_a_quantized_foundation_agrees_within_the_kl_bound_whatever_the_perplexity_wobble():
    # Rounding that re-draws the activations' quantization moves one window's perplexity by up to a percent.
    assert agreement("int4", 26.66, 26.47, 3.3e-3) is None
    assert agreement("int8", 21.38, 21.46, 2.8e-3) is None


def test_a_program_on_another_adapter_or_none_is_refused_in_one_line():
    # Of the size the batch method on no adapter is from the adapter's program.
    line = agreement("int4", 26.66, 29.2, 0.17)
    assert line is not None and "past 1e-02" in line and "\n" not in line
    assert agreement("int8", 21.4, 21.4, float("nan")) is not None
    assert agreement("int8", 21.4, 21.4, AGREE_KL * 1.01) is not None


def test_the_fp32_foundation_also_agrees_in_perplexity():
    assert agreement("none", 21.3329, 21.3328, 1e-11) is None
    line = agreement("none", 21.33, 21.5, 1e-4)
    assert line == "the fp32 tables' perplexity 21.3300 is not the program's 21.5000"


@pytest.mark.parametrize("tables", ["fp16,int8", "fp32,int4", ""])
def test_tables_without_the_fp32_reference_or_of_an_unknown_type_are_one_line(tables, capsys):
    with pytest.raises(SystemExit, match="--tables takes fp32"):
        main(["--tables", tables])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
