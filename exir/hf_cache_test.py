"""CachedCausalLM: the KV-cache method of --hf-model exports.

Eager: for each tiny family (with and without a PEFT adapter), a prefill then single-token calls
equal the uncached logits of the whole sequence, sliding windows shorter than the cache included;
a half-precision cache stays within 1e-2; the cache's shape comes from the config (GQA heads,
head_dim, GPT-2's n_head); layer kinds other than full and sliding attention are refused by name.
Exported (//testing:generation_files): each program has "forward" and "forward_cached", the cache
is state holding no bytes, and each adapter weight's bytes are in the .pte once although both
methods use it.
"""

import copy
import os
import tempfile

import numpy as np
import peft
import pytest
import torch
import transformers
from edgeshare.exir._serialize import deserialize_pte
from edgeshare.exir.errors import UnsupportedModelError
from edgeshare.exir.hf_cache import CACHED_METHOD, CachedCausalLM, kv_cache_shape
from edgeshare.models import hf_tiny
from edgeshare.schema import program_generated as fb
from safetensors.numpy import load_file

MAX = 16


def _peft(family: str, base: torch.nn.Module) -> torch.nn.Module:
    spec = hf_tiny.FAMILIES[family].adapters["a"]
    config = peft.LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        target_modules=list(spec.target_modules),
        fan_in_fan_out=hf_tiny.FAMILIES[family].fan_in_fan_out,
    )
    model = peft.get_peft_model(copy.deepcopy(base), config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("family", sorted(hf_tiny.FAMILIES))
def test_prefill_then_single_tokens_equal_the_uncached_logits(family):
    base = hf_tiny.make_tiny_model(family, initializer_range=0.2)
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 9), generator=torch.Generator().manual_seed(3))
    for model in (base, _peft(family, base)):
        cached = CachedCausalLM(model, MAX, all_logits=True)
        with torch.no_grad():
            full = model(input_ids=ids, use_cache=False).logits
            parts = [cached(ids[:, :6], torch.tensor(0))]
            parts += [cached(ids[:, i : i + 1], torch.tensor(i)) for i in range(6, 9)]
        torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
        cached.reset()
        assert all(not b.any() for b in cached.buffers(recurse=False))


@pytest.mark.parametrize(
    "family, kv_heads, head_dim",
    [("llama", 2, 16), ("gemma", 2, 16), ("phi3", 2, 16), ("gpt2", 4, 16)],
)
def test_the_cache_shape_comes_from_the_config(family, kv_heads, head_dim):
    shape = kv_cache_shape(hf_tiny.tiny_config(family), MAX)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (2, kv_heads, head_dim)
    cached = CachedCausalLM(hf_tiny.make_tiny_model(family), MAX)
    assert cached.key_cache_1.shape == (1, kv_heads, MAX, head_dim)


def test_a_config_head_dim_wins_over_hidden_by_heads():
    config = transformers.GemmaConfig(**{**hf_tiny.tiny_config("gemma").to_dict(), "head_dim": 32})
    assert kv_cache_shape(config, MAX).head_dim == 32


def _prefill_then_steps(model, ids, split, max_seq_len, kv_dtype=None):
    cached = CachedCausalLM(model, max_seq_len, kv_dtype, all_logits=True)
    with torch.no_grad():
        parts = [cached(ids[:, :split], torch.tensor(0))]
        parts += [cached(ids[:, i : i + 1], torch.tensor(i)) for i in range(split, ids.shape[1])]
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize(
    "family, settings",
    [
        ("mistral", {"sliding_window": 5}),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}),
    ],
)
def test_a_sliding_window_shorter_than_the_cache_masks_what_it_does_not_see(family, settings):
    config = type(hf_tiny.tiny_config(family))(**{**hf_tiny.tiny_config(family).to_dict(), **settings})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(_prefill_then_steps(model, ids, 7, MAX), full, atol=1e-5, rtol=1e-5)


