"""PEFT LoRA adapters on a tiny Hugging Face Llama (made from a config: nothing comes from the hub).

The identity policy places every foundation weight under the bare model's own name however PEFT
renames it ("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"), keeps lora_A /
lora_B with the adapter, and gives the lm_head tied to the embedding one key.
"""

import copy
from typing import Dict, Optional, Tuple

import peft
import pytest
import torch
import transformers
from edgeshare.exir import FoundationDataPolicy, to_edge
from edgeshare.exir.data_policy import DATA_KEY_META, EXTERNAL_TAG_META, foundation_tensors
from edgeshare.exir.graph import lifted_inputs
from edgeshare.exir.lora import _check_shares
from torch import nn


class Logits(nn.Module):
    """The causal LM as a plain function of token ids (no KV cache)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.model(input_ids=ids, use_cache=False).logits


def _tiny_llama() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _peft(base: nn.Module, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    # get_peft_model wraps the model it is given in place: give it a copy.
    return peft.get_peft_model(copy.deepcopy(base), config).eval()


def _placements(model: nn.Module, policy: FoundationDataPolicy) -> Dict[str, Tuple[str, Optional[str]]]:
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    ep = torch.export.export(Logits(model), (ids,), strict=False)
    edge = to_edge(ep, data_policy=policy).exported_program()
    nodes = {n.name: n for n in edge.graph.nodes if n.op == "placeholder"}
    return {
        lifted.fqn: (nodes[name].meta[DATA_KEY_META], nodes[name].meta[EXTERNAL_TAG_META])
        for name, lifted in lifted_inputs(edge).items()
        if DATA_KEY_META in nodes[name].meta
    }


def test_peft_llama_shares_every_base_weight_under_the_foundation_name():
    base = _tiny_llama()
    assert base.lm_head.weight is base.model.embed_tokens.weight
    policy = FoundationDataPolicy(base)
    adapter = _peft(base, 1)
    _check_shares("chat", adapter, base, policy)  # no warning, no error
    placements = _placements(adapter, policy)
    shared = {fqn: key for fqn, (key, tag) in placements.items() if tag == "foundation"}
    own = {fqn: key for fqn, (key, tag) in placements.items() if tag is None}
    assert shared and own
    assert all("lora_" in fqn for fqn in own), own
    assert all(key == f"forward/{fqn}" for fqn, key in own.items())
    assert sorted(own) == sorted(
        f"model.base_model.model.model.layers.{i}.self_attn.{p}_proj.lora_{ab}.default.weight"
        for i in (0, 1)
        for p in ("q", "v")
        for ab in ("A", "B")
    )
    names = foundation_tensors(base)
    assert set(shared.values()) <= set(names)
    assert "model.layers.0.self_attn.q_proj.weight" in shared.values()
    assert "model.embed_tokens.weight" in shared.values() and "lm_head.weight" not in shared.values()
    tensors = foundation_tensors(Logits(adapter))
    for fqn, key in shared.items():
        assert tensors[fqn].dtype == names[key].dtype and torch.equal(tensors[fqn], names[key]), fqn


def test_two_peft_adapters_place_the_foundation_identically():
    base = _tiny_llama()
    policy = FoundationDataPolicy(base)
    first = _placements(_peft(base, 1), policy)
    second = _placements(_peft(base, 2), policy)
    assert {k for k, t in first.values() if t} == {k for k, t in second.values() if t}


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
