"""fp16 fully connected weights (XnnpackPartitioner(fc_weight_dtype="fp16")) end to end: the demo's
two LoRA programs over a foundation.ptd of half the size, run together in one C++ runtime process
(//tools:run), against torch eager within the documented FP16_TOLERANCE; the foundation's fp16 keys
are fetched and packed once; weights read outside a fully connected op keep their fp32 copy; and
the default (fp32) export is unchanged.
"""

import hashlib
import os
import tempfile
from typing import Any, Dict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.backends.xnnpack.partitioner import FP16_TOLERANCE
from edgeshare.backends.xnnpack.preprocess import XnnpackBackend
from edgeshare.exir import to_edge
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.compile_spec import CompileSpec
from edgeshare.exir.errors import LoweringError
from edgeshare.exir.lora import export_lora
from edgeshare.models import demo_lora
from edgeshare.testing.run_binary import run_programs
from torch import nn

HALF, FLOAT = 5, 6


def _assert_within_tolerance(got: np.ndarray, want: np.ndarray, what: str) -> None:
    # The documented bound: |got - want| <= FP16_TOLERANCE * max(1, max|want|), elementwise.
    scale = float(np.max(np.abs(want)))
    bound = FP16_TOLERANCE * max(1.0, scale)
    err = np.abs(got - want)
    # Relative error only where it means something (elements near zero have none to speak of).
    big = np.abs(want) >= 0.1 * scale
    print(
        f"{what}: max abs error {float(err.max()):.3g} (bound {bound:.3g}), max|want| {scale:.3g}, "
        f"max abs error / max|want| {float(err.max()) / scale:.3g}, "
        f"max rel error where |want| >= 0.1 max|want| {float((err[big] / np.abs(want[big])).max()):.3g}"
    )
    assert float(err.max()) <= bound, (what, float(err.max()), bound)


@pytest.fixture(scope="module")
def exported() -> Dict[str, Any]:
    foundation, adapters, inputs = demo_lora()
    out = tempfile.mkdtemp(prefix="fp16_test_")
    fp16 = export_lora(
        foundation, adapters, inputs, os.path.join(out, "fp16"), XnnpackPartitioner(fc_weight_dtype="fp16")
    )
    fp32 = export_lora(foundation, adapters, inputs, os.path.join(out, "fp32"), XnnpackPartitioner())
    return {"fp16": fp16, "fp32": fp32, "inputs": inputs}


def _programs(result):
    return [result.program_paths[name] for name in sorted(result.program_paths)]


def test_foundation_holds_fp16_weights_in_half_the_bytes(exported):
    fp16, fp32 = exported["fp16"], exported["fp32"]
    size16 = fp16.files[fp16.foundation_path]
    size32 = fp32.files[fp32.foundation_path]
    print(f"foundation.ptd: fp32 {size32} bytes, fp16 {size16} bytes ({size16 / size32:.3f})")
    for name in sorted(fp16.program_paths):
        print(
            f"{name}.pte: fp32 {fp32.files[fp32.program_paths[name]]} bytes, "
            f"fp16 {fp16.files[fp16.program_paths[name]]} bytes"
        )
    assert 0.45 * size32 <= size16 <= 0.55 * size32
    assert fp16.shared_bytes * 2 == fp32.shared_bytes
    assert sorted(fp16.shared_keys) == sorted(k + ".fp16" for k in fp32.shared_keys)
    with open(fp16.foundation_path, "rb") as f:
        ptd = deserialize_ptd(f.read(), fp16.foundation_path)
    for key, blob in ptd.named_data.items():
        assert blob.tensor_layout.scalar_type == HALF, key
    # The same foundation gives the same file from every program (export_lora checks it) and
    # from every export.
    again = export_lora(
        *demo_lora(), tempfile.mkdtemp(prefix="fp16_again_"), XnnpackPartitioner(fc_weight_dtype="fp16")
    )
    with open(again.foundation_path, "rb") as a, open(fp16.foundation_path, "rb") as b:
        assert a.read() == b.read()


def test_delegate_graphs_name_half_constants_with_their_digests(exported):
    fp16 = exported["fp16"]
    with open(fp16.foundation_path, "rb") as f:
        ptd = deserialize_ptd(f.read(), fp16.foundation_path)
    for path in _programs(fp16):
        with open(path, "rb") as f:
            pte = deserialize_pte(f.read(), path)
        (plan,) = pte.program.executionPlans
        (delegate,) = plan.delegates
        assert [(s.key.decode() if isinstance(s.key, bytes) else s.key) for s in delegate.compileSpecs] == [
            "fc_weight_dtype"
        ]
        blob = pte.segments[delegate.segmentIndex]
        graph = xfb.GraphT.InitFromObj(xfb.Graph.GetRootAs(blob, 0))
        fc_params = set()
        for node in graph.nodes:
            if node.op == xfb.OpKind.FULLY_CONNECTED:
                fc_params.update(node.inputs[1:])
        for i, value in enumerate(graph.values):
            if value.kind != xfb.ValueKind.CONSTANT or value.key is None:
                continue
            key = value.key.decode()
            # Every named constant of this model is a fully connected weight or bias.
            assert i in fc_params and value.dtype == HALF and key.endswith(".fp16"), key
            data = ptd.named_data[key].data if key in ptd.named_data else pte.named_data[key].data
            assert bytes(value.digest) == hashlib.sha256(data).digest(), key
            assert len(data) == 2 * int(np.prod(value.dims)), key
        # Activations stay float32.
        assert all(v.dtype == FLOAT for v in graph.values if v.kind != xfb.ValueKind.CONSTANT)


