"""export_hf_batch's forward_batch run by the C++ runtime: sequences on mixed adapters in one step.

A tiny Llama with PEFT adapters "a" and "b" (different target modules and ranks) is exported for a
batch of 3 slots. Steps mix prefill chunks and decode rows of three sequences (on "a", on no
adapter, on "b"), joining at different steps; every row's logits equal that sequence's own
single-sequence run in torch (the PEFT model's forward over the whole sequence), at fp32 and over
an int8 foundation (against the eager batch of the same quantized weights). The foundation file
is the one export_hf_lora writes; bad rows are refused in one line and leave the caches as they were.
"""

import json
import os
import shutil
from typing import List, Tuple

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import deserialize_ptd, export_hf_batch, export_hf_lora, read_ptd_index
from edgeshare.exir._serialize import write_ptd
from edgeshare.exir.hf import load_hf_model, load_peft_adapter
from edgeshare.exir.hf_batch import TABLE_DTYPES, BatchedCausalLM, BatchShape, lora_targets, lora_weights
from edgeshare.extension.python import BatchEngine, EdgeshareError, Program
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora

MAX_SEQ_LEN = 24
SLOTS = 3
TOLERANCE = 1e-4

# (slot, adapter slot or -1, adapter name or None, prompt length)
SEQUENCES = ((0, 0, "a", 7), (1, -1, None, 5), (2, 1, "b", 4))
# Each step: (slot, first position, last position + 1) of the rows it runs.
STEPS = (
    ((0, 0, 7), (1, 0, 3)),
    ((1, 3, 5), (0, 7, 8), (2, 0, 1)),
    ((2, 1, 4), (0, 8, 9)),
    ((0, 9, 10), (1, 5, 6), (2, 4, 5)),
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("batch"))
    return hf_tiny.save_tiny_lora("llama", os.path.join(root, "in")), root


def _tokens() -> dict:
    g = torch.Generator().manual_seed(5)
    return {slot: torch.randint(0, hf_tiny.VOCAB, (MAX_SEQ_LEN,), generator=g) for slot, *_ in SEQUENCES}


@pytest.fixture(scope="module")
def reference(files):
    """Each sequence's logits at every position, from its own model in torch."""
    tiny, _ = files
    base = load_hf_model(tiny.model_dir)
    tokens = _tokens()
    logits = {}
    for slot, _, name, _ in SEQUENCES:
        model = load_peft_adapter(base, name, tiny.adapter_dirs[name]) if name else base
        with torch.no_grad():
            logits[slot] = model(input_ids=tokens[slot][:12].view(1, -1)).logits[0].numpy()
    return tokens, logits


def _step(rows: Tuple[Tuple[int, int, int], ...], tokens: dict) -> Tuple[List[np.ndarray], List[Tuple[int, int]]]:
    adapter_of = {slot: adapter for slot, adapter, _, _ in SEQUENCES}
    ids, positions, slots, adapters, where = [], [], [], [], []
    for slot, first, last in rows:
        for p in range(first, last):
            ids.append(int(tokens[slot][p]))
            positions.append(p)
            slots.append(slot)
            adapters.append(adapter_of[slot])
            where.append((slot, p))
    inputs = [
        np.array([ids], dtype=np.int64),
        np.array(positions, dtype=np.int64),
        np.array(slots, dtype=np.int64),
        np.array(adapters, dtype=np.int64),
        np.arange(len(ids), dtype=np.int64),
    ]
    return inputs, where


def test_every_row_equals_its_own_sequence_run(files, reference):
    out = _fp32_tables(files)
    manifest = json.load(open(os.path.join(out, "batch.json"), encoding="utf-8"))
    assert manifest["adapters"] == ["a", "b"] and manifest["slots"] == SLOTS
    tokens, want = reference
    method = _batch_method(out)
    worst = 0.0
    for rows in STEPS:
        inputs, where = _step(rows, tokens)
        (logits,) = method.execute(*inputs)
        assert logits.shape == (1, len(where), hf_tiny.VOCAB)
        for j, (slot, p) in enumerate(where):
            worst = max(worst, float(np.abs(logits[0, j] - want[slot][p]).max()))
    assert worst < TOLERANCE, worst


