"""End-to-end LoRA exports of several model shapes; in each, foundation bytes appear once across
the whole file set, and only in foundation.ptd."""

import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import AdapterMismatchError, LoraDataPolicy, UnsupportedModelError
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.lora import FoundationMismatchWarning, export_lora
from edgeshare.exir.tensor_layout import tensor_bytes
from edgeshare.models import TransformerBlock, down_up_lora, lora_state_dict, replaced_weight, tied_lm_lora
from torch import nn


class Mlp(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.fc1 = nn.Linear(16, 24, bias=bias)
        self.fc2 = nn.Linear(24, 8, bias=bias)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _adapter(model, layers, rank, seed):
    return lora_state_dict(model, layers, rank, seed, scale=0.1)


def _all_bytes(folder):
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}


def _check_foundation_once(foundation, folder):
    files = _all_bytes(folder)
    ptd = deserialize_ptd(files["foundation.ptd"], "foundation.ptd")
    for key, tensor in foundation.state_dict().items():
        raw = tensor_bytes(tensor)
        hits = {n: data.count(raw) for n, data in files.items() if raw in data}
        assert hits == {"foundation.ptd": 1}, key
        assert ptd.named_data[key].data == raw
    return files


def _export(tmp_path, foundation, adapters, inputs, **kw):
    torch.manual_seed(0)
    out = str(tmp_path)
    result = export_lora(foundation, adapters, inputs, out, XnnpackPartitioner(), **kw)
    return result, _check_foundation_once(foundation, out)


def test_lora_transformer_block_is_partially_delegated(tmp_path):
    torch.manual_seed(0)
    block = TransformerBlock().eval()
    adapters = {"a": _adapter(block, ["q", "v"], 4, 1), "b": _adapter(block, ["q", "k", "o"], 2, 2)}
    result, files = _export(tmp_path, block, adapters, (torch.randn(1, 6, 32),), alpha=8.0)
    pte = deserialize_pte(files["a.pte"])
    (plan,) = pte.program.executionPlans
    ops = {o.name.decode() for o in plan.operators}
    assert {"aten::native_layer_norm", "aten::bmm"} <= ops
    assert plan.delegates and plan.nonConstBufferSizes[1] > 0
    for value in plan.values:
        t = value.val
        if value.valType == 6 and t.allocation is not None and t.constantSegment == -1 and not t.externalKey:
            assert t.allocation.memoryId == 1 and t.allocation.offset % 16 == 0
    # layer-norm weights stay outside the delegate and are external constants
    external = {v.val.externalKey.decode() for v in plan.values if v.valType == 6 and v.val.externalKey}
    assert {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"} <= external
    assert result.adapter_keys["a"] == sorted(
        f"forward/{layer}.{w}.weight" for layer in ("q", "v") for w in ("lora_a", "lora_b")
    )


def test_subset_of_layers_bias_less_and_ranks_1_2_4(tmp_path):
    torch.manual_seed(0)
    mlp = Mlp(bias=False).eval()
    adapters = {f"r{r}": _adapter(mlp, ["fc1"] if r != 2 else ["fc1", "fc2"], r, r) for r in (1, 2, 4)}
    result, files = _export(tmp_path, mlp, adapters, (torch.randn(3, 16),))
    assert sorted(files) == ["foundation.ptd", "r1.pte", "r2.pte", "r4.pte"]
    assert result.adapter_bytes["r1"] == (16 + 24) * 4
    assert result.adapter_bytes["r4"] == 4 * (16 + 24) * 4


def test_one_multi_method_pte_with_two_adapters(tmp_path):
    torch.manual_seed(0)
    mlp = Mlp().eval()
    adapters = {"first": _adapter(mlp, ["fc1", "fc2"], 2, 1), "second": _adapter(mlp, ["fc2"], 4, 2)}
    result, files = _export(tmp_path, mlp, adapters, (torch.randn(3, 16),), multi_method=True, program_name="both")
    assert sorted(files) == ["both.pte", "foundation.ptd"]
    pte = deserialize_pte(files["both.pte"])
    assert [p.name for p in pte.program.executionPlans] == [b"first", b"second"]
    assert set(result.methods.values()) == {"first", "second"}
    assert all(k.startswith(("first/", "second/")) for k in pte.named_data)


def test_adapter_that_does_not_fit_names_the_layer(tmp_path):
    mlp = Mlp()
    bad = _adapter(mlp, ["fc1"], 2, 1)
    bad["fc1.lora_b.weight"] = torch.zeros(5, 2)
    with pytest.raises(AdapterMismatchError, match="adapter 'x'.*'fc1'"):
        export_lora(mlp, {"x": bad}, (torch.randn(3, 16),), str(tmp_path), XnnpackPartitioner())
    with pytest.raises(AdapterMismatchError, match="'nope' is not an nn.Linear"):
        export_lora(
            mlp,
            {"x": {"nope.lora_a.weight": torch.zeros(1, 1), "nope.lora_b.weight": torch.zeros(1, 1)}},
            (torch.randn(3, 16),),
            str(tmp_path),
            XnnpackPartitioner(),
        )


def test_models_without_parameters_or_untraceable_are_clear_errors(tmp_path):
    class Empty(nn.Module):
        def forward(self, x):
            return x + 1

    with pytest.raises(UnsupportedModelError, match="no parameters"):
        export_lora(Empty(), {"a": {}}, (torch.randn(2),), str(tmp_path), XnnpackPartitioner())

    class Untraceable(Mlp):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow
                return self.fc1(x)
            return self.fc1(-x)

    with pytest.raises(UnsupportedModelError, match="adapter 'a' could not be exported by torch.export"):
        export_lora(
            Untraceable(),
            {"a": _adapter(Mlp(), ["fc1"], 1, 1)},
            (torch.randn(3, 16),),
            str(tmp_path),
            XnnpackPartitioner(),
        )


def test_down_up_lora_without_lora_in_any_name_shares_the_foundation(tmp_path):
    foundation, adapters, inputs = down_up_lora()
    result, files = _export(tmp_path, foundation, adapters, inputs)
    assert sorted(files) == ["chat.pte", "code.pte", "foundation.ptd"]
    assert sorted(result.shared_keys) == sorted(foundation.state_dict())
    assert result.adapter_keys["chat"] == sorted(
        f"forward/{layer}.{w}.weight" for layer in ("fc1", "fc2") for w in ("down_proj", "up_proj")
    )
    for name, module in adapters.items():
        own = {k: v for k, v in module.state_dict().items() if "_proj" in k}
        assert result.adapter_bytes[name] == sum(v.numel() * 4 for v in own.values())


def test_name_based_policy_stays_available_and_rejects_down_up_names(tmp_path):
    foundation, adapters, inputs = down_up_lora()
    with pytest.raises(AdapterMismatchError, match="adapter 'chat': weight 'fc1.layer.weight'.*not in the foundation"):
        export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner(), data_policy=LoraDataPolicy())


