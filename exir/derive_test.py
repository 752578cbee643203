"""An adapter structure's edge programs derived from the foundation's (exir/_derive.py) are the ones
tracing the adapter model gives: the same ops, weights and keys, equal logits at two lengths and
equal greedy tokens through the KV cache, and byte-identical files; what it cannot reproduce is
traced instead."""

import pathlib

import peft
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import _derive
from edgeshare.exir._pipeline import Lowerer
from edgeshare.exir.data_policy import DATA_KEY_META, EXTERNAL_TAG_META, FoundationDataPolicy
from edgeshare.exir.hf import (
    CausalLMLogits,
    export_hf_lora,
    load_hf_model,
    load_peft_adapter,
    token_dynamic_shapes,
)
from edgeshare.exir.hf_cache import kv_cache_method
from edgeshare.exir.lora import export_lora
from edgeshare.models import hf_tiny, make_foundation, with_lora
from edgeshare.models.lora import LinearWithBiasDelta, shared_copy

MAX = 16


def _ids(t: int) -> torch.Tensor:
    return torch.randint(0, hf_tiny.VOCAB, (1, t), generator=torch.Generator().manual_seed(200 + t))


def _files(folder: pathlib.Path) -> dict:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    files = hf_tiny.save_tiny_lora("llama", str(tmp_path_factory.mktemp("llama")))
    base = load_hf_model(files.model_dir)
    return files, base, load_peft_adapter(base, "a", files.adapter_dirs["a"])


def _edge_programs(base, adapter, derive: bool):
    """The adapter's edge programs (forward and forward_cached), derived or traced."""
    lines = []
    policy = FoundationDataPolicy(base, "foundation")
    cached = kv_cache_method(base, MAX)
    lowerer = Lowerer(None, None, (_ids(7),), token_dynamic_shapes(MAX), [cached], lines.append)
    if derive:
        lowerer.edge(CausalLMLogits(base), "the foundation", policy, foundation=True)
    edge = lowerer.edge(CausalLMLogits(adapter), "adapter 'a'", policy)
    assert any("low-rank products" in line for line in lines) == derive, lines
    return edge


def _summary(ep):
    """What the emitter reads of a program, node names aside."""
    ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    specs = [(s.kind, s.target) for s in ep.graph_signature.input_specs]
    keys = [(n.meta.get(DATA_KEY_META), n.meta.get(EXTERNAL_TAG_META)) for n in ep.graph.nodes if n.op == "placeholder"]
    shapes = [tuple(n.meta["val"].shape) for n in ep.graph.nodes if n.op == "call_function" and "val" in n.meta
              and isinstance(n.meta["val"], torch.Tensor)]
    return ops, specs, keys, [str(s) for s in shapes]


@pytest.fixture(scope="module")
def both(llama):
    """The adapter's edge programs, derived and traced."""
    _, base, adapter = llama
    return _edge_programs(base, adapter, derive=True), _edge_programs(base, adapter, derive=False)


def test_derived_programs_equal_the_traced_ones(llama, both):
    _, _, adapter = llama
    derived, traced = both
    assert derived.methods == traced.methods == ["forward", "forward_cached"]
    for method in derived.methods:
        d, t = derived.exported_program(method), traced.exported_program(method)
        assert _summary(d) == _summary(t), method
        assert list(d.state_dict) == list(t.state_dict)
        assert all(torch.equal(d.state_dict[k], t.state_dict[k]) for k in d.state_dict)
    forward_d, forward_t = (e.exported_program("forward").module() for e in (derived, traced))
    for t in (1, 5):
        ids = _ids(t)
        want = CausalLMLogits(adapter)(ids)
        torch.testing.assert_close(forward_d(ids), forward_t(ids), rtol=0, atol=0)
        torch.testing.assert_close(forward_d(ids), want, rtol=1e-5, atol=1e-5)