@pytest.mark.parametrize("quantize", ["int8", "int4"])
def test_quantized_rows_equal_each_adapter_s_own_program(files, quantize):
    """Over a quantized foundation, each row's logits equal its sequence's run through that
    adapter's own program (export_hf_lora, the same quantized foundation): activations are
    quantized per row, so a row never depends on its batch mates."""
    tiny, root = files
    batch, lora = os.path.join(root, f"{quantize}-batch"), os.path.join(root, f"{quantize}-lora")
    result = export_hf_batch(
        tiny.model_dir,
        dict(tiny.adapter_dirs),
        batch,
        slots=SLOTS,
        max_seq_len=MAX_SEQ_LEN,
        max_rows=16,
        partitioner=XnnpackPartitioner(quantize=quantize),
    )
    export_hf_lora(tiny.model_dir, dict(tiny.adapter_dirs), lora, MAX_SEQ_LEN, XnnpackPartitioner(quantize=quantize))
    tokens, _ = _tokens(), None
    want = {}
    for slot, _, name, _ in SEQUENCES:
        own = Program.load(os.path.join(lora, f"{name or 'foundation'}.pte"), [os.path.join(lora, "foundation.ptd")])
        want[slot] = own.method("forward").execute(tokens[slot][:12].view(1, -1).numpy())[0][0]
    method = Program.load(result.batch_program, [result.foundation_path, result.tables_path]).method("forward_batch")
    worst = 0.0
    for rows in STEPS:
        inputs, where = _step(rows, tokens)
        (logits,) = method.execute(*inputs)
        for j, (slot, p) in enumerate(where):
            worst = max(worst, float(np.abs(logits[0, j] - want[slot][p]).max()))
    assert worst < 1e-3, worst


def test_export_lora_batch_slots_writes_the_batch_files(files, capsys):
    tiny, root = files
    out = os.path.join(root, "cli")
    argv = ["--hf-model", tiny.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN), "--batch-slots", "2"]
    for name, path in tiny.adapter_dirs.items():
        argv += ["--adapter", f"{name}={path}"]
    assert export_lora.main(argv) == 0
    summary = capsys.readouterr().out
    assert "batch program:" in summary and "2 sequences" in summary, summary
    written = set(os.listdir(out))
    assert {"batch.pte", "batch.json", "batch_tables.ptd", "a.ptd", "b.ptd", "foundation.ptd"} <= written, written
    manifest = json.load(open(os.path.join(out, "batch.json"), encoding="utf-8"))
    assert manifest["adapter_files"] == {"a": "a.ptd", "b": "b.ptd"} and manifest["adapter_slots"] == 2


def test_foundation_is_export_lora_s(files):
    tiny, root = files
    batch = os.path.join(root, "fp32")
    lora = os.path.join(root, "lora")
    export_hf_lora(tiny.model_dir, dict(tiny.adapter_dirs), lora, MAX_SEQ_LEN, XnnpackPartitioner())
    with open(os.path.join(batch, "foundation.ptd"), "rb") as a, open(os.path.join(lora, "foundation.ptd"), "rb") as b:
        assert a.read() == b.read()


def test_a_bad_row_is_refused_and_changes_nothing(files, reference):
    tiny, root = files
    out = os.path.join(root, "fp32")
    tokens, want = reference
    method = _batch_method(out)
    inputs, where = _step(STEPS[0], tokens)
    method.execute(*inputs)
    for index, value, words in ((2, SLOTS, "slot"), (1, MAX_SEQ_LEN, "position"), (3, 7, "adapter slot")):
        bad, _ = _step(STEPS[1], tokens)
        bad[index] = bad[index].copy()
        bad[index][2] = value  # a row of slot 0: a position past the bound would land in slot 1
        with pytest.raises(EdgeshareError, match=words):
            method.execute(*bad)
    inputs, where = _step(STEPS[1], tokens)
    (logits,) = method.execute(*inputs)
    worst = max(float(np.abs(logits[0, j] - want[slot][p]).max()) for j, (slot, p) in enumerate(where))
    assert worst < TOLERANCE, worst


