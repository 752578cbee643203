"""Adapters stored fp16 or int8 per output row (--adapter-dtype, XnnpackPartitioner(adapter_dtype=...))
end to end through the XNNPACK delegate: the in-repo tiny Llama with two PEFT adapters, exported
three times (fp32, fp16 and int8 adapters) over the same fp32 foundation.

- foundation.ptd is byte-identical whatever the adapters' dtype;
- each adapter's own weights take 1/2 (fp16) and about 1/4 (int8: plus float32 scales per row) of
  the fp32 adapter's bytes;
- the logits of every position: within 1e-2 of the fp32-adapter program's (fp16) or at cosine
  >= 0.999 with them (int8); close to an eager model whose adapter weights are rounded as stored
  (exir/quantize.py's adapter_reference);
- greedy tokens equal that rounded eager model's; two programs over one foundation fetch each
  foundation key once;
- --swappable: each adapter's .ptd holds its weights in the dtype (int8's scales as their own
  entries), the program reads them as stored (logits as above, and against the rounded eager
  model), a swap to another adapter of the same dtype works and one of another dtype is refused
  in one line;
- a bad --adapter-dtype is one line and writes nothing.
"""

import json
import os
from typing import Dict, List

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.backends.xnnpack.partitioner import XnnpackPartitioner
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.hf import export_hf_lora
from edgeshare.exir.fc_formats import format_for_option as fc_format_of
from edgeshare.exir.quantize import adapter_reference
from edgeshare.extension.python import DataFile, Program, weights_cache_stats
from edgeshare.models import hf_tiny
from edgeshare.tools import export_lora

MAX_SEQ_LEN = 48
NEW_TOKENS = 24
INIT_STD = 0.2
PROMPT = np.random.default_rng(3).integers(0, hf_tiny.VOCAB, size=(6,), dtype=np.int64)
ADAPTERS = ("a", "b")
DTYPES = ("fp32", "fp16", "int8")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("adapter_dtype"))
    files = hf_tiny.save_tiny_lora("llama", os.path.join(root, "in"), initializer_range=INIT_STD)
    adapters = {name: files.adapter_dirs[name] for name in ADAPTERS}
    results = {
        dtype: export_hf_lora(
            files.model_dir,
            adapters,
            os.path.join(root, dtype),
            max_seq_len=MAX_SEQ_LEN,
            partitioner=XnnpackPartitioner(adapter_dtype=dtype),
        )
        for dtype in DTYPES
    }
    return files, {dtype: os.path.join(root, dtype) for dtype in DTYPES}, results


def _model(files: hf_tiny.TinyLoraFiles, adapter: str, dtype: str, swappable: bool = False) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()
    model = peft.PeftModel.from_pretrained(model, files.adapter_dirs[adapter]).eval()
    return adapter_reference(model, dtype, swappable=swappable)


def _greedy(model: torch.nn.Module, new_tokens: int) -> List[int]:
    """Greedy tokens after PROMPT, each from a forward over the whole sequence (transformers'
    generate() with adapter "b" picks another token than its own forward at this prompt)."""
    ids = torch.from_numpy(PROMPT).view(1, -1)
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[0, len(PROMPT) :].tolist()


def _logits(out: str, adapter: str, foundation: DataFile) -> torch.Tensor:
    program = Program.load(os.path.join(out, f"{adapter}.pte"), [foundation])
    (logits,) = program.method("forward").execute(PROMPT.reshape(1, -1))
    return torch.from_numpy(np.asarray(logits)).reshape(len(PROMPT), hf_tiny.VOCAB)


def _all_logits(dirs: Dict[str, str]) -> Dict[str, Dict[str, torch.Tensor]]:
    got: Dict[str, Dict[str, torch.Tensor]] = {}
    for dtype, out in dirs.items():
        foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
        got[dtype] = {adapter: _logits(out, adapter, foundation) for adapter in ADAPTERS}
    return got


def test_foundation_ptd_is_byte_identical_whatever_the_adapter_dtype(exported):
    _, dirs, _ = exported
    with open(os.path.join(dirs["fp32"], "foundation.ptd"), "rb") as f:
        fp32 = f.read()
    for dtype in ("fp16", "int8"):
        with open(os.path.join(dirs[dtype], "foundation.ptd"), "rb") as f:
            assert f.read() == fp32, dtype