@pytest.mark.parametrize("tied", [True, False], ids=["one_tensor", "equal_copy"])
def test_tied_lm_head_is_stored_once_under_one_key(tmp_path, tied):
    foundation, adapters, inputs = tied_lm_lora(tied=tied)
    result = export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner())
    files = _all_bytes(str(tmp_path))
    # The lm_head's weight is the embedding's: one key, the first name in state-dict order.
    assert sorted(result.shared_keys) == ["embed.weight", "proj.bias", "proj.weight"]
    raw = tensor_bytes(foundation.embed.weight)
    assert {n: d.count(raw) for n, d in files.items() if raw in d} == {"foundation.ptd": 1}
    ptd = deserialize_ptd(files["foundation.ptd"])
    assert ptd.named_data["embed.weight"].data == raw
    assert "forward/lm_head.layer.weight" not in result.adapter_keys["chat"]
    assert "forward/lm_head.down_proj.weight" in result.adapter_keys["chat"]


def test_adapter_that_replaces_a_foundation_weight_keeps_it_and_warns(tmp_path):
    foundation, adapters, inputs = replaced_weight()
    with pytest.warns(FoundationMismatchWarning, match="adapter 'tuned': 1 weight.*: fc2.weight"):
        result = export_lora(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner())
    files = _all_bytes(str(tmp_path))
    assert result.adapter_keys["tuned"] == ["forward/fc2.weight"]
    tuned = deserialize_pte(files["tuned.pte"])
    assert tuned.named_data["forward/fc2.weight"].data == tensor_bytes(adapters["tuned"].fc2.weight)
    # foundation.ptd serves both programs: "lora" uses the foundation's fc2.weight, "tuned" does not.
    _check_foundation_once(foundation, str(tmp_path))
    assert sorted(result.shared_keys) == sorted(foundation.state_dict())


def test_adapter_built_on_another_foundation_is_an_error_naming_it(tmp_path):
    foundation, _, inputs = down_up_lora()
    stranger = Mlp().eval()
    with pytest.raises(AdapterMismatchError, match="adapter 'stranger': no weight of its model equals"):
        export_lora(foundation, {"stranger": stranger}, inputs, str(tmp_path), XnnpackPartitioner())


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
