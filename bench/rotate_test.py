"""The rotated copy of a tiny random Llama computes what the original computes, bare and with an
adapter on every projection, and its weights are not the original's."""

import json
import os
import sys

import pytest
import torch
from edgeshare.bench._rotate import RotationError, random_orthogonal, rotate_adapter, rotate_model
from edgeshare.exir.hf import load_hf_model, load_peft_adapter
from edgeshare.models.hf_tiny import make_tiny_model, save_peft_adapter
from safetensors.torch import load_file

_SEED = 7
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("rotate")
    model = make_tiny_model("llama", seed=3, initializer_range=0.2)
    original, adapter = str(root / "hf"), str(root / "adapter")
    model.save_pretrained(original)
    save_peft_adapter(model, adapter, _PROJECTIONS, rank=4, alpha=8.0, seed=11)
    rotated, rotated_adapter = str(root / "hf_rotated"), str(root / "adapter_rotated")
    rotate_model(original, rotated, _SEED)
    rotate_adapter(adapter, original, rotated_adapter, _SEED)
    return {"original": original, "adapter": adapter, "rotated": rotated, "rotated_adapter": rotated_adapter}


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        return model(input_ids=ids).logits


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    # float32 rounding of weights moved through a float64 product: a few ulps of the logits' scale.
    scale = float(a.abs().max())
    assert float((a - b).abs().max()) <= 2e-5 * scale + 1e-6, float((a - b).abs().max())


def test_q_is_orthogonal_and_seeded():
    q = random_orthogonal(16, 1)
    assert torch.allclose(q @ q.T, torch.eye(16, dtype=torch.float64), atol=1e-12)
    assert torch.equal(q, random_orthogonal(16, 1))
    assert not torch.equal(q, random_orthogonal(16, 2))


def test_rotated_model_keeps_the_logits(folders):
    _close(_logits(load_hf_model(folders["original"])), _logits(load_hf_model(folders["rotated"])))


def test_rotated_adapter_keeps_the_logits(folders):
    ours = load_peft_adapter(load_hf_model(folders["original"]), "a", folders["adapter"])
    theirs = load_peft_adapter(load_hf_model(folders["rotated"]), "a", folders["rotated_adapter"])
    bare = _logits(load_hf_model(folders["original"]))
    adapted = _logits(ours)
    assert float((adapted - bare).abs().max()) > 1e-2  # the adapter changes the output
    _close(adapted, _logits(theirs))


def test_weights_move_norms_become_one_and_lm_head_is_untied(folders):
    before = load_file(os.path.join(folders["original"], "model.safetensors"))
    after = load_file(os.path.join(folders["rotated"], "model.safetensors"))
    for key in (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.embed_tokens.weight",
    ):
        assert before[key].shape == after[key].shape
        assert float((before[key] - after[key]).abs().max()) > 1e-3, key
    assert torch.equal(
        after["model.layers.0.input_layernorm.weight"], torch.ones_like(after["model.layers.0.input_layernorm.weight"])
    )
    assert torch.equal(after["model.norm.weight"], torch.ones_like(after["model.norm.weight"]))
    assert not torch.equal(after["lm_head.weight"], after["model.embed_tokens.weight"])
    with open(os.path.join(folders["rotated"], "config.json")) as f:
        assert json.load(f)["tie_word_embeddings"] is False
    a_before = load_file(os.path.join(folders["adapter"], "adapter_model.safetensors"))
    a_after = load_file(os.path.join(folders["rotated_adapter"], "adapter_model.safetensors"))
    key = next(k for k in a_before if "q_proj.lora_A" in k)
    assert float((a_before[key] - a_after[key]).abs().max()) > 1e-3


def test_other_families_are_refused(tmp_path):
    make_tiny_model("mistral").save_pretrained(str(tmp_path / "m"))
    with pytest.raises(RotationError, match="model_type 'mistral' is not llama"):
        rotate_model(str(tmp_path / "m"), str(tmp_path / "out"), 0)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
