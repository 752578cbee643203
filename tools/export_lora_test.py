"""export_lora: the demo files the genrule made, and the tool's own output folder handling."""

import os

import numpy as np
import pytest

from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.tools import export_lora


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
        "foundation.ptd", "tuned.forward.input0.npy", "tuned.forward.output0.npy", "tuned.pte",
    ]
    assert "proj.weight" in capsys.readouterr().out


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
