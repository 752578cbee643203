"""A LoRA transformer block (attention with q/k/v/o LoRA linears, matmul, softmax, layer norms,
reshape/permute, an MLP) exported with the XnnpackPartitioner, partially delegated, run through
the real C++ runtime (//tools:run) and compared with torch eager; then two adapters as two methods
of ONE .pte, where the weights cache must fetch and pack each foundation weight once."""

import os
import tempfile
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir._serialize import Segment, deserialize_pte, serialize_pte
from edgeshare.exir.lora import LoraExportResult, export_lora
from edgeshare.models import TransformerBlock, lora_state_dict
from edgeshare.schema import program_generated as fb
from edgeshare.testing.run_binary import RunError, run_programs
from torch import nn

TOLERANCE = 1e-4
DIM, HEADS, BATCH, TOKENS = 32, 4, 2, 5


LINEARS = ("q", "k", "v", "o", "up", "down")


def _adapter(model: nn.Module, layers: Sequence[str], rank: int, seed: int) -> Dict[str, torch.Tensor]:
    return lora_state_dict(model, layers, rank, seed, scale=0.2)


def _input() -> torch.Tensor:
    return torch.randn(BATCH, TOKENS, DIM, generator=torch.Generator().manual_seed(5))


def _expected(result: LoraExportResult, x: torch.Tensor) -> Dict[str, np.ndarray]:
    with torch.no_grad():
        return {name: module(x).numpy() for name, module in result.modules.items()}


def _kernel_and_delegate_calls(path: str, method: str) -> Tuple[List[str], int]:
    pte = deserialize_pte(open(path, "rb").read(), path)
    plan = next(p for p in pte.program.executionPlans if p.name.decode() == method)
    kernels, delegates = [], 0
    for ins in plan.instructions:
        if ins.instrArgsType == fb.InstructionArguments.KernelCall:
            kernels.append(plan.operators[ins.instrArgs.opIndex].name.decode())
        else:
            delegates += 1
    return kernels, delegates


@pytest.fixture(scope="module")
def block() -> TransformerBlock:
    return TransformerBlock().eval()


@pytest.fixture(scope="module")
def single(block: TransformerBlock) -> LoraExportResult:
    adapters = {"qkvo": _adapter(block, ("q", "k", "v", "o"), 4, 1)}
    out = tempfile.mkdtemp(prefix="lora_block_")
    return export_lora(block, adapters, (_input(),), out, XnnpackPartitioner(), alpha=8.0)


@pytest.fixture(scope="module")
def two_methods(block: TransformerBlock) -> LoraExportResult:
    adapters = {
        "first": _adapter(block, ("q", "k", "v", "o"), 4, 1),
        "second": _adapter(block, ("q", "v", "up", "down"), 2, 2),
    }
    out = tempfile.mkdtemp(prefix="lora_block_methods_")
    return export_lora(
        block, adapters, (_input(),), out, XnnpackPartitioner(), multi_method=True, program_name="both", alpha=8.0
    )


def test_lora_block_is_partially_delegated_and_matches_torch(single: LoraExportResult) -> None:
    path = single.program_paths["qkvo"]
    kernels, delegates = _kernel_and_delegate_calls(path, "forward")
    # Layer norms, the attention matmuls and permutes stay portable; the linears are delegated.
    assert {"aten::native_layer_norm", "aten::bmm", "aten::permute"} <= set(kernels)
    assert "aten::linear" not in kernels and delegates >= 2
    x = _input()
    run = run_programs([path], [single.foundation_path], [x.numpy()])
    got = run.outputs["qkvo.forward"][0]
    want = _expected(single, x)["qkvo"]
    assert got.shape == want.shape == (BATCH, TOKENS, DIM)
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=TOLERANCE)
    # The adapter changes the output: matching it means the program used it.
    with torch.no_grad():
        bare = TransformerBlock().eval()(x).numpy()
    assert not np.allclose(want, bare, atol=1e-3)


