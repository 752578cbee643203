"""export_hf_lora through to_edge, to_backend and to_executorch, with a dynamic token dim.

Needs the dynamic-shape emitter (symbolic sizes carried into the program). Checks what the files
hold, not how they run (tools/export_lora_hf_run_test.py runs them):
  - per adapter a .pte holding only its LoRA weights, the bare foundation's .pte holding none;
  - foundation.ptd keyed by the bare model's names, the tied lm_head stored once (under the
    embedding's key), byte-identical whichever adapters are exported;
  - a progress line per step;
  - every family's adapter program lowers and serializes.
"""

import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import FoundationDataPolicy, export_hf_lora, load_hf_model, load_peft_adapter, to_edge
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.data_policy import foundation_tensors
from edgeshare.exir.hf import CausalLMLogits, token_dynamic_shapes
from edgeshare.exir.lora import export_method
from edgeshare.exir.tensor_layout import tensor_bytes
from edgeshare.models import hf_tiny

MAX = 16


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return hf_tiny.save_tiny_lora("llama", str(tmp_path_factory.mktemp("llama")))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _big_foundation_tensors(base):
    """The foundation tensors large enough that their bytes cannot occur by chance (not norms)."""
    return {k: tensor_bytes(t) for k, t in foundation_tensors(base).items() if t.numel() >= 256}


def _lora_tensors(model):
    return {n: tensor_bytes(p) for n, p in model.named_parameters() if ".lora_A." in n or ".lora_B." in n}


@pytest.fixture(scope="module")
def exported(llama, tmp_path_factory):
    lines = []
    out = str(tmp_path_factory.mktemp("out"))
    result = export_hf_lora(
        llama.model_dir, llama.adapter_dirs, out, MAX, partitioner=XnnpackPartitioner(), progress=lines.append
    )
    return result, out, lines


def test_export_writes_adapter_and_foundation_programs_over_one_ptd(llama, exported):
    result, out, lines = exported
    assert sorted(os.listdir(out)) == ["a.pte", "b.pte", "foundation.ptd", "foundation.pte"]
    assert result.foundation_program == os.path.join(out, "foundation.pte")
    base = load_hf_model(llama.model_dir)
    names = foundation_tensors(base)
    assert "model.embed_tokens.weight" in result.shared_keys and "lm_head.weight" not in result.shared_keys
    assert set(result.shared_keys) <= set(names)
    # Every large foundation tensor (the tied embedding/lm_head among them) is in foundation.ptd
    # once and in no program.
    assert "model.embed_tokens.weight" in _big_foundation_tensors(base)
    files = {f: _read(os.path.join(out, f)) for f in os.listdir(out)}
    for key, raw in _big_foundation_tensors(base).items():
        counts = {f: data.count(raw) for f, data in files.items()}
        assert counts == {"a.pte": 0, "b.pte": 0, "foundation.pte": 0, "foundation.ptd": 1}, (key, counts)
    for name in ("a", "b"):
        pte = deserialize_pte(files[f"{name}.pte"], f"{name}.pte")
        # The KV-cache method beside "forward" (hf_cache), sharing the adapter's bytes (stored once).
        assert [p.name for p in pte.program.executionPlans] == [b"forward", b"forward_cached"]
        lora = _lora_tensors(load_peft_adapter(base, name, llama.adapter_dirs[name]))
        assert all(files[f"{name}.pte"].count(raw) == 1 for raw in lora.values())
        assert sorted(result.adapter_keys[name]) == sorted(f"forward/model.{n}" for n in lora)
        assert result.adapter_bytes[name] == sum(len(raw) for raw in lora.values())
    steps = [line.split(" ")[0] for line in lines]
    assert steps[:3] == ["loading", "loading", "loading"]
    # The foundation's two methods are exported one by one; each adapter's are the foundation's with
    # its low-rank products (exir/_derive.py); each program's methods are lowered together.
    assert steps.count("exporting") == 2 and steps.count("lowering") == 3 and steps.count("writing") == 4
    assert sum("the foundation's edge programs with its low-rank products" in line for line in lines) == 2


def test_foundation_ptd_is_byte_identical_whichever_adapters_are_exported(llama, exported, tmp_path):
    first, _, _ = exported
    only_b = {"only_b": llama.adapter_dirs["b"]}
    second = export_hf_lora(llama.model_dir, only_b, str(tmp_path / "b"), MAX, partitioner=XnnpackPartitioner())
    assert _read(first.foundation_path) == _read(second.foundation_path)
    ptd = deserialize_ptd(_read(first.foundation_path))
    assert list(ptd.named_data) == first.shared_keys


@pytest.mark.parametrize("family", sorted(hf_tiny.FAMILIES))
def test_family_adapter_program_lowers_with_a_dynamic_token_dim(family, tmp_path):
    files = hf_tiny.save_tiny_lora(family, str(tmp_path))
    base = load_hf_model(files.model_dir)
    model = CausalLMLogits(load_peft_adapter(base, "b", files.adapter_dirs["b"]))
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 7), generator=torch.Generator().manual_seed(0))
    ep = export_method(model, (ids,), f"{family} b", token_dynamic_shapes(MAX))
    edge = to_edge(ep, data_policy=FoundationDataPolicy(base))
    et = edge.to_backend(XnnpackPartitioner()).to_executorch()
    assert all(raw in et.buffer for raw in _lora_tensors(model).values())
    assert not any(raw in et.buffer for raw in _big_foundation_tensors(base).values())
    assert set(deserialize_ptd(et.data_files["foundation"]).named_data) <= set(foundation_tensors(base))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
