"""Each tiny Hugging Face family with its two PEFT adapters, exported with a dynamic token dim.

What to_edge starts from, checked without the emitter: torch.export with T in 1..MAX, decomposed
with edge_decompositions, equals eager at T=1, T=5 and T=MAX; and the identity policy sends every
base weight (PEFT-renamed, Conv1D, fused qkv) to the foundation under the bare model's name and
keeps exactly the LoRA weights with the adapter.
"""

import pytest
import torch
from edgeshare.exir import CausalLMLogits, FoundationDataPolicy, load_hf_model, load_peft_adapter
from edgeshare.exir.data_policy import foundation_tensors
from edgeshare.exir.export import edge_decompositions
from edgeshare.exir.graph import lifted_inputs, lifted_tensor
from edgeshare.exir.hf import token_dynamic_shapes
from edgeshare.exir.lora import export_method
from edgeshare.models import hf_tiny
from torch.export.graph_signature import InputKind

MAX = 16
TIED = {"llama", "qwen2", "gemma", "gpt2"}


def _ids(t: int) -> torch.Tensor:
    return torch.randint(0, hf_tiny.VOCAB, (1, t), generator=torch.Generator().manual_seed(100 + t))


def _export(model: torch.nn.Module, what: str) -> torch.export.ExportedProgram:
    return export_method(CausalLMLogits(model), (_ids(7),), what, token_dynamic_shapes(MAX))


def _placements(ep: torch.export.ExportedProgram, policy: FoundationDataPolicy):
    own, shared = [], {}
    for lifted in lifted_inputs(ep).values():
        if lifted.kind == InputKind.CONSTANT_TENSOR:
            continue  # to_edge keeps constants with the program without asking the policy
        tensor = lifted_tensor(ep, lifted.fqn)
        placement = policy.place("forward", lifted.fqn, tensor)
        if placement.external_tag is None:
            own.append(lifted.fqn)
        else:
            shared[lifted.fqn] = placement.key
    return own, shared


@pytest.mark.parametrize("family", sorted(hf_tiny.FAMILIES))
def test_family_exports_with_a_dynamic_token_dim_and_matches_eager(family, tmp_path):
    files = hf_tiny.save_tiny_lora(family, str(tmp_path))
    base = load_hf_model(files.model_dir)
    models = {"foundation": base}
    for name, path in files.adapter_dirs.items():
        models[name] = load_peft_adapter(base, name, path)
    policy = FoundationDataPolicy(base)
    names = foundation_tensors(base)
    for name, model in models.items():
        ep = _export(model, f"{family} {name}")
        (bounds,) = ep.range_constraints.values()
        assert (int(bounds.lower), int(bounds.upper)) == (1, MAX), (name, bounds)
        decomposed = ep.run_decompositions(edge_decompositions())
        eager = CausalLMLogits(model).eval()
        for t in (1, 5, MAX):
            x = _ids(t)
            with torch.no_grad():
                want = eager(x)
            got = decomposed.module()(x)
            assert got.shape == (1, t, hf_tiny.VOCAB)
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (family, name, t)
        own, shared = _placements(decomposed, policy)
        if name == "foundation":
            assert own == [], own
        else:
            assert own and all(".lora_A." in fqn or ".lora_B." in fqn for fqn in own), own
            spec = hf_tiny.FAMILIES[family].adapters[name]
            assert {fqn.split(".lora_")[0].rsplit(".", 1)[-1] for fqn in own} == set(spec.target_modules)
        assert set(shared.values()) <= set(names)
        if family in TIED:
            assert "lm_head.weight" not in shared.values()  # the tied head reads the embedding's key


def test_fused_and_conv1d_adapters_change_the_logits(tmp_path):
    for family in ("phi3", "gpt2"):
        files = hf_tiny.save_tiny_lora(family, str(tmp_path / family))
        base = load_hf_model(files.model_dir)
        with torch.no_grad():
            plain = CausalLMLogits(base)(_ids(4))
            for name, path in files.adapter_dirs.items():
                tuned = CausalLMLogits(load_peft_adapter(base, name, path))(_ids(4))
                assert not torch.allclose(plain, tuned, atol=1e-3), (family, name)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