def test_by_default_only_the_last_position_has_logits():
    model = hf_tiny.make_tiny_model("llama", initializer_range=0.2)
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 7), generator=torch.Generator().manual_seed(6))
    cached = CachedCausalLM(model, MAX)
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        prefill = cached(ids[:, :5], torch.tensor(0))
        steps = [cached(ids[:, i : i + 1], torch.tensor(i)) for i in (5, 6)]
    assert prefill.shape == (1, 1, hf_tiny.VOCAB)
    torch.testing.assert_close(torch.cat([prefill] + steps, dim=1), full[:, 4:], atol=1e-5, rtol=1e-5)


def test_transformers_own_attention_gives_the_same_logits():
    model = hf_tiny.make_tiny_model("qwen2", initializer_range=0.2)
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 9), generator=torch.Generator().manual_seed(8))
    logits = []
    for own in (True, False):
        cached = CachedCausalLM(model, MAX, all_logits=True, own_attention=own)
        with torch.no_grad():
            parts = [cached(ids[:, :6], torch.tensor(0))] + [cached(ids[:, i : i + 1], torch.tensor(i)) for i in (6, 7, 8)]
        logits.append(torch.cat(parts, dim=1))
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=1e-5)


def test_layer_kinds_other_than_full_and_sliding_attention_are_refused():
    config = hf_tiny.tiny_config("qwen2")
    config.layer_types = ["linear_attention", "full_attention"]
    with pytest.raises(UnsupportedModelError, match="'qwen2' has linear_attention layers"):
        kv_cache_shape(config, MAX)


def test_a_half_precision_cache_stays_within_1e_2_of_float():
    model = hf_tiny.make_tiny_model("llama", initializer_range=0.2)
    ids = torch.randint(0, hf_tiny.VOCAB, (1, 10), generator=torch.Generator().manual_seed(4))
    exact = _prefill_then_steps(model, ids, 6, MAX)
    half = _prefill_then_steps(model, ids, 6, MAX, torch.float16)
    assert CachedCausalLM(model, MAX, torch.float16).key_cache_0.dtype == torch.float16
    assert 0 < (half - exact).abs().max() <= 1e-2


FILES = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])


def _plans(path: str):
    with open(path, "rb") as f:
        buffer = f.read()
    offset = int.from_bytes(buffer[16:24], "little")
    program = fb.ProgramT.InitFromObj(fb.Program.GetRootAs(buffer, offset))
    return {plan.name.decode(): plan for plan in program.executionPlans}, buffer


@pytest.mark.parametrize("stem", ["a", "b", "foundation"])
def test_each_program_has_both_methods_and_the_cache_is_state_without_bytes(stem):
    plans, _ = _plans(os.path.join(FILES, f"{stem}.pte"))
    assert sorted(plans) == ["forward", CACHED_METHOD]
    assert len(plans["forward"].state or []) == 0
    state = plans[CACHED_METHOD].state
    assert len(state) == 4  # keys and values of 2 layers
    assert all(entry.initialSegment == -1 for entry in state)
    assert len(plans[CACHED_METHOD].inputs) == 2 and len(plans[CACHED_METHOD].outputs) == 1


def test_adapter_weights_are_stored_once_for_both_methods():
    with tempfile.TemporaryDirectory() as tmp:
        # The fixture's adapters, made again (seeded): their bytes to look for.
        files = hf_tiny.save_tiny_lora("llama", tmp, initializer_range=0.2)
        for name in ("a", "b"):
            path = os.path.join(FILES, f"{name}.pte")
            _, pte = _plans(path)
            weights = load_file(os.path.join(files.adapter_dirs[name], "adapter_model.safetensors"))
            counts = {key: pte.count(value.astype(np.float32).tobytes()) for key, value in weights.items()}
            assert set(counts.values()) == {1}, (name, counts)
            keys = list(deserialize_pte(pte, path).named_data)
            assert any(k.startswith(f"{CACHED_METHOD}/") for k in keys) and any(k.startswith("forward/") for k in keys)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