def test_adapter_bytes_are_a_half_and_about_a_quarter(exported):
    _, dirs, results = exported
    for adapter in ADAPTERS:
        fp32 = results["fp32"].adapter_bytes[adapter]
        fp16 = results["fp16"].adapter_bytes[adapter]
        int8 = results["int8"].adapter_bytes[adapter]
        sizes = {d: os.path.getsize(os.path.join(dirs[d], f"{adapter}.pte")) for d in DTYPES}
        print(f"adapter {adapter}: own weights fp32 {fp32}, fp16 {fp16}, int8 {int8} bytes; .pte {sizes} (mostly graph)")
        assert fp16 * 2 == fp32
        # int8 values plus one float32 scale per output row of each rank-r matrix.
        # int8 values plus one float32 scale per output row of each matrix (rank r: a quarter and
        # 4 / r of a quarter more for B).
        with open(os.path.join(dirs["int8"], f"{adapter}.pte"), "rb") as f:
            named = deserialize_pte(f.read()).named_data
        scales = sum(len(b.data) for k, b in named.items() if k.startswith("forward/") and k.endswith(".scales"))
        assert int8 == fp32 // 4 + scales


def test_the_stored_entries_carry_the_row_dtypes(exported):
    _, dirs, _ = exported
    with open(os.path.join(dirs["int8"], "a.pte"), "rb") as f:
        named = deserialize_pte(f.read()).named_data
    int8 = [k for k in named if k.endswith(".qc8w")]
    assert int8 and all(k + ".scales" in named for k in int8)
    assert all("lora_" in k for k in int8), int8
    with open(os.path.join(dirs["fp16"], "a.pte"), "rb") as f:
        half = [k for k in deserialize_pte(f.read()).named_data if k.endswith(".fp16")]
    assert sorted(k[: -len(".fp16")] for k in half) == sorted(k[: -len(".qc8w")] for k in int8)


def test_logits_agree_with_the_fp32_adapter_program_and_the_rounded_eager_model(exported):
    files, dirs, _ = exported
    got = _all_logits(dirs)
    ids = torch.from_numpy(PROMPT).view(1, -1)
    for adapter in ADAPTERS:
        fp32 = got["fp32"][adapter]
        fp16_err = float((got["fp16"][adapter] - fp32).abs().max())
        cos = torch.nn.functional.cosine_similarity(got["int8"][adapter], fp32, dim=-1)
        print(
            f"adapter {adapter}: max |fp16 - fp32 adapters| {fp16_err:.3g} (max |logit| {float(fp32.abs().max()):.3g});"
            f" int8 cosine per position {[round(float(c), 6) for c in cos]}"
        )
        assert fp16_err <= 1e-2
        assert bool((cos >= 0.999).all())
        assert float((got["int8"][adapter] - fp32).abs().max()) > 0  # the int8 program is not the fp32 one
        for dtype in ("fp16", "int8"):
            with torch.no_grad():
                want = _model(files, adapter, dtype)(input_ids=ids).logits[0]
            err = float((got[dtype][adapter] - want).abs().max())
            print(f"adapter {adapter} {dtype}: max |runtime - rounded eager| {err:.3g}")
            assert err <= 1e-3 * max(1.0, float(want.abs().max()))


def test_greedy_tokens_equal_the_rounded_eager_model_and_the_foundation_is_fetched_once(exported):
    files, dirs, _ = exported
    for dtype in ("fp16", "int8"):
        foundation = DataFile.open(os.path.join(dirs[dtype], "foundation.ptd"))
        before = weights_cache_stats()["named_data_fetches"]
        programs = {"a": Program.load(os.path.join(dirs[dtype], "a.pte"), [foundation])}
        first = weights_cache_stats()["named_data_fetches"]
        programs["b"] = Program.load(os.path.join(dirs[dtype], "b.pte"), [foundation])
        second = weights_cache_stats()["named_data_fetches"]
        # Each key at most once (the fp16 programs' foundation is byte-identical, so the int8 ones
        # may fetch none of it), and the second program no foundation key at all.
        assert all(n - before.get(k, 0) <= 1 for k, n in second.items()), dtype
        again = [k for k, n in second.items() if n > first.get(k, 0) and "lora_" not in k]
        assert not again, (dtype, again)
        for adapter, program in programs.items():
            got = program.method("forward_cached").generate(PROMPT, NEW_TOKENS).tokens
            assert got == _greedy(_model(files, adapter, dtype), NEW_TOKENS), (dtype, adapter)


@pytest.fixture(scope="module")
def swappable(exported):
    files, dirs, _ = exported
    # "c": adapter "a"'s structure with other weights, so both swap on one program.
    files.adapter_dirs["c"] = hf_tiny.save_twin_adapter(
        "llama", os.path.dirname(files.model_dir), "c", initializer_range=INIT_STD
    )
    root = os.path.dirname(dirs["fp32"])
    swap_dirs = {}
    for dtype in DTYPES:
        out = os.path.join(root, f"swap_{dtype}")
        argv = ["--hf-model", files.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN), "--swappable"]
        argv += ["--adapter-dtype", dtype] + [f"--adapter={n}={files.adapter_dirs[n]}" for n in ("a", "c")]
        assert export_lora.main(argv) == 0, dtype
        swap_dirs[dtype] = out
    return files, swap_dirs, dirs