def test_lora_block_without_a_delegate_matches_torch(block: TransformerBlock, tmp_path: Any) -> None:
    # Every op a portable kernel; the foundation's weights are external constants in the .ptd.
    adapters = {"qkvo": _adapter(block, ("q", "k", "v", "o"), 4, 1)}
    result = export_lora(block, adapters, (_input(),), str(tmp_path), partitioner=None, alpha=8.0)
    path = result.program_paths["qkvo"]
    kernels, delegates = _kernel_and_delegate_calls(path, "forward")
    assert delegates == 0 and "aten::linear" in kernels
    x = _input()
    run = run_programs([path], [result.foundation_path], [x.numpy()])
    np.testing.assert_allclose(
        run.outputs["qkvo.forward"][0], _expected(result, x)["qkvo"], atol=TOLERANCE, rtol=TOLERANCE
    )
    assert run.stats["named_data_fetches"] == {} and run.stats["data_files_open"] == 1
    # No delegate: the executor alone fetches the foundation, each key once, hashed once.
    assert run.stats["data_map_fetches"] == {key: 1 for key in result.shared_keys}
    assert run.stats["external_constants"]["verifications"] == len(result.shared_keys)


def test_two_adapters_in_one_pte_match_torch(two_methods: LoraExportResult) -> None:
    (path,) = set(two_methods.program_paths.values())
    assert os.path.basename(path) == "both.pte"
    for method in ("first", "second"):
        kernels, delegates = _kernel_and_delegate_calls(path, method)
        assert "aten::native_layer_norm" in kernels and delegates >= 2, method
    x = _input()
    run = run_programs([path], [two_methods.foundation_path], [x.numpy()])
    expected = _expected(two_methods, x)
    for method in ("first", "second"):
        np.testing.assert_allclose(run.outputs[f"both.{method}"][0], expected[method], atol=TOLERANCE, rtol=TOLERANCE)
    assert not np.allclose(expected["first"], expected["second"], atol=1e-3)


def test_two_methods_fetch_and_pack_each_foundation_weight_once(
    block: TransformerBlock, two_methods: LoraExportResult
) -> None:
    (path,) = set(two_methods.program_paths.values())
    run = run_programs([path], [two_methods.foundation_path], [_input().numpy()])
    stats = run.stats
    fetches: Dict[str, int] = stats["named_data_fetches"]  # type: ignore[assignment]
    linear_keys = {f"{name}.{p}" for name in LINEARS for p in ("weight", "bias")}
    norm_keys = {f"{name}.{p}" for name in ("ln1", "ln2") for p in ("weight", "bias")}
    assert set(two_methods.shared_keys) == linear_keys | norm_keys
    for key in two_methods.shared_keys:
        # The delegate's weights: fetched once for both methods. The layer norms' weights stay
        # with the portable kernels (external constants read zero-copy from the one mapping of
        # foundation.ptd): the weights cache never fetches them.
        want = 1 if key in linear_keys else None
        assert fetches.get(key) == want, f"foundation key {key} fetched {fetches.get(key)} times: {fetches}"
    assert all(fetches[key] == 1 for key in fetches), fetches
    # Counted at the data map, the executor's own fetches of the layer norms included: every
    # foundation key leaves foundation.ptd once for both methods, and its bytes are hashed once.
    at_map: Dict[str, int] = stats["data_map_fetches"]  # type: ignore[assignment]
    assert at_map == {key: 1 for key in two_methods.shared_keys}, at_map
    constants: Dict[str, int] = stats["external_constants"]  # type: ignore[assignment]
    assert constants["fetches"] == constants["verifications"] == len(norm_keys), constants
    assert constants["shared_hits"] == len(norm_keys), constants
    foundation_linears = len(LINEARS)
    adapter_matrices = sum(len(keys) for keys in two_methods.adapter_keys.values())
    assert adapter_matrices == 8 + 8
    # One packed operator per foundation linear (shared by both methods) plus one per adapter matrix
    # per method; the second method finds every foundation linear already packed.
    assert stats["packed_entries"] == foundation_linears + adapter_matrices
    assert stats["cache_hits"] == foundation_linears
    assert stats["packs"] == foundation_linears + adapter_matrices
    assert stats["data_files_open"] == 1


