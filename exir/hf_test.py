"""Loading Hugging Face model and PEFT adapter directories, and the one-line errors for bad ones.

Every directory here is written by the test from a tiny config (models/hf_tiny.py): nothing is
downloaded.
"""

import json
import os
import shutil

import peft
import pytest
import torch
import transformers
from edgeshare.exir import (
    AdapterMismatchError,
    AdapterNameError,
    ExportError,
    HfInputError,
    UnsupportedAdapterError,
    export_hf_lora,
    export_hf_swappable,
    load_hf_model,
    load_peft_adapter,
)
from edgeshare.exir.hf import CausalLMLogits
from edgeshare.models import hf_tiny


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return hf_tiny.save_tiny_lora("llama", str(tmp_path_factory.mktemp("llama")))


@pytest.fixture(scope="module")
def base(llama):
    return load_hf_model(llama.model_dir)


def _ids(t: int) -> torch.Tensor:
    return torch.randint(0, hf_tiny.VOCAB, (1, t), generator=torch.Generator().manual_seed(t))


def _raises(error, match, fn, *args):
    with pytest.raises(error, match=match) as info:
        fn(*args)
    assert "\n" not in str(info.value), str(info.value)  # one line for the CLI
    return info.value


def test_model_loads_offline_in_float32_with_the_saved_weights(llama, base):
    assert type(base).__name__ == "LlamaForCausalLM" and not base.training
    assert all(p.dtype == torch.float32 for p in base.parameters())
    fresh = hf_tiny.make_tiny_model("llama")
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(base.state_dict()[name], tensor), name
    assert base.lm_head.weight is base.model.embed_tokens.weight  # tied, as saved


def test_adapters_load_on_a_copy_and_equal_peft_from_pretrained(llama, base):
    x = _ids(5)
    with torch.no_grad():
        plain = CausalLMLogits(base)(x)
        for name, path in llama.adapter_dirs.items():
            model = load_peft_adapter(base, name, path)
            reference = peft.PeftModel.from_pretrained(hf_tiny.make_tiny_model("llama"), path).eval()
            got = CausalLMLogits(model)(x)
            assert torch.allclose(got, CausalLMLogits(reference)(x), atol=1e-6), name
            assert not torch.allclose(got, plain, atol=1e-3), f"adapter {name} changes nothing"
    assert not any("lora" in n for n, _ in base.named_parameters())  # base not modified


