"""An int8 foundation (export_lora --quantize int8: int8 in blocks of 32, qb8w) end to end through
the XNNPACK delegate's int8 kernels: the in-repo tiny Llama (tied embedding / lm_head) with two PEFT adapters.

- 32 greedy tokens from //tools:generate and from the Python runtime equal a torch model that runs
  the dequantized int8 weights with the same block-wise activation quantization (exir/quantize.py's
  int8_reference over transformers + PEFT), for both adapters and the bare foundation;
- the runtime's logits equal that reference's to float rounding; their cosine against the fp32
  model is >= 0.999 at every position (printed) for the tiny Llama at transformers' default
  initializer (std 0.02); the std 0.2 one (spiky weights, for varied greedy tokens) is printed and
  held to >= 0.997 (its lowest position measures about 0.9975);
- a second program over the same foundation packs nothing and fetches no foundation key again;
- a --swappable int8 export generates each adapter as its reference, swapped on one program;
- a flipped byte in a scales entry of foundation.ptd is a one-line error naming the key.
"""

import os
from typing import List, Optional

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir._serialize.ptd import DEFAULT_TENSOR_ALIGNMENT
from edgeshare.exir.quantize import QB8W_SCALES_SUFFIX, QB8W_SUFFIX, int8_reference
from edgeshare.extension.python import DataFile, Program, weights_cache_stats
from edgeshare.models import hf_tiny
from edgeshare.testing.generate_binary import generate_programs
from edgeshare.tools import export_lora
from edgeshare.tools import quantized_run_checks as checks

MAX_SEQ_LEN = 48
NEW_TOKENS = 32
INIT_STD = 0.2
PROMPT = np.random.default_rng(1).integers(0, hf_tiny.VOCAB, size=(6,), dtype=np.int64)
STEMS = (("a", "a"), ("b", "b"), ("foundation", None))


def _export(root: str, init_std: Optional[float], adapters) -> hf_tiny.TinyLoraFiles:
    files = hf_tiny.save_tiny_lora("llama", os.path.join(root, "in"), initializer_range=init_std)
    argv = ["--hf-model", files.model_dir, "--out", os.path.join(root, "out"), "--max-seq-len", str(MAX_SEQ_LEN)]
    for name in adapters:
        argv += ["--adapter", f"{name}={files.adapter_dirs[name]}"]
    assert export_lora.main(argv + ["--quantize", "int8"]) == 0
    return files


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("int8"))
    files = _export(root, INIT_STD, ("a", "b"))
    prompt_path = os.path.join(root, "prompt.npy")
    np.save(prompt_path, PROMPT)
    return files, os.path.join(root, "out"), prompt_path


def _cosines(files: hf_tiny.TinyLoraFiles, out: str, program: Program, adapter: Optional[str]) -> torch.Tensor:
    """Per position: the runtime's logits against the fp32 model's; asserts they equal the int8
    reference's to float rounding."""
    ids = torch.from_numpy(PROMPT).view(1, -1)
    (logits,) = program.method("forward").execute(ids.numpy())
    with torch.no_grad():
        reference = _model(files, adapter, int8=True)(input_ids=ids).logits[0].numpy()
        fp32 = _model(files, adapter, int8=False)(input_ids=ids).logits[0]
    logits = np.asarray(logits).reshape(reference.shape)
    scale = float(np.abs(reference).max())
    err = float(np.abs(logits - reference).max())
    cos = torch.nn.functional.cosine_similarity(torch.from_numpy(logits), fp32, dim=-1)
    print(
        f"{os.path.basename(os.path.dirname(out))} {adapter or 'foundation'}: max |runtime - int8 reference| "
        f"{err:.3g} (max |logit| {scale:.3g}); cosine vs fp32 per position {[round(float(c), 6) for c in cos]}"
    )
    assert err <= 1e-4 * max(1.0, scale)
    return cos


def _model(files: hf_tiny.TinyLoraFiles, adapter: Optional[str], int8: bool) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_pretrained(files.model_dir, local_files_only=True).eval()
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, files.adapter_dirs[adapter]).eval()
    return int8_reference(model) if int8 else model


def _reference_tokens(files: hf_tiny.TinyLoraFiles, adapter: Optional[str]) -> List[int]:
    return checks.reference_tokens(_model(files, adapter, int8=True), PROMPT, NEW_TOKENS)