def _export_tables(files, capsys, dtype: str) -> str:
    """export_lora --batch-slots with --adapter-dtype dtype into its own folder; checks its summary
    and batch.json name the tables' type."""
    tiny, root = files
    out = os.path.join(root, f"{dtype}-tables")
    argv = ["--hf-model", tiny.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN), "--batch-slots", str(SLOTS)]
    argv += ["--batch-rows", "16", "--adapter-dtype", dtype]
    for name, path in tiny.adapter_dirs.items():
        argv += ["--adapter", f"{name}={path}"]
    assert export_lora.main(argv) == 0
    assert f"({TABLE_DTYPES[dtype]})" in capsys.readouterr().out
    manifest = json.load(open(os.path.join(out, "batch.json"), encoding="utf-8"))
    assert manifest["table_dtype"] == dtype
    return out


def _batch_method(out: str):  # noqa: ANN202 (the extension's Method)
    """forward_batch of the batch export in out, over its foundation and its tables."""
    files = [os.path.join(out, "foundation.ptd"), os.path.join(out, "batch_tables.ptd")]
    return Program.load(os.path.join(out, "batch.pte"), files).method("forward_batch")


def _fp32_tables(files) -> str:
    """The batch with float32 tables (export_hf_batch's default), exported once for every test."""
    tiny, root = files
    out = os.path.join(root, "fp32")
    if not os.path.exists(os.path.join(out, "batch.json")):
        export_hf_batch(
            tiny.model_dir,
            dict(tiny.adapter_dirs),
            out,
            slots=SLOTS,
            max_seq_len=MAX_SEQ_LEN,
            max_rows=16,
            partitioner=XnnpackPartitioner(),
        )
    return out


def _worst_against_eager_and_fp32(files, reference, out: str, dtype: str) -> Tuple[float, float]:
    """The largest difference of forward_batch's logits over out's tables from the eager batch over
    tables of the same type, and from each sequence's fp32 run, over STEPS."""
    tiny, _ = files
    base = load_hf_model(tiny.model_dir)
    weights = [lora_weights(load_peft_adapter(base, n, tiny.adapter_dirs[n])) for n in ("a", "b")]
    rank = max(w.rank for w in weights)
    shape = BatchShape(SLOTS, MAX_SEQ_LEN, SLOTS, rank, lora_targets(weights), 16, TABLE_DTYPES[dtype])
    eager = BatchedCausalLM(load_hf_model(tiny.model_dir), shape)
    for slot, w in enumerate(weights):
        eager.put_adapter(slot, w)
    tokens, want = reference
    method = _batch_method(out)
    worst_eager = worst_fp32 = 0.0
    for rows in STEPS:
        inputs, where = _step(rows, tokens)
        (logits,) = method.execute(*inputs)
        with torch.no_grad():
            expect = eager(*(torch.from_numpy(x) for x in inputs)).numpy()
        worst_eager = max(worst_eager, float(np.abs(logits - expect).max()))
        for j, (slot, p) in enumerate(where):
            worst_fp32 = max(worst_fp32, float(np.abs(logits[0, j] - want[slot][p]).max()))
    return worst_eager, worst_fp32


def _check_rows_and_engine(files, reference, out: str, dtype: str, fp32_tolerance: float) -> BatchEngine:
    """Every row's logits over out's tables equal the eager batch's and stay within fp32_tolerance of
    the fp32 sequences'; an engine over them loads its own adapter file and refuses an fp32 one in
    one line, leaving its adapters as they were. Returns the engine."""
    worst_eager, worst_fp32 = _worst_against_eager_and_fp32(files, reference, out, dtype)
    assert worst_eager < TOLERANCE, worst_eager
    assert worst_fp32 < fp32_tolerance, worst_fp32
    engine = BatchEngine.open(out, threads=1)
    engine.load_adapter(2, os.path.join(out, "a.ptd"), name="a2")
    type_name = {"fp16": "float16", "int8": "int8"}[dtype]
    with pytest.raises(EdgeshareError, match=f"factor in {type_name}"):
        engine.load_adapter(2, os.path.join(_fp32_tables(files), "b.ptd"), name="b32")
    assert "a2" in engine.adapters and "b32" not in engine.adapters
    return engine


