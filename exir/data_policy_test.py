"""Data policies: foundation weights by identity (the LoRA default), canonical names, the name-based
LoRA policy, patterns, callables, and to_edge's records."""

import pytest
import torch
from edgeshare.exir import (
    CallableDataPolicy,
    DataPlacement,
    DataPlacementError,
    FoundationDataPolicy,
    LoraDataPolicy,
    PatternDataPolicy,
    UnsupportedModelError,
    canonical_name,
    to_edge,
)
from edgeshare.exir.data_policy import DATA_KEY_META, EXTERNAL_TAG_META
from torch import nn


def test_canonical_name_removes_lora_wrapper_components():
    assert canonical_name("layers.0.base.weight") == "layers.0.weight"
    assert canonical_name("layers.0.weight") == "layers.0.weight"
    assert canonical_name("base_model.model.q_proj.base_layer.weight") == "q_proj.weight"
    assert canonical_name("fc.base.bias") == "fc.bias"
    assert canonical_name("base") == "base"  # the leaf name is never dropped


def test_lora_policy_keeps_adapters_with_the_program_and_sends_base_to_foundation():
    policy = LoraDataPolicy()
    t = torch.zeros(1)
    assert policy("forward", "fc1.lora_a.weight", t) == DataPlacement("forward/fc1.lora_a.weight", None)
    assert policy("forward", "fc1.base.weight", t) == DataPlacement("fc1.weight", "foundation")
    assert policy("m", "fc1.bias", t) == DataPlacement("fc1.bias", "foundation")


def test_pattern_and_callable_policies():
    policy = PatternDataPolicy([(r"^embed", "tables"), (r"adapter", None)])
    t = torch.zeros(1)
    assert policy("f", "embed.weight", t) == DataPlacement("embed.weight", "tables")
    assert policy("f", "x.adapter.w", t) == DataPlacement("f/x.adapter.w", None)
    assert policy("f", "other.weight", t) is None  # not covered: inline
    fn = CallableDataPolicy(lambda m, n, t: "big" if t.numel() > 4 else None)
    assert fn("f", "a.base.w", torch.zeros(8)) == DataPlacement("a.w", "big")
    assert fn("f", "a", torch.zeros(2)) is None


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(6, 4)
        self.norm = nn.LayerNorm(4)  # weight all ones, bias all zeros
        self.head = nn.Linear(4, 6, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("ones", torch.ones(4))
        self.register_buffer("scratch", torch.arange(4.0), persistent=False)


def test_foundation_policy_decides_by_bytes_not_names():
    foundation = _Tied()
    policy = FoundationDataPolicy(foundation)
    w = foundation.embed.weight
    assert policy("m", "anything.down_proj.weight", w.detach().clone()) == DataPlacement("embed.weight", "foundation")
    assert policy("m", "embed.weight", w.detach() + 1) == DataPlacement("m/embed.weight", None)
    assert policy("m", "x", torch.randn(3, 3)) == DataPlacement("m/x", None)
    # Same bytes but another dtype or shape is not the foundation's.
    assert policy("m", "e", w.detach().view(torch.int32)) == DataPlacement("m/e", None)
    assert policy("m", "e", w.detach().reshape(4, 6)) == DataPlacement("m/e", None)


def test_foundation_policy_gives_tied_and_equal_tensors_one_key():
    foundation = _Tied()
    policy = FoundationDataPolicy(foundation, "base")
    # One tensor under two names: the first name in state-dict order.
    assert policy("m", "head.weight", foundation.head.weight) == DataPlacement("embed.weight", "base")
    # Equal tensors (a buffer of ones and the layer norm's ones) share the first name too: the
    # module's own buffer comes before its children's tensors in state-dict order.
    assert list(foundation.state_dict())[0] == "ones"
    assert policy("m", "norm.weight", foundation.norm.weight) == DataPlacement("ones", "base")
    assert policy("m", "b", torch.zeros(4)) == DataPlacement("norm.bias", "base")
    # Non-persistent buffers are the foundation's as well.
    assert policy("m", "s", torch.arange(4.0)) == DataPlacement("scratch", "base")


def test_foundation_policy_hashes_only_groups_a_weight_could_match():
    foundation = _Tied()
    policy = FoundationDataPolicy({k: v for k, v in foundation.state_dict().items()})
    assert policy.foundation_key(torch.randn(6, 4)) is None
    assert list(policy._digests) == [(torch.float32, (6, 4))]
    with pytest.raises(TypeError, match="nn.Module or a dict"):
        FoundationDataPolicy([torch.zeros(1)])


class _Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x))


def test_to_edge_records_placement_on_placeholders():
    ep = torch.export.export(_Two(), (torch.randn(2, 4),))
    edge = to_edge(ep, data_policy=LoraDataPolicy())
    metas = {
        n.meta[DATA_KEY_META]: n.meta[EXTERNAL_TAG_META]
        for n in edge.exported_program().graph.nodes
        if n.op == "placeholder" and DATA_KEY_META in n.meta
    }
    assert metas == {"a.weight": "foundation", "a.bias": "foundation", "b.weight": "foundation", "b.bias": "foundation"}


def test_two_weights_under_one_key_is_an_error_naming_both():
    ep = torch.export.export(_Two(), (torch.randn(2, 4),))
    policy = CallableDataPolicy(lambda m, n, t: DataPlacement("same", "foundation") if n.endswith("weight") else None)
    with pytest.raises(DataPlacementError, match="'a.weight' and 'b.weight'.*'same'"):
        to_edge(ep, data_policy=policy)


def test_dynamic_shapes_are_kept_and_weights_still_placed():
    batch = torch.export.Dim("batch", min=2, max=8)
    ep = torch.export.export(_Two(), (torch.randn(2, 4),), dynamic_shapes=({0: batch},))
    edge = to_edge(ep, data_policy=CallableDataPolicy(lambda m, n, t: DataPlacement(n, "foundation")))
    x = next(n for n in edge.exported_program().graph.nodes if n.op == "placeholder" and n.name == "x")
    assert not isinstance(x.meta["val"].shape[0], int)
    assert any(DATA_KEY_META in n.meta for n in edge.exported_program().graph.nodes)


class _Complex(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x * self.w


def test_unsupported_dtypes_are_rejected_naming_the_method_and_node():
    ep = torch.export.export(_Complex(), (torch.randn(4, dtype=torch.complex64),))
    with pytest.raises(UnsupportedModelError, match=r"method 'forward', node '.*'.*complex64 is not supported"):
        to_edge(ep)


class _Erf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.special.erf(x) + 1.0


def test_an_operator_the_runtime_cannot_run_is_refused_at_export_naming_the_node():
    ep = torch.export.export(_Erf(), (torch.randn(4),))
    with pytest.raises(
        UnsupportedModelError, match=r"method 'forward', node 'erf.*aten::erf has no kernel in the runtime"
    ):
        to_edge(ep).to_executorch()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
