"""End-to-end LoRA exports: foundation bytes live once, in foundation.ptd, identical across exports."""

import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import LoraDataPolicy, to_edge
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte, foundation_identity
from edgeshare.exir.lora import AdapterNameError, export_lora
from edgeshare.exir.tensor_layout import tensor_bytes
from edgeshare.models import demo_lora, lora_variants


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    foundation, adapters, inputs = demo_lora()
    out = str(tmp_path_factory.mktemp("demo"))
    result = export_lora(foundation, adapters, inputs, out, XnnpackPartitioner())
    return foundation, adapters, inputs, out, result


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def test_writes_one_pte_per_adapter_and_one_foundation(demo):
    _, _, _, out, result = demo
    assert sorted(os.listdir(out)) == ["foundation.ptd", "lora_a.pte", "lora_b.pte"]
    assert result.files == {p: os.path.getsize(p) for p in result.files}


def test_no_pte_contains_foundation_bytes(demo):
    foundation, _, _, out, _ = demo
    for name in ("lora_a.pte", "lora_b.pte"):
        data = _read(os.path.join(out, name))
        for key, tensor in foundation.state_dict().items():
            assert tensor_bytes(tensor) not in data, (name, key)


def test_foundation_ptd_holds_each_foundation_weight_once(demo):
    foundation, _, _, out, result = demo
    data = _read(os.path.join(out, "foundation.ptd"))
    ptd = deserialize_ptd(data, "foundation.ptd")
    state = foundation.state_dict()
    assert sorted(ptd.named_data) == sorted(state)
    for key, tensor in state.items():
        raw = tensor_bytes(tensor)
        assert ptd.named_data[key].data == raw
        assert data.count(raw) == 1
        assert ptd.named_data[key].tensor_layout.sizes == tuple(tensor.shape)
    assert result.shared_bytes == sum(t.numel() * 4 for t in state.values())


def test_pte_named_data_holds_the_adapter_weights(demo):
    _, adapters, _, out, result = demo
    for name, module in adapters.items():
        pte = deserialize_pte(_read(os.path.join(out, f"{name}.pte")), f"{name}.pte")
        lora = {k: v for k, v in module.state_dict().items() if "lora" in k}
        assert sorted(pte.named_data) == sorted(f"forward/{k}" for k in lora)
        for k, v in lora.items():
            assert pte.named_data[f"forward/{k}"].data == tensor_bytes(v)
        assert result.adapter_bytes[name] == sum(v.numel() * 4 for v in lora.values())


def test_foundation_ptd_is_byte_identical_for_bare_foundation_and_each_adapter(demo, tmp_path):
    foundation, adapters, inputs, out, _ = demo
    reference = _read(os.path.join(out, "foundation.ptd"))
    ep = torch.export.export(foundation, inputs)
    bare = to_edge(ep, data_policy=LoraDataPolicy()).to_backend(XnnpackPartitioner()).to_executorch()
    assert bare.data_files["foundation"] == reference
    for name, module in adapters.items():
        single = export_lora(foundation, {name: module}, inputs, str(tmp_path / name), XnnpackPartitioner())
        assert _read(single.foundation_path) == reference


def test_foundation_program_holds_no_weight_and_decides_the_ptd(tmp_path):
    foundation, adapters, inputs = lora_variants.replaced_weight()
    lines = []
    both = export_lora(
        foundation, adapters, inputs, str(tmp_path / "both"), None, foundation_program="base", progress=lines.append
    )
    assert both.foundation_program == str(tmp_path / "both" / "base.pte")
    assert sorted(os.listdir(tmp_path / "both")) == ["base.pte", "foundation.ptd", "lora.pte", "tuned.pte"]
    assert not deserialize_pte(_read(both.foundation_program)).named_data
    # "tuned" replaces fc2.weight, so its own .ptd lacks it; the foundation program's has every
    # weight and is the file, the same as with the plain adapter alone.
    alone = export_lora(
        foundation, {"lora": adapters["lora"]}, inputs, str(tmp_path / "one"), None, foundation_program="base"
    )
    assert _read(both.foundation_path) == _read(alone.foundation_path)
    assert sorted(both.shared_keys) == sorted(foundation.state_dict())
    # Each program is exported and lowered before the next one starts (its graphs go with it).
    assert [line.split(" ")[0] for line in lines] == ["exporting", "lowering"] * 3 + ["writing"] * 4


def _file_identity(path):
    ptd = deserialize_ptd(_read(path), os.path.basename(path))
    return foundation_identity({k: (b.data, 1, None, b.digest) for k, b in ptd.named_data.items()})


def test_each_program_records_the_identity_of_the_foundation_file_written_beside_it(tmp_path):
    foundation, adapters, inputs = lora_variants.replaced_weight()
    both = export_lora(foundation, adapters, inputs, str(tmp_path / "both"), None)
    identity = _file_identity(both.foundation_path)
    for name in adapters:
        assert bytes(deserialize_pte(_read(both.program_paths[name])).program.foundationDigest) == identity
    # "tuned" uses no foundation fc2.weight: exported alone, its file lacks that entry, so its
    # program records another identity and differs from the one above in those 32 bytes only.
    alone = export_lora(foundation, {"tuned": adapters["tuned"]}, inputs, str(tmp_path / "alone"), None)
    other = _file_identity(alone.foundation_path)
    assert other != identity
    tuned_alone, tuned_both = _read(alone.program_paths["tuned"]), _read(both.program_paths["tuned"])
    assert bytes(deserialize_pte(tuned_alone).program.foundationDigest) == other
    assert tuned_alone.replace(other, identity) == tuned_both


def test_foundation_program_name_must_be_a_stem_no_adapter_has(tmp_path):
    foundation, adapters, inputs = lora_variants.replaced_weight()
    for stem in ("lora", "a/b"):
        with pytest.raises(AdapterNameError, match=f"foundation program name '{stem}'"):
            export_lora(foundation, adapters, inputs, str(tmp_path), None, foundation_program=stem)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
