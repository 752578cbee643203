"""export_lora: the demo files the genrule made, the tool's own output folder handling, and --model
adapters whose names say nothing (down/up LoRA, a tied lm_head, a replaced weight) run through the
C++ runtime against torch."""

import glob
import os

import numpy as np
import pytest
import torch
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.export_options import AdapterOptions, ExportOptions, QuantizationOptions
from edgeshare.exir.tensor_layout import tensor_bytes
from edgeshare.models import lora_variants
from edgeshare.testing.run_binary import run_programs
from edgeshare.tools import export_lora

TOLERANCE = 1e-4


def _demo_dir():
    path = os.environ["LORA_A_PTE"]
    return os.path.dirname(os.path.abspath(path))


def test_genrule_wrote_the_demo_files():
    folder = _demo_dir()
    for name in ("lora_a", "lora_b"):
        with open(os.path.join(folder, f"{name}.pte"), "rb") as f:
            pte = deserialize_pte(f.read(), f"{name}.pte")
        assert [p.name for p in pte.program.executionPlans] == [b"forward"]
        x = np.load(os.path.join(folder, f"{name}.forward.input0.npy"))
        y = np.load(os.path.join(folder, f"{name}.forward.output0.npy"))
        assert x.shape == (4, 256) and y.shape == (4, 256)
        assert x.dtype == np.float32 and y.dtype == np.float32
    with open(os.path.join(folder, "foundation.ptd"), "rb") as f:
        ptd = deserialize_ptd(f.read(), "foundation.ptd")
    assert sorted(ptd.named_data) == [f"fc{i}.{w}" for i in (1, 2, 3) for w in ("bias", "weight")]


def test_methods_flag_writes_one_multi_method_pte(tmp_path, capsys):
    assert export_lora.main(["--out", str(tmp_path), "--methods", "--reference"]) == 0
    names = sorted(os.listdir(tmp_path))
    assert "lora.pte" in names and "foundation.ptd" in names
    assert "lora.lora_a.input0.npy" in names and "lora.lora_b.output0.npy" in names
    with open(tmp_path / "lora.pte", "rb") as f:
        pte = deserialize_pte(f.read())
    assert sorted(p.name for p in pte.program.executionPlans) == [b"lora_a", b"lora_b"]
    assert "shared" in capsys.readouterr().out


def test_fc_weight_dtype_fp16_writes_half_foundation_weights(tmp_path):
    assert export_lora.main(["--out", str(tmp_path), "--fc-weight-dtype", "fp16"]) == 0
    with open(tmp_path / "foundation.ptd", "rb") as f:
        ptd = deserialize_ptd(f.read(), "foundation.ptd")
    assert sorted(ptd.named_data) == [f"fc{i}.{w}.fp16" for i in (1, 2, 3) for w in ("bias", "weight")]
    assert all(b.tensor_layout.scalar_type == 5 for b in ptd.named_data.values())


@pytest.mark.parametrize("option, suffix", [("int8", ".qb8w"), ("int8-row", ".qc8w")])
def test_quantize_int8_writes_int8_foundation_weights_and_reports_bytes_per_format(tmp_path, capsys, option, suffix):
    assert export_lora.main(["--out", str(tmp_path), "--quantize", option]) == 0
    with open(tmp_path / "foundation.ptd", "rb") as f:
        ptd = deserialize_ptd(f.read(), "foundation.ptd")
    int8 = {k: len(b.data) for k, b in ptd.named_data.items() if b.tensor_layout.scalar_type == 1}
    assert sorted(int8) == [f"fc{i}.weight{suffix}" for i in (1, 2, 3)]
    fp32 = sum(len(b.data) for b in ptd.named_data.values() if b.tensor_layout.scalar_type == 6)
    out = capsys.readouterr().out
    assert f"fp32 {fp32} bytes" in out and f"int8 {sum(int8.values())} bytes" in out


