"""export_swappable on the demo LoRA model: one program for both adapters, their weights open
(no digest, not packed by the delegate but read by it as inputs) in a .ptd each, the foundation as a
normal export writes it."""

import os

import pytest
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.data_policy import DataPlacement
from edgeshare.exir.lora import export_lora
from edgeshare.exir.swappable import ADAPTER_KEY_PREFIX, adapter_key, export_swappable
from edgeshare.models import demo_lora


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _external_tensors(pte):
    """key -> the Tensor value naming it, over every method."""
    found = {}
    for plan in pte.program.executionPlans:
        for value in plan.values:
            key = getattr(value.val, "externalKey", None)
            if key:
                found[key.decode() if isinstance(key, bytes) else key] = value.val
    return found


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    foundation, adapters, inputs = demo_lora()
    out = str(tmp_path_factory.mktemp("swappable"))
    result = export_swappable(foundation, adapters, inputs, out, XnnpackPartitioner())
    normal = str(tmp_path_factory.mktemp("normal"))
    export_lora(foundation, adapters, inputs, normal, XnnpackPartitioner(), foundation_program="foundation")
    return result, out, normal


def test_one_program_and_one_small_data_file_per_adapter(exported):
    result, out, _ = exported
    assert result.swappable_program == os.path.join(out, "lora.pte")
    assert list(result.adapter_files) == ["lora_a", "lora_b"] and result.own_programs == {}
    a, b = (deserialize_ptd(_read(p), p).named_data for p in result.adapter_files.values())
    assert list(a) == list(b) == result.adapter_keys and result.adapter_keys
    assert all(k.startswith(ADAPTER_KEY_PREFIX) for k in a)
    assert any(a[k].data != b[k].data for k in a), "the two adapters' bytes should differ"


def test_adapter_weights_are_open_and_outside_the_delegate(exported):
    result, _, _ = exported
    pte = deserialize_pte(_read(result.swappable_program), "lora.pte")
    external = _external_tensors(pte)
    adapter = {k: t for k, t in external.items() if k.startswith(ADAPTER_KEY_PREFIX)}
    assert sorted(adapter) == sorted(result.adapter_keys)
    for key, tensor in external.items():
        digest = list(tensor.externalDigest or [])
        assert (len(digest) == 0) == (key in adapter), key  # open: no digest; foundation: pinned
    # The delegate's named data (what it packs) holds no adapter key; the program none either.
    assert not [k for k in pte.named_data if ADAPTER_KEY_PREFIX in k]
    for plan in pte.program.executionPlans:
        assert plan.delegates, "the foundation's layers should still be delegated"


def _calls(plan):
    """(delegate calls, kernel calls) of a plan, each as its list of arg value indices."""
    delegate, kernel = [], []
    for instruction in plan.instructions:
        args = list(instruction.instrArgs.args)
        (kernel if hasattr(instruction.instrArgs, "opIndex") else delegate).append(args)
    return delegate, kernel


def test_adapter_products_run_in_the_delegate_over_its_inputs(exported):
    """Every adapter weight is an input of a delegate call (its product read unpacked there, so a
    rebind is followed), none a kernel's; the methods are cut into as many delegate calls as an
    adapter's own program (no cut at each low-rank product)."""
    result, _, normal = exported
    pte = deserialize_pte(_read(result.swappable_program), "lora.pte")
    own = deserialize_pte(_read(os.path.join(normal, "lora_a.pte")), "lora_a.pte")
    for plan, own_plan in zip(pte.program.executionPlans, own.program.executionPlans):
        adapter = {
            i
            for i, v in enumerate(plan.values)
            if (getattr(v.val, "externalKey", None) or b"").startswith(ADAPTER_KEY_PREFIX.encode())
        }
        delegate, kernel = _calls(plan)
        assert adapter and adapter <= {a for args in delegate for a in args}
        assert not adapter & {a for args in kernel for a in args}
        assert len(delegate) == len(_calls(own_plan)[0])


def test_foundation_files_equal_a_normal_export(exported):
    _, out, normal = exported
    assert _read(os.path.join(out, "foundation.ptd")) == _read(os.path.join(normal, "foundation.ptd"))
    assert _read(os.path.join(out, "foundation.pte")) == _read(os.path.join(normal, "foundation.pte"))


def test_another_alpha_is_another_structure(tmp_path):
    foundation, adapters, inputs = demo_lora()
    other = adapters["lora_b"]
    for module in other.modules():
        if hasattr(module, "scale"):
            module.scale *= 2  # same weights' names and shapes, another graph constant
    result = export_swappable(foundation, adapters, inputs, str(tmp_path), XnnpackPartitioner())
    assert list(result.adapter_files) == ["lora_a"]
    assert result.own_programs == {"lora_b": os.path.join(str(tmp_path), "lora_b.pte")}


def test_adapter_keys_drop_peft_names_and_wrappers():
    name = "model.base_model.model.model.layers.0.self_attn.q_proj.lora_A.chat.weight"
    assert adapter_key(name, ["chat"]) == "adapter/model.model.layers.0.self_attn.q_proj.lora_A.weight"
    # "chat" elsewhere in a path is not PEFT's adapter component.
    assert adapter_key("chat.lora_a.weight", ["chat"]) == "adapter/chat.lora_a.weight"


def test_open_data_needs_a_file():
    with pytest.raises(ValueError, match="open data needs an external tag"):
        DataPlacement("w", None, open=True)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