def test_both_programs_match_torch_within_the_documented_tolerance(exported):
    fp16, inputs = exported["fp16"], exported["inputs"]
    run = run_programs(_programs(fp16), [fp16.foundation_path], [inputs[0].numpy()])
    with torch.no_grad():
        expected = {name: m(*inputs).numpy() for name, m in fp16.modules.items()}
    for name in fp16.program_paths:
        _assert_within_tolerance(run.outputs[f"{name}.forward"][0], expected[name], name)
    # The adapters really differ, so matching both means each program used its own.
    assert not np.allclose(expected["lora_a"], expected["lora_b"], atol=1e-3)


def test_foundation_fp16_keys_are_fetched_and_packed_once(exported):
    fp16, inputs = exported["fp16"], exported["inputs"]
    run = run_programs(_programs(fp16), [fp16.foundation_path], [inputs[0].numpy()])
    fetches = run.stats["named_data_fetches"]
    assert fp16.shared_keys and all(k.endswith(".fp16") for k in fp16.shared_keys)
    for key in fp16.shared_keys:
        assert fetches.get(key) == 1, f"foundation key {key} fetched {fetches.get(key)} times"
    foundation_linears = len([k for k in fp16.shared_keys if k.endswith(".weight.fp16")])
    adapter_weights = sum(len(keys) for keys in fp16.adapter_keys.values())
    assert run.stats["packed_entries"] == foundation_linears + adapter_weights
    assert run.stats["cache_hits"] == foundation_linears * (len(fp16.program_paths) - 1)
    assert run.stats["data_files_open"] == 1
    # Without sharing each program fetches its own copy, and the answers stay the same.
    off = run_programs(_programs(fp16), [fp16.foundation_path], [inputs[0].numpy()], share=False)
    for key in fp16.shared_keys:
        assert off.stats["named_data_fetches"][key] == len(fp16.program_paths)
    for name in fp16.program_paths:
        np.testing.assert_array_equal(off.outputs[f"{name}.forward"][0], run.outputs[f"{name}.forward"][0])


class _TiedBias(nn.Module):
    """The linear's weight and bias are read elementwise too; a weight is also read by a kernel."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = nn.Parameter(torch.randn(8, 8, generator=g) * 0.5)
        self.b = nn.Parameter(torch.randn(8, generator=g) * 0.5)
        self.v = nn.Parameter(torch.randn(8, 8, generator=g) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = F.linear(x, self.w, self.b) + self.b - self.w
        # tanh is no delegate op: v reaches it as an fp32 constant of the program.
        return F.linear(y, self.v) * torch.tanh(self.v)


def test_weights_read_elsewhere_keep_their_fp32_copy(tmp_path):
    module = _TiedBias().eval()
    x = torch.rand(8, 8, generator=torch.Generator().manual_seed(4))
    ep = torch.export.export(module, (x,))
    et = to_edge(ep).to_backend(XnnpackPartitioner(fc_weight_dtype="fp16")).to_executorch()
    paths = et.write_to_dir(str(tmp_path), "m")
    pte = deserialize_pte(et.buffer, paths[0])
    keys = set(pte.named_data)
    assert {"forward/w", "forward/b", "forward/w.fp16", "forward/b.fp16", "forward/v.fp16"} <= keys
    run = run_programs(paths[:1], inputs=[x.numpy()])
    fetches = run.stats["named_data_fetches"]
    for key in ("forward/w", "forward/b", "forward/w.fp16", "forward/b.fp16", "forward/v.fp16"):
        assert fetches.get(key) == 1, (key, fetches)
    with torch.no_grad():
        want = module(x).numpy()
    _assert_within_tolerance(run.outputs["m.forward"][0], want, "tied")


def test_default_is_fp32_and_unchanged():
    foundation, adapters, inputs = demo_lora()
    ep = torch.export.export(adapters["lora_a"], inputs)
    default = to_edge(ep).to_backend(XnnpackPartitioner()).to_executorch().buffer
    explicit = to_edge(ep).to_backend(XnnpackPartitioner(fc_weight_dtype="fp32")).to_executorch().buffer
    assert default == explicit
    pte = deserialize_pte(default, "default.pte")
    assert not any(k.endswith(".fp16") for k in pte.named_data)
    (delegate,) = pte.program.executionPlans[0].delegates
    assert not delegate.compileSpecs


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="fc_weight_dtype"):
        XnnpackPartitioner(fc_weight_dtype="bf16")
    ep = to_edge(torch.export.export(nn.Linear(4, 2), (torch.rand(1, 4),))).exported_program()
    with pytest.raises(LoweringError, match="fc_weight_dtype"):
        XnnpackBackend.preprocess(ep, [CompileSpec("fc_weight_dtype", b"int8")])
    with pytest.raises(LoweringError, match="unknown compile spec 'threads'"):
        XnnpackBackend.preprocess(ep, [CompileSpec("threads", b"2")])


class _Huge(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        with torch.no_grad():
            self.fc.weight[0, 0] = 1e6

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(x)


def test_weights_beyond_fp16_range_are_refused():
    edge = to_edge(torch.export.export(_Huge().eval(), (torch.rand(1, 4),)))
    with pytest.raises(LoweringError, match="beyond fp16's range"):
        edge.to_backend(XnnpackPartitioner(fc_weight_dtype="fp16"))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