def test_quantize_int4_writes_grouped_int4_weights_and_reports_bytes_per_format(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--quantize", "int4", "--group-size", "128"]
    assert export_lora.main(argv) == 0
    with open(tmp_path / "foundation.ptd", "rb") as f:
        ptd = deserialize_ptd(f.read(), "foundation.ptd")
    int4 = {k: b for k, b in ptd.named_data.items() if b.tensor_layout.scalar_type == 0}
    assert sorted(int4) == [f"fc{i}.weight.qc4w" for i in (1, 2, 3)]
    # Two values a byte; one float16 scale per 128 inputs.
    for key, blob in int4.items():
        out_size, half_in = blob.tensor_layout.sizes
        scales = ptd.named_data[key + ".scales"].tensor_layout
        assert scales.scalar_type == 5 and list(scales.sizes) == [out_size, 2 * half_in // 128]
    out = capsys.readouterr().out
    assert f"int4 {sum(len(b.data) for b in int4.values())} bytes" in out and "int8, not int4" not in out


def test_a_non_empty_out_is_refused_untouched_and_force_replaces_it_whole(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "tokenizer.json").write_text("another model's")
    assert export_lora.main(["--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty" in err and "--force" in err
    assert sorted(os.listdir(out)) == ["tokenizer.json"]
    assert export_lora.main(["--out", str(out), "--force"]) == 0
    # Only the new export: the stale file went with the old folder, nothing is left beside it.
    assert "tokenizer.json" not in os.listdir(out) and "foundation.ptd" in os.listdir(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    summary = capsys.readouterr().out
    assert ".partial-" not in summary and str(out) in summary


def test_a_failed_export_leaves_a_new_out_absent_and_nothing_beside_it(tmp_path, capsys):
    out = tmp_path / "out"
    assert export_lora.main(["--out", str(out), "--model", "nope.py:f"]) == 1
    assert os.listdir(tmp_path) == []


def test_group_size_without_int4_is_a_clear_error(tmp_path, capsys):
    assert export_lora.main(["--out", str(tmp_path), "--quantize", "int8", "--group-size", "64"]) == 1
    assert "--group-size and --lm-head apply to --quantize int4" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "foundation.ptd")


def test_flags_build_the_export_options_the_python_api_takes():
    args = export_lora._parser().parse_args(
        ["--quantize", "int4", "--group-size", "64", "--lm-head", "int4", "--methods", "--name", "all"]
    )
    assert export_lora.export_options(args) == ExportOptions(
        multi_method=True,
        program_name="all",
        quantization=QuantizationOptions(quantize="int4", group_size=64, lm_head="int4"),
    )
    swappable = export_lora._parser().parse_args(["--swappable", "--fc-weight-dtype", "fp16"])
    assert export_lora.export_options(swappable) == ExportOptions(
        quantization=QuantizationOptions(fc_weight_dtype="fp16"), adapters=AdapterOptions(swappable=True)
    )
    int8 = export_lora._parser().parse_args(["--adapter-dtype", "int8"])
    assert export_lora.export_options(int8) == ExportOptions(adapters=AdapterOptions(adapter_dtype="int8"))


def test_quantize_with_fp16_weights_is_a_clear_error(tmp_path, capsys):
    assert export_lora.main(["--out", str(tmp_path), "--quantize", "int8", "--fc-weight-dtype", "fp16"]) == 1
    assert "--quantize cannot be combined with --fc-weight-dtype fp16" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "foundation.ptd")


def test_bad_model_spec_is_a_clear_error(tmp_path, capsys):
    assert export_lora.main(["--out", str(tmp_path), "--model", "nope.py:f"]) == 1
    assert "nope.py" in capsys.readouterr().err


USER_MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8, bias=False)

    def forward(self, x):
        return torch.sigmoid(self.proj(x))


def make():
    torch.manual_seed(0)
    net = Net()
    adapter = {"proj.lora_a.weight": torch.full((1, 8), 0.1), "proj.lora_b.weight": torch.full((8, 1), 0.2)}
    return net, {"tuned": adapter}, (torch.randn(2, 8),)
"""


def test_model_file_resolves_against_the_users_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "user_model.py").write_text(USER_MODEL)
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    assert export_lora.main(["--model", "models/user_model.py:make", "--out", "out", "--reference"]) == 0
    assert sorted(os.listdir(tmp_path / "out")) == [
        "foundation.ptd",
        "tuned.forward.input0.npy",
        "tuned.forward.output0.npy",
        "tuned.pte",
    ]
    assert "proj.weight" in capsys.readouterr().out


DOWN_UP_MODEL = """
import torch
from torch import nn


class DownUp(nn.Module):
    def __init__(self, layer, rank, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.layer = layer
        self.down_proj = nn.Linear(layer.in_features, rank, bias=False)
        self.up_proj = nn.Linear(rank, layer.out_features, bias=False)
        with torch.no_grad():
            self.down_proj.weight.copy_(torch.randn(rank, layer.in_features, generator=g) * 0.3)
            self.up_proj.weight.copy_(torch.randn(layer.out_features, rank, generator=g) * 0.3)

    def forward(self, x):
        return self.layer(x) + self.up_proj(self.down_proj(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed_proj = nn.Linear(12, 24)
        self.out_proj = nn.Linear(24, 12)

    def forward(self, x):
        return self.out_proj(torch.relu(self.embed_proj(x)))


def make():
    net = Net().eval()
    adapters = {}
    for name, seed in (("chat", 1), ("code", 2)):
        model = Net().eval()  # the same seed: equal weights, other tensors
        model.embed_proj = DownUp(model.embed_proj, 3, seed)
        model.out_proj = DownUp(model.out_proj, 2, seed + 10)
        adapters[name] = model
    return net, adapters, (torch.randn(5, 12, generator=torch.Generator().manual_seed(4)),)
"""


def _export_and_run(tmp_path, monkeypatch, spec):
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    assert export_lora.main(["--model", spec, "--out", "out", "--reference"]) == 0
    out = str(tmp_path / "out")
    programs = sorted(glob.glob(os.path.join(out, "*.pte")))
    names = [os.path.splitext(os.path.basename(p))[0] for p in programs]
    x = np.load(os.path.join(out, f"{names[0]}.forward.input0.npy"))
    run = run_programs(programs, [os.path.join(out, "foundation.ptd")], [x])
    for name in names:
        assert np.array_equal(np.load(os.path.join(out, f"{name}.forward.input0.npy")), x)
        want = np.load(os.path.join(out, f"{name}.forward.output0.npy"))
        np.testing.assert_allclose(run.outputs[f"{name}.forward"][0], want, atol=TOLERANCE, rtol=TOLERANCE)
    ptd = deserialize_ptd(open(os.path.join(out, "foundation.ptd"), "rb").read(), "foundation.ptd")
    return out, run, ptd


def test_model_file_with_down_up_adapters_shares_the_foundation_and_matches_torch(tmp_path, monkeypatch):
    (tmp_path / "down_up.py").write_text(DOWN_UP_MODEL)
    out, run, ptd = _export_and_run(tmp_path, monkeypatch, "down_up.py:make")
    assert sorted(ptd.named_data) == [f"{m}.{w}" for m in ("embed_proj", "out_proj") for w in ("bias", "weight")]
    for name in ("chat", "code"):
        pte = deserialize_pte(open(os.path.join(out, f"{name}.pte"), "rb").read())
        assert sorted(pte.named_data) == [
            f"forward/{m}.{w}.weight" for m in ("embed_proj", "out_proj") for w in ("down_proj", "up_proj")
        ]
    # Both programs run over one copy of the foundation: each weight fetched once, packed once.
    fetches = run.stats["named_data_fetches"]
    assert all(fetches.get(key) == 1 for key in ("embed_proj.weight", "out_proj.weight")), fetches
    assert run.stats["cache_hits"] >= 2


def test_tied_lm_head_is_stored_and_packed_once_and_matches_torch(tmp_path, monkeypatch):
    out, run, ptd = _export_and_run(tmp_path, monkeypatch, "edgeshare.models.lora_variants:tied_lm_lora")
    foundation, _, _ = lora_variants.tied_lm_lora()
    assert sorted(ptd.named_data) == ["embed.weight", "proj.bias", "proj.weight"]
    raw = tensor_bytes(foundation.embed.weight)
    hits = {
        n: open(p, "rb").read().count(raw) for p in glob.glob(os.path.join(out, "*.pt?")) for n in [os.path.basename(p)]
    }
    assert {n: c for n, c in hits.items() if c} == {"foundation.ptd": 1}
    # The lm_head (delegated linear) and the embedding read one key, out of the file once: the
    # delegate packs the bytes the executor already holds for the embedding kernel.
    assert run.stats["data_map_fetches"].get("embed.weight") == 1, run.stats
    assert run.stats["named_data_fetches"].get("embed.weight", 0) == 0, run.stats
    assert np.load(os.path.join(out, "chat.forward.input0.npy")).dtype == np.int64


def test_adapter_replacing_a_foundation_weight_keeps_it_and_matches_torch(tmp_path, monkeypatch, capsys):
    out, run, ptd = _export_and_run(tmp_path, monkeypatch, "edgeshare.models.lora_variants:replaced_weight")
    foundation, adapters, _ = lora_variants.replaced_weight()
    tuned = deserialize_pte(open(os.path.join(out, "tuned.pte"), "rb").read())
    assert sorted(tuned.named_data) == ["forward/fc2.weight"]
    assert tuned.named_data["forward/fc2.weight"].data == tensor_bytes(adapters["tuned"].fc2.weight)
    assert ptd.named_data["fc2.weight"].data == tensor_bytes(foundation.fc2.weight)
    assert sorted(ptd.named_data) == sorted(foundation.state_dict())
    with torch.no_grad():
        x = torch.from_numpy(np.load(os.path.join(out, "tuned.forward.input0.npy")))
        assert not np.allclose(adapters["tuned"](x).numpy(), foundation(x).numpy(), atol=1e-3)


def test_foundation_by_names_is_the_old_rule_and_fails_on_down_up_names(tmp_path, monkeypatch, capsys):
    (tmp_path / "down_up.py").write_text(DOWN_UP_MODEL)
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    assert export_lora.main(["--model", "down_up.py:make", "--out", "out", "--foundation-by", "names"]) == 1
    assert "adapter 'chat': weight 'embed_proj.layer.weight'" in capsys.readouterr().err


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