def test_fp16_tables_equal_the_eager_batch_and_hold_half_the_bytes(files, reference, capsys):
    """--adapter-dtype fp16 stores the adapter tables and files in half the bytes; every row's
    logits equal the eager batch over the same fp16 tables (products accumulate in float32) and stay
    near the fp32 sequences'."""
    out, fp32 = _export_tables(files, capsys, "fp16"), _fp32_tables(files)
    for name in ("batch_tables.ptd", "a.ptd", "b.ptd"):
        half, full = read_ptd_index(os.path.join(out, name)), read_ptd_index(os.path.join(fp32, name))
        assert half.keys() == full.keys() and half
        for key, entry in half.items():
            assert 2 * entry.size == full[key].size, (name, key, entry.size, full[key].size)
    _check_rows_and_engine(files, reference, out, "fp16", fp32_tolerance=1e-2)


def test_int8_tables_equal_the_eager_batch_in_a_quarter_of_the_bytes(files, reference, capsys):
    """--adapter-dtype int8 stores each factor row as int8 with its float32 scale; every row's logits
    equal the eager batch over the same int8 tables and stay near the fp32 sequences'; an engine of
    int8 tables loads int8 adapter files and refuses another dtype's, or an int8 factor without its
    scales, in one line."""
    out, fp32 = _export_tables(files, capsys, "int8"), _fp32_tables(files)
    for name in ("batch_tables.ptd", "a.ptd", "b.ptd"):
        q, full = read_ptd_index(os.path.join(out, name)), read_ptd_index(os.path.join(fp32, name))
        assert {k for k in q if not k.endswith("_scales")} == full.keys() and full
        for key, entry in full.items():
            assert 4 * q[key].size == entry.size, (name, key, q[key].size, entry.size)
            # One float32 scale per row of A and per output of B: the tables hold B transposed,
            # [slots, rank, out], the adapter files as LoRA has it, [out, r].
            sizes = entry.tensor_layout.sizes
            if name == "batch_tables.ptd" and key.endswith("lora_b"):
                rows = int(np.prod(sizes[:-2])) * sizes[-1]
            else:
                rows = int(np.prod(sizes[:-1]))
            assert q[f"{key}_scales"].size == 4 * rows, (name, key)
    engine = _check_rows_and_engine(files, reference, out, "int8", fp32_tolerance=5e-2)
    # An int8 file whose factors lost their scales would run them as zeros: refused.
    unscaled = os.path.join(os.path.dirname(out), "a-unscaled.ptd")
    _without_scales(os.path.join(out, "a.ptd"), unscaled)
    with pytest.raises(EdgeshareError, match="comes without its"):
        engine.load_adapter(2, unscaled, name="a_unscaled")
    assert "a_unscaled" not in engine.adapters
    # So would tables that lost theirs: the engine does not open.
    broken = os.path.join(os.path.dirname(out), "int8-tables-unscaled")
    shutil.copytree(out, broken)
    _without_scales(os.path.join(out, "batch_tables.ptd"), os.path.join(broken, "batch_tables.ptd"))
    with pytest.raises(EdgeshareError, match="int8 table '.*' has no '.*_scales'"):
        BatchEngine.open(broken, threads=1)
    # And float tables that carry int8 scales are not a table set either.
    fp32 = _fp32_tables(files)
    mixed = os.path.join(os.path.dirname(out), "fp32-tables-with-scales")
    shutil.copytree(fp32, mixed)
    entries = {}
    for path, keep in ((fp32, lambda k: True), (out, lambda k: k.endswith("_scales"))):
        with open(os.path.join(path, "batch_tables.ptd"), "rb") as f:
            whole = deserialize_ptd(f.read())
        entries.update({k: (e.data, 64, e.tensor_layout) for k, e in whole.named_data.items() if keep(k)})
    with open(os.path.join(mixed, "batch_tables.ptd"), "wb") as f:
        write_ptd(f, dict(sorted(entries.items())), 64, bytes(whole.flat_tensor.foundationDigest))
    with pytest.raises(EdgeshareError, match="holds scales, but the factors are not int8"):
        BatchEngine.open(mixed, threads=1)


def _without_scales(path: str, to: str) -> None:
    """Writes path's .ptd to `to` without its scales entries, recording the same foundation."""
    with open(path, "rb") as f:
        whole = deserialize_ptd(f.read())
    kept = {k: (e.data, 64, e.tensor_layout) for k, e in whole.named_data.items() if not k.endswith("_scales")}
    with open(to, "wb") as f:
        write_ptd(f, kept, 64, bytes(whole.flat_tensor.foundationDigest))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
