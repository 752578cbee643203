"""A model whose layers repeat is exported with its first three layers traced and the others copied in
its graph (exir/_repeat.py): the files are byte for byte the ones tracing every layer writes, for the
foundation, an adapter derived from it and an adapter model traced itself; a model whose layers
differ, in their modules or only in what they compute, is traced whole and still right."""

import pathlib

import peft
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import _repeat
from edgeshare.exir._pipeline import Lowerer
from edgeshare.exir.data_policy import FoundationDataPolicy, InlineDataPolicy
from edgeshare.exir.hf import CausalLMLogits, export_hf_lora, load_hf_model, token_dynamic_shapes
from edgeshare.exir.hf_cache import kv_cache_method
from edgeshare.models import hf_tiny
from edgeshare.models.lora import shared_copy
from torch import nn

MAX = 16
LAYERS = 6


def _ids(t: int) -> torch.Tensor:
    return torch.randint(0, hf_tiny.VOCAB, (1, t), generator=torch.Generator().manual_seed(300 + t))


def _files(folder: pathlib.Path) -> dict:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _trace_whole(monkeypatch) -> None:
    monkeypatch.setattr(_repeat.RepeatedLayers, "find", classmethod(lambda cls, model: None))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return hf_tiny.save_tiny_lora("llama", str(tmp_path_factory.mktemp("llama")), layers=LAYERS)


def test_hf_export_of_copied_layers_writes_the_files_of_every_layer_traced(llama, tmp_path, monkeypatch):
    lines = []
    export_hf_lora(llama.model_dir, llama.adapter_dirs, str(tmp_path / "copied"), MAX, XnnpackPartitioner(),
                   progress=lines.append)
    assert f"exporting the foundation (torch.export, 3 of its {LAYERS} layers)" in lines, lines
    assert f"exporting the foundation, method 'forward_cached' (torch.export, 3 of its {LAYERS} layers)" in lines
    assert not any("exporting every layer" in line for line in lines), lines
    _trace_whole(monkeypatch)
    traced = []
    export_hf_lora(llama.model_dir, llama.adapter_dirs, str(tmp_path / "traced"), MAX, XnnpackPartitioner(),
                   progress=traced.append)
    assert "exporting the foundation (torch.export)" in traced, traced
    assert _files(tmp_path / "copied") == _files(tmp_path / "traced")


def _lowered(module: nn.Module, example, dynamic, extra, repeat: bool):
    """module's program bytes and the progress lines, its layers copied or all traced."""
    lines = []
    lowerer = Lowerer(XnnpackPartitioner(), None, example, dynamic, extra, lines.append, repeat_layers=repeat)
    policy = InlineDataPolicy()
    program, _ = lowerer.lower_edge(lowerer.edge(module, "the model", policy), "the model")
    return program.buffer, lines


def test_a_traced_adapter_model_of_copied_layers_is_the_traced_one(llama):
    base = load_hf_model(llama.model_dir)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"], lora_bias=True,
                             task_type="CAUSAL_LM")
    model = CausalLMLogits(peft.get_peft_model(shared_copy(base), config).eval())
    cached = [kv_cache_method(base, MAX)]
    copied, lines = _lowered(model, (_ids(5),), token_dynamic_shapes(MAX), cached, repeat=True)
    assert sum(f"3 of its {LAYERS} layers" in line for line in lines) == 2, lines
    traced, _ = _lowered(model, (_ids(5),), token_dynamic_shapes(MAX), cached, repeat=False)
    assert copied == traced


class _Block(nn.Module):
    def __init__(self, index: int, scaled: bool, act) -> None:
        super().__init__()
        self.index = index
        self.scaled = scaled
        self.act = act
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.fc(x))
        return x + (y * (self.index + 1) if self.scaled else y)


class _Stack(nn.Module):
    def __init__(self, blocks) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _stack(scaled: bool = False, act_from: int = LAYERS) -> _Stack:
    torch.manual_seed(0)
    return _Stack([_Block(i, scaled, torch.relu if i < act_from else torch.tanh) for i in range(LAYERS)]).eval()


@pytest.mark.parametrize(
    "model, repeated",
    [
        (_stack(), True),
        (_stack(scaled=True), False),  # the same modules, each layer scaled by its own index
        (_stack(act_from=4), False),  # another activation from layer 4 on: an attribute it cannot compare
    ],
    ids=["alike", "index_in_the_graph", "other_function"],
)
def test_layers_that_compute_differently_are_traced_whole(model, repeated):
    x = (torch.randn(3, 16, generator=torch.Generator().manual_seed(1)),)
    program, lines = _lowered(model, x, None, [], repeat=True)
    assert f"exporting the model (torch.export, 3 of its {LAYERS} layers)" in lines, lines
    assert any("exporting every layer" in line for line in lines) != repeated, lines
    traced, _ = _lowered(model, x, None, [], repeat=False)
    assert program == traced


def test_layers_with_other_modules_or_shapes_are_not_copied():
    found = _repeat.RepeatedLayers.find(_stack())
    assert found is not None and len(found.layers) == LAYERS
    wider = _stack()
    wider.blocks[4].fc = nn.Linear(16, 16, bias=False)
    assert _repeat.RepeatedLayers.find(wider) is None
    short = _Stack([_Block(i, False, torch.relu) for i in range(5)])
    assert _repeat.RepeatedLayers.find(short) is None  # too few layers to be worth copying


def test_copied_programs_compute_the_models_logits_and_tokens(llama):
    base = load_hf_model(llama.model_dir)
    policy = FoundationDataPolicy(base, "foundation")
    cached = kv_cache_method(base, MAX)
    lowerer = Lowerer(None, None, (_ids(7),), token_dynamic_shapes(MAX), [cached], lambda line: None)
    edge = lowerer.edge(CausalLMLogits(base), "the foundation", policy)
    forward = edge.exported_program("forward").module()
    for t in (1, 9):
        torch.testing.assert_close(forward(_ids(t)), CausalLMLogits(base)(_ids(t)), rtol=1e-5, atol=1e-5)
    step = edge.exported_program("forward_cached").module()
    eager = cached.wrap(CausalLMLogits(base))
    ids_a = ids_b = _ids(5)
    pos = 0
    for _ in range(6):
        a, b = step(ids_a, torch.tensor(pos)), eager(ids_b, torch.tensor(pos))
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        pos += ids_a.shape[1]
        ids_a, ids_b = a[:, -1:].argmax(-1), b[:, -1:].argmax(-1)
        assert torch.equal(ids_a, ids_b)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