def test_the_adapters_recorded_base_path_is_not_used(llama, base, tmp_path):
    adapter_dir = _copy(llama.adapter_dirs["a"], tmp_path, "a")
    config_path = os.path.join(adapter_dir, "adapter_config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["base_model_name_or_path"] = "some-org/not-on-this-machine"
    with open(config_path, "w") as f:
        json.dump(config, f)
    model = load_peft_adapter(base, "a", adapter_dir)
    reference = load_peft_adapter(base, "a", llama.adapter_dirs["a"])
    with torch.no_grad():
        assert torch.equal(CausalLMLogits(model)(_ids(3)), CausalLMLogits(reference)(_ids(3)))


def _copy(src: str, tmp_path, name: str) -> str:
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def test_missing_model_directory_names_it(tmp_path):
    missing = str(tmp_path / "nope")
    _raises(HfInputError, f"model directory '{missing}' does not exist", load_hf_model, missing)


@pytest.mark.parametrize(
    "content, match",
    [
        (None, r"has no config.json .*config.json is missing"),
        ("{not json", r"config.json is not valid JSON"),
        ("[1, 2]", r"config.json holds a JSON list"),
        ('{"hidden_size": 64}', r"config.json has no model_type"),
        ('{"model_type": "no_such_family"}', r"transformers cannot load it"),
    ],
)
def test_missing_or_corrupt_config_json_names_the_file(llama, tmp_path, content, match):
    model_dir = _copy(llama.model_dir, tmp_path, "model")
    config = os.path.join(model_dir, "config.json")
    os.remove(config)
    if content is not None:
        with open(config, "w") as f:
            f.write(content)
    error = _raises(HfInputError, match, load_hf_model, model_dir)
    assert model_dir in str(error)


def test_missing_or_corrupt_safetensors_names_the_file(llama, tmp_path):
    model_dir = _copy(llama.model_dir, tmp_path, "model")
    weights = os.path.join(model_dir, "model.safetensors")
    data = open(weights, "rb").read()
    os.remove(weights)
    _raises(HfInputError, "has no model.safetensors", load_hf_model, model_dir)
    with open(weights, "wb") as f:
        f.write(data[: len(data) // 2])
    _raises(HfInputError, f"{weights} is not a valid safetensors file", load_hf_model, model_dir)
    with open(weights, "wb") as f:
        f.write(b"\x00" * 3)
    _raises(HfInputError, "not a valid safetensors file", load_hf_model, model_dir)


def test_sharded_safetensors_load_and_a_missing_shard_is_named(tmp_path):
    model_dir = str(tmp_path / "sharded")
    hf_tiny.make_tiny_model("llama").save_pretrained(model_dir, max_shard_size="100KB")
    shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    assert len(shards) > 1 and "model.safetensors.index.json" in os.listdir(model_dir)
    loaded = load_hf_model(model_dir)
    for name, tensor in hf_tiny.make_tiny_model("llama").state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    os.remove(os.path.join(model_dir, shards[-1]))
    _raises(HfInputError, f"has no {shards[-1]}", load_hf_model, model_dir)


def test_safetensors_missing_a_weight_is_refused_not_filled_with_random_values(llama, tmp_path):
    from safetensors.torch import load_file, save_file

    model_dir = _copy(llama.model_dir, tmp_path, "model")
    weights = os.path.join(model_dir, "model.safetensors")
    tensors = load_file(weights)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    _raises(HfInputError, r"missing keys: model.layers.1.mlp.up_proj.weight", load_hf_model, model_dir)


@pytest.mark.parametrize(
    "break_it, error, match",
    [
        (lambda d: shutil.rmtree(d), HfInputError, r"adapter 'a' directory '.*' does not exist"),
        (lambda d: os.remove(os.path.join(d, "adapter_config.json")), HfInputError, r"has no adapter_config.json"),
        (
            lambda d: open(os.path.join(d, "adapter_config.json"), "w").write("{"),
            HfInputError,
            r"adapter_config.json is not valid JSON",
        ),
        (
            lambda d: os.remove(os.path.join(d, "adapter_model.safetensors")),
            HfInputError,
            r"has no adapter_model.safetensors",
        ),
        (
            lambda d: open(os.path.join(d, "adapter_model.safetensors"), "wb").write(b"\xff" * 64),
            HfInputError,
            r"adapter_model.safetensors is not a valid safetensors file",
        ),
    ],
)
def test_missing_or_corrupt_adapter_files_name_the_adapter_and_file(llama, base, tmp_path, break_it, error, match):
    adapter_dir = _copy(llama.adapter_dirs["a"], tmp_path, "a")
    break_it(adapter_dir)
    _raises(error, match, load_peft_adapter, base, "a", adapter_dir)


def test_non_lora_peft_types_are_refused_naming_adapter_and_type(base, tmp_path):
    ia3 = peft.IA3Config(target_modules=["q_proj", "down_proj"], feedforward_modules=["down_proj"])
    prefix = peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=2)
    for name, config, kind in (("ia3", ia3, "IA3"), ("prefix", prefix, "PREFIX_TUNING")):
        path = str(tmp_path / name)
        peft.get_peft_model(hf_tiny.make_tiny_model("llama"), config).save_pretrained(path)
        error = _raises(
            UnsupportedAdapterError,
            f"adapter '{name}' .* is a PEFT {kind} adapter",
            load_peft_adapter,
            base,
            name,
            path,
        )
        assert isinstance(error, HfInputError)


def test_adapter_trained_on_another_hidden_size_is_a_mismatch(base, tmp_path):
    config = hf_tiny.tiny_config("llama")
    config.hidden_size = 32
    other = transformers.AutoModelForCausalLM.from_config(config)
    path = str(tmp_path / "wide")
    hf_tiny.save_peft_adapter(other, path, ["q_proj"], 4, 8.0, seed=1)
    _raises(
        AdapterMismatchError,
        r"adapter 'wide' \(.*\) does not fit the model: size mismatch for .*q_proj.lora_A.*\[4, 32\].*\[4, 64\]",
        load_peft_adapter,
        base,
        "wide",
        path,
    )


def test_adapter_for_modules_the_model_lacks_is_a_mismatch(base, tmp_path):
    path = str(tmp_path / "gpt2_adapter")
    hf_tiny.save_peft_adapter(hf_tiny.make_tiny_model("gpt2"), path, ["c_attn"], 4, 8.0, seed=1, fan_in_fan_out=True)
    _raises(
        AdapterMismatchError, r"adapter 'g' .* does not fit the model: .*c_attn", load_peft_adapter, base, "g", path
    )


@pytest.mark.parametrize("name", ["a/b", "", "foundation", ".hidden", "x y"])
def test_adapter_names_that_are_not_file_stems_are_refused_before_loading(llama, tmp_path, name):
    error = _raises(
        AdapterNameError,
        "must be a file stem",
        export_hf_lora,
        "/no/such/model",
        {name: llama.adapter_dirs["a"]},
        str(tmp_path),
    )
    assert f"'{name}'" in str(error)


def test_export_checks_every_directory_before_loading(llama, tmp_path):
    adapters = {"a": llama.adapter_dirs["a"], "b": str(tmp_path / "missing")}
    _raises(HfInputError, "adapter 'b' directory", export_hf_lora, "/no/such/model", adapters, str(tmp_path))
    _raises(
        HfInputError,
        "model directory '/no/such/model'",
        export_hf_lora,
        "/no/such/model",
        {"a": adapters["a"]},
        str(tmp_path),
    )
    _raises(ExportError, "at least one adapter", export_hf_swappable, llama.model_dir, {}, str(tmp_path))


def test_max_seq_len_beyond_the_models_positions_is_refused(llama, tmp_path):
    _raises(
        ExportError,
        r"max_seq_len 257 exceeds the model's max_position_embeddings 256",
        export_hf_lora,
        llama.model_dir,
        {"a": llama.adapter_dirs["a"]},
        str(tmp_path),
        257,
    )
    assert os.listdir(tmp_path) == []  # refused before writing anything


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