def test_without_sharing_each_method_packs_its_own_foundation(two_methods: LoraExportResult) -> None:
    (path,) = set(two_methods.program_paths.values())
    x = _input()
    run = run_programs([path], [two_methods.foundation_path], [x.numpy()], share=False)
    fetches: Dict[str, int] = run.stats["named_data_fetches"]  # type: ignore[assignment]
    for name in LINEARS:
        assert fetches.get(f"{name}.weight") == 2, (name, fetches)
    # At the data map every foundation key, delegated or not, is fetched by each method.
    at_map: Dict[str, int] = run.stats["data_map_fetches"]  # type: ignore[assignment]
    assert at_map == {key: 2 for key in two_methods.shared_keys}, at_map
    assert run.stats["cache_hits"] == 0
    expected = _expected(two_methods, x)
    for method in ("first", "second"):
        np.testing.assert_allclose(run.outputs[f"both.{method}"][0], expected[method], atol=TOLERANCE, rtol=TOLERANCE)


def test_foundation_of_another_seed_is_refused_at_load_naming_both(single: LoraExportResult, tmp_path: Any) -> None:
    # Same keys, dtypes and shapes, honest digests, other bytes: the program records the identity
    # of the foundation it was exported over, and loading it over another is refused before any
    # weight is read, naming both files.
    other = TransformerBlock(seed=1).eval()
    adapters = {"qkvo": _adapter(other, ("q", "k", "v", "o"), 4, 1)}
    other_result = export_lora(other, adapters, (_input(),), str(tmp_path), XnnpackPartitioner(), alpha=8.0)
    with pytest.raises(RunError) as error:
        run_programs([single.program_paths["qkvo"]], [other_result.foundation_path], [_input().numpy()])
    message = str(error.value)
    assert "was exported for foundation" in message and "\n" not in message.strip(), message
    assert other_result.foundation_path in message and "qkvo.pte" in message, message


def _tampered_foundation(single: LoraExportResult, block: TransformerBlock, tmp_path: Any) -> str:
    """single's foundation.ptd with one byte of ln2.weight changed, its digests kept."""
    data = bytearray(open(single.foundation_path, "rb").read())
    weight = block.ln2.weight.detach().numpy().tobytes()
    at = data.find(weight)
    assert at >= 0 and data.find(weight, at + 1) < 0
    data[at + 3] ^= 0x80  # the sign of its first element
    path = os.path.join(str(tmp_path), "tampered_foundation.ptd")
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_tampered_layer_norm_fails_naming_the_key_and_no_verify_runs_it(
    block: TransformerBlock, single: LoraExportResult, tmp_path: Any
) -> None:
    tampered = _tampered_foundation(single, block, tmp_path)
    path = single.program_paths["qkvo"]
    x = _input()
    with pytest.raises(RunError) as error:
        run_programs([path], [tampered], [x.numpy()])
    message = str(error.value)
    assert "constant 'ln2.weight'" in message and "tampered_foundation.ptd" in message, message
    # The trusted-file mode takes the bytes as they are: it runs, and the answer moves.
    run = run_programs([path], [tampered], [x.numpy()], extra_args=["--no-verify"])
    assert run.stats["verify"] is False and run.stats["external_constants"]["verifications"] == 0
    assert not np.allclose(run.outputs["qkvo.forward"][0], _expected(single, x)["qkvo"], atol=1e-6)


def test_program_without_recorded_digests_loads_as_before(single: LoraExportResult, tmp_path: Any) -> None:
    # A program written before Tensor.external_digest existed: dtype and shape are checked, the
    # bytes are still hashed against the data file's digest.
    path = single.program_paths["qkvo"]
    pte = deserialize_pte(open(path, "rb").read(), path)
    stripped = 0
    for plan in pte.program.executionPlans:
        for value in plan.values:
            if value.valType == fb.KernelTypes.Tensor and value.val.externalKey:
                assert len(value.val.externalDigest) == 32
                value.val.externalDigest = None
                stripped += 1
    assert stripped == 4  # ln1 and ln2, weight and bias
    for entry in pte.program.namedData or []:
        entry.key = entry.key.decode() if isinstance(entry.key, bytes) else entry.key
    alignment = pte.program.segmentAlignment
    old = os.path.join(str(tmp_path), "qkvo.pte")
    with open(old, "wb") as f:
        f.write(serialize_pte(pte.program, [Segment(s, alignment) for s in pte.segments], alignment))
    x = _input()
    run = run_programs([old], [single.foundation_path], [x.numpy()])
    np.testing.assert_allclose(
        run.outputs["qkvo.forward"][0], _expected(single, x)["qkvo"], atol=TOLERANCE, rtol=TOLERANCE
    )
    assert run.stats["external_constants"]["verifications"] == 4


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