def test_foundation_ptd_holds_every_linear_and_the_tied_embedding_as_int8_once(exported):
    _, out, _ = exported
    path = os.path.join(out, "foundation.ptd")
    with open(path, "rb") as f:
        ptd = deserialize_ptd(f.read(), "foundation.ptd")
    quantized = [k for k in ptd.named_data if k.endswith(QB8W_SUFFIX)]
    # 4 attention and 3 MLP projections in each of the 2 layers, and the tied embedding / lm_head:
    # one int8 entry serves the gather and the matmul, and no float copy of the table is left.
    assert len(quantized) == 7 * 2 + 1, quantized
    for key in quantized:
        assert key[: -len(QB8W_SUFFIX)] + QB8W_SCALES_SUFFIX in ptd.named_data
        assert ptd.named_data[key].tensor_layout.scalar_type == 1
    table = [k for k in quantized if list(ptd.named_data[k].tensor_layout.sizes) == [hf_tiny.VOCAB, hf_tiny.HIDDEN]]
    assert len(table) == 1, table
    floats = {k: b for k, b in ptd.named_data.items() if "qb8w" not in k}
    assert all(b.tensor_layout.scalar_type == 6 for b in floats.values())
    assert not any(list(b.tensor_layout.sizes) == [hf_tiny.VOCAB, hf_tiny.HIDDEN] for b in floats.values())
    # The file is its int8 weights, their scales and the small float tensors (norms), each entry
    # padded to the file's tensor alignment, and a header.
    int8_bytes = sum(len(ptd.named_data[k].data) for k in quantized)
    scale_bytes = sum(len(ptd.named_data[k + ".scales"].data) for k in quantized)
    float_bytes = sum(len(b.data) for b in floats.values())
    payload = int8_bytes + scale_bytes + float_bytes
    size = os.path.getsize(path)
    print(f"foundation.ptd {size} bytes: int8 {int8_bytes}, scales {scale_bytes}, other float {float_bytes}")
    assert float_bytes < 0.05 * int8_bytes
    assert payload <= size <= payload + (len(ptd.named_data) + 1) * DEFAULT_TENSOR_ALIGNMENT


def test_generate_tokens_equal_the_int8_reference_for_two_adapters_and_the_foundation(exported, tmp_path):
    files, out, prompt_path = exported
    got = generate_programs(out, [stem for stem, _ in STEMS], prompt_path, NEW_TOKENS, str(tmp_path / "g.json"))
    for stem, adapter in STEMS:
        assert got[stem]["tokens"] == _reference_tokens(files, adapter), stem
    assert len(set(got["foundation"]["tokens"])) > NEW_TOKENS // 2
    assert got["a"]["tokens"] != got["foundation"]["tokens"] != got["b"]["tokens"]


def test_python_tokens_logits_and_sharing(exported):
    files, out, _ = exported
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    before = weights_cache_stats()
    programs = {stem: Program.load(os.path.join(out, f"{stem}.pte"), [foundation]) for stem, _ in STEMS}
    loaded = weights_cache_stats()
    for stem, adapter in STEMS:
        got = programs[stem].method("forward_cached").generate(PROMPT, NEW_TOKENS)
        assert got.tokens == _reference_tokens(files, adapter), stem

    # Logits of every position: equal to the int8 reference to float rounding, close to fp32.
    for stem, adapter in STEMS:
        assert bool((_cosines(files, out, programs[stem], adapter) >= 0.997).all()), stem

    # Every foundation key was fetched once for the three programs; a second program packs nothing.
    fetched = loaded["named_data_fetches"]
    quantized = [k for k in fetched if k.endswith(QB8W_SUFFIX) or k.endswith(QB8W_SCALES_SUFFIX)]
    assert quantized and all(fetched[k] - before["named_data_fetches"].get(k, 0) == 1 for k in quantized)
    again = Program.load(os.path.join(out, "foundation.pte"), [foundation])
    after = weights_cache_stats()
    assert after["packs"] == loaded["packs"] and after["bytes_fetched"] == loaded["bytes_fetched"]
    assert after["cache_hits"] > loaded["cache_hits"]
    del again


def test_logit_cosine_vs_fp32_is_at_least_0_999_at_every_position(tmp_path):
    files = _export(str(tmp_path), None, ("a",))
    out = str(tmp_path / "out")
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    for stem, adapter in (("a", "a"), ("foundation", None)):
        program = Program.load(os.path.join(out, f"{stem}.pte"), [foundation])
        assert bool((_cosines(files, out, program, adapter) >= 0.999).all()), stem


def test_swappable_int8_program_generates_each_adapter_as_the_reference(exported, tmp_path):
    files, _, _ = exported
    # "c": adapter "a"'s structure with other weights, so both swap on one program.
    files.adapter_dirs["c"] = hf_tiny.save_twin_adapter(
        "llama", os.path.dirname(files.model_dir), "c", initializer_range=INIT_STD
    )
    out = str(tmp_path / "swap")
    argv = ["--hf-model", files.model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN), "--swappable"]
    argv += ["--quantize", "int8"] + [f"--adapter={n}={files.adapter_dirs[n]}" for n in ("a", "c")]
    assert export_lora.main(argv) == 0
    foundation = DataFile.open(os.path.join(out, "foundation.ptd"))
    program = Program.load(os.path.join(out, "lora.pte"), [foundation, DataFile.open(os.path.join(out, "a.ptd"))])
    method = program.method("forward_cached")
    assert method.generate(PROMPT, NEW_TOKENS).tokens == _reference_tokens(files, "a")
    program.bind_adapter(DataFile.open(os.path.join(out, "c.ptd")))
    assert method.generate(PROMPT, NEW_TOKENS).tokens == _reference_tokens(files, "c")


def test_a_flipped_scale_byte_is_an_error_naming_the_key(exported, tmp_path):
    _, out, prompt_path = exported
    key, line = checks.flipped_scale_byte_error(out, QB8W_SCALES_SUFFIX, prompt_path, str(tmp_path))
    assert line.startswith("generate: error: ") and f"'{key}'" in line, line


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