def test_derived_kv_cache_method_generates_the_traced_tokens(both):
    runs = {}
    for derive, edge in zip((True, False), both):
        step = edge.exported_program("forward_cached").module()
        ids, tokens, logits = _ids(5), [], []
        pos = 0
        for _ in range(4):
            out = step(ids, torch.tensor(pos, dtype=torch.int64))
            logits.append(out[:, -1])
            pos += ids.shape[1]
            ids = out[:, -1:].argmax(-1)
            tokens.append(int(ids))
        runs[derive] = tokens, torch.cat(logits)
    assert runs[True][0] == runs[False][0]
    torch.testing.assert_close(runs[True][1], runs[False][1], rtol=0, atol=1e-6)


def test_derived_hf_export_writes_the_traced_files(llama, tmp_path, monkeypatch):
    files, _, _ = llama
    adapters = {"a": files.adapter_dirs["a"]}
    lines = []
    export_hf_lora(files.model_dir, adapters, str(tmp_path / "derived"), MAX, XnnpackPartitioner(),
                   progress=lines.append)
    assert "adapter 'a': the foundation's edge programs with its low-rank products" in lines, lines
    assert not any(line.startswith("exporting adapter") for line in lines), lines
    monkeypatch.setattr(_derive.FoundationGraphs, "sites", lambda self, modules: None)
    export_hf_lora(files.model_dir, adapters, str(tmp_path / "traced"), MAX, XnnpackPartitioner())
    assert _files(tmp_path / "derived") == _files(tmp_path / "traced")


def test_edgeshare_lora_layers_with_biases_derive_to_the_traced_files(tmp_path, monkeypatch):
    foundation = make_foundation()
    adapters = {"x": with_lora(foundation, 4, 8.0, 1, 0.05), "z": with_lora(foundation, 2, 2.0, 3, 0.05, ["fc2"])}
    x = (torch.randn(2, 256, generator=torch.Generator().manual_seed(0)),)
    lines = []
    export_lora(foundation, adapters, x, str(tmp_path / "derived"), XnnpackPartitioner(),
                foundation_program="foundation", progress=lines.append)
    assert sum("low-rank products" in line for line in lines) == 2, lines
    monkeypatch.setattr(_derive.FoundationGraphs, "sites", lambda self, modules: None)
    export_lora(foundation, adapters, x, str(tmp_path / "traced"), XnnpackPartitioner(),
                foundation_program="foundation")
    assert _files(tmp_path / "derived") == _files(tmp_path / "traced")


@pytest.mark.parametrize(
    "option",
    [dict(use_dora=True), dict(modules_to_save=["lm_head"]), dict(lora_bias=True)],
    ids=["dora", "modules_to_save", "lora_bias"],
)
def test_lora_options_it_cannot_reproduce_are_traced(llama, option):
    _, base, _ = llama
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM", **option)
    model = CausalLMLogits(peft.get_peft_model(shared_copy(base), config).eval())
    assert _derive.lora_sites(model, CausalLMLogits(base)) is None
    plain = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = CausalLMLogits(peft.get_peft_model(shared_copy(base), plain).eval())
    assert len(_derive.lora_sites(model, CausalLMLogits(base))) == 2 * base.config.num_hidden_layers


def test_a_trained_bias_or_a_weight_of_its_own_is_traced():
    foundation = make_foundation()
    adapter = with_lora(foundation, 4, 8.0, 1, 0.05)
    assert len(_derive.lora_sites(adapter, foundation)) == 3
    biased = shared_copy(adapter)
    layer = foundation.fc3
    biased.fc3 = LinearWithBiasDelta(layer.weight, layer.bias, layer.bias + 1)
    assert _derive.lora_sites(biased, foundation) is None
    own = shared_copy(adapter)
    own.fc1.base.weight = torch.nn.Parameter(foundation.fc1.weight.detach().clone(), requires_grad=False)
    assert _derive.lora_sites(own, foundation) is None


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