def _until_end(tokens: List[int], out: str) -> List[int]:
    """tokens up to and including the first end token of the export's generation_config.json (the
    CLI copies the model's, and generation stops there)."""
    with open(os.path.join(out, "generation_config.json"), encoding="utf-8") as f:
        end = json.load(f).get("eos_token_id")
    ends = set(end if isinstance(end, list) else [] if end is None else [end])
    for i, token in enumerate(tokens):
        if token in ends:
            return tokens[: i + 1]
    return tokens


def _ptd_entries(path: str) -> Dict[str, bytes]:
    with open(path, "rb") as f:
        return {k: b for k, b in deserialize_ptd(f.read(), path).named_data.items()}


def test_swappable_adapter_files_hold_the_dtype_and_the_foundation_is_unchanged(swappable):
    _, swap_dirs, dirs = swappable
    with open(os.path.join(dirs["fp32"], "foundation.ptd"), "rb") as f:
        foundation = f.read()
    for dtype, out in swap_dirs.items():
        with open(os.path.join(out, "foundation.ptd"), "rb") as f:
            assert f.read() == foundation, dtype
    for adapter in ("a", "c"):
        sizes = {}
        for dtype, out in swap_dirs.items():
            entries = _ptd_entries(os.path.join(out, f"{adapter}.ptd"))
            sizes[dtype] = sum(len(b.data) for k, b in entries.items() if not k.endswith(".scales"))
            scales = sum(len(b.data) for k, b in entries.items() if k.endswith(".scales"))
            types = {b.tensor_layout.scalar_type for k, b in entries.items() if not k.endswith(".scales")}
            assert types == {fc_format_of(dtype).scalar_type}, (dtype, types)
            assert (scales > 0) == (dtype == "int8"), dtype
        print(f"swappable adapter {adapter}: entry bytes {sizes} (int8 without its scales)")
        assert sizes["fp16"] * 2 == sizes["fp32"] and sizes["int8"] * 4 == sizes["fp32"]


def test_swappable_logits_swaps_and_a_file_of_another_dtype_refused(swappable):
    files, swap_dirs, _ = swappable
    ids = torch.from_numpy(PROMPT).view(1, -1)
    got: Dict[str, Dict[str, torch.Tensor]] = {}
    programs = {}
    for dtype, out in swap_dirs.items():
        foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
        program = Program.load(os.path.join(out, "lora.pte"), [foundation, DataFile.open(os.path.join(out, "a.ptd"))])
        got[dtype] = {}
        for adapter in ("a", "c"):
            if adapter != "a":
                program.bind_adapter(DataFile.open(os.path.join(out, f"{adapter}.ptd")))
            (logits,) = program.method("forward").execute(PROMPT.reshape(1, -1))
            got[dtype][adapter] = torch.from_numpy(np.asarray(logits)).reshape(len(PROMPT), hf_tiny.VOCAB)
            tokens = program.method("forward_cached").generate(PROMPT, NEW_TOKENS).tokens
            want_tokens = _until_end(_greedy(_model(files, adapter, dtype, swappable=True), NEW_TOKENS), out)
            assert tokens == want_tokens, (dtype, adapter)
        programs[dtype] = program
    for adapter in ("a", "c"):
        fp32 = got["fp32"][adapter]
        fp16_err = float((got["fp16"][adapter] - fp32).abs().max())
        cos = torch.nn.functional.cosine_similarity(got["int8"][adapter], fp32, dim=-1)
        print(f"swappable {adapter}: max |fp16 - fp32| {fp16_err:.3g}; int8 cosine {[round(float(c), 6) for c in cos]}")
        assert fp16_err <= 1e-2 and bool((cos >= 0.999).all())
        for dtype in ("fp16", "int8"):
            with torch.no_grad():
                want = _model(files, adapter, dtype, swappable=True)(input_ids=ids).logits[0]
            err = float((got[dtype][adapter] - want).abs().max())
            print(f"swappable {adapter} {dtype}: max |runtime - rounded eager| {err:.3g}")
            assert err <= 1e-4 * max(1.0, float(want.abs().max()))
    for dtype, other in (("fp16", "fp32"), ("int8", "fp16"), ("fp32", "int8")):
        with pytest.raises(Exception) as e:
            programs[dtype].bind_adapter(DataFile.open(os.path.join(swap_dirs[other], "a.ptd")))
        message = str(e.value)
        print(message)
        assert "\n" not in message and "must be exported with the same --adapter-dtype" in message, message


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--adapter-dtype", "bf16"], "adapter_dtype must be one of ('fp32', 'fp16', 'int8'), got 'bf16' (--adapter-dtype)"),
        (["--adapter-dtype", "int4"], "got 'int4' (--adapter-dtype)"),
    ],
)
def test_a_bad_adapter_dtype_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert export_lora.main(["--out", str(out)] + argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("export_lora: error: ") and message in err, err
    assert not out.exists() or not os.listdir(out)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
