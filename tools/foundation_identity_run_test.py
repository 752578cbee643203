"""An adapter knows its foundation: export_lora --swappable over two foundations of one structure
(the demo MLP drawn from two seeds), then //tools:run refuses an adapter file or a program over
the other foundation in one line naming both, while swaps within one foundation still run."""

import os

import pytest
import torch
from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte, foundation_identity, serialize_ptd
from edgeshare.models.demo import make_adapter, make_foundation
from edgeshare.testing.run_binary import RunError, run_programs
from edgeshare.tools import export_lora


def other_foundation():
    """The demo's structure and adapter seeds over a foundation drawn from another seed."""
    foundation = make_foundation(7)
    adapters = {"lora_a": make_adapter(foundation, 1), "lora_b": make_adapter(foundation, 2)}
    return foundation, adapters, (torch.randn(4, 256, generator=torch.Generator().manual_seed(3)),)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("foundations")
    a, b = str(root / "a"), str(root / "b")
    assert export_lora.main(["--out", a, "--swappable"]) == 0
    assert export_lora.main(["--out", b, "--swappable", "--model", f"{__file__}:other_foundation"]) == 0
    return a, b


def _identity(folder):
    with open(os.path.join(folder, "foundation.ptd"), "rb") as f:
        ptd = deserialize_ptd(f.read(), "foundation.ptd")
    return foundation_identity({k: (b.data, 1, None, b.digest) for k, b in ptd.named_data.items()})


def _refusal(programs, data, extra=()):
    with pytest.raises(RunError) as info:
        run_programs(programs, data, extra_args=list(extra))
    assert info.value.returncode == 1
    assert "\n" not in info.value.message
    return info.value.message


def test_programs_and_adapter_files_record_their_foundation(folders):
    for folder in folders:
        identity = _identity(folder)
        with open(os.path.join(folder, "lora.pte"), "rb") as f:
            assert bytes(deserialize_pte(f.read()).program.foundationDigest) == identity
        with open(os.path.join(folder, "lora_a.ptd"), "rb") as f:
            assert bytes(deserialize_ptd(f.read()).flat_tensor.foundationDigest) == identity
        with open(os.path.join(folder, "foundation.ptd"), "rb") as f:
            assert deserialize_ptd(f.read()).flat_tensor.foundationDigest is None
    assert _identity(folders[0]) != _identity(folders[1])


def test_adapter_swap_over_another_foundation_is_refused_naming_both(folders):
    a, b = folders
    stranger = os.path.join(a, "lora_b.ptd")
    message = _refusal(
        [os.path.join(b, "lora.pte")],
        [os.path.join(b, "foundation.ptd"), os.path.join(b, "lora_a.ptd")],
        ["--swap-adapter", stranger],
    )
    assert stranger in message
    assert f"exported for foundation {_identity(a).hex()[:12]}" in message
    assert f"runs over foundation {_identity(b).hex()[:12]}" in message


def test_adapter_file_of_another_foundation_is_refused_at_load(folders):
    a, b = folders
    message = _refusal(
        [os.path.join(b, "lora.pte")], [os.path.join(b, "foundation.ptd"), os.path.join(a, "lora_a.ptd")]
    )
    assert os.path.join(a, "lora_a.ptd") in message
    assert _identity(a).hex()[:12] in message and _identity(b).hex()[:12] in message


def test_program_over_another_foundation_is_refused_naming_both(folders):
    a, b = folders
    message = _refusal(
        [os.path.join(a, "lora.pte")], [os.path.join(b, "foundation.ptd"), os.path.join(b, "lora_a.ptd")]
    )
    assert os.path.join(a, "lora.pte") in message and os.path.join(b, "foundation.ptd") in message
    assert f"exported for foundation {_identity(a).hex()[:12]}" in message
    assert f"foundation {_identity(b).hex()[:12]}" in message


def test_swaps_within_one_foundation_still_run(folders):
    _, b = folders
    result = run_programs(
        [os.path.join(b, "lora.pte")],
        [os.path.join(b, "foundation.ptd"), os.path.join(b, "lora_a.ptd")],
        extra_args=["--swap-adapter", os.path.join(b, "lora_b.ptd")],
    )
    assert "lora@lora_b.forward" in result.outputs


def test_adapter_file_that_records_no_foundation_is_not_checked(folders, tmp_path):
    """Files written before adapters recorded their foundation bind as they always did."""
    a, b = folders
    with open(os.path.join(a, "lora_b.ptd"), "rb") as f:
        ptd = deserialize_ptd(f.read())
    old = tmp_path / "old.ptd"
    entries = {k: (blob.data, 64, blob.tensor_layout, blob.digest) for k, blob in ptd.named_data.items()}
    old.write_bytes(serialize_ptd(entries))
    result = run_programs(
        [os.path.join(b, "lora.pte")],
        [os.path.join(b, "foundation.ptd"), os.path.join(b, "lora_a.ptd")],
        extra_args=["--swap-adapter", str(old)],
    )
    assert "lora@old.forward" in result.outputs


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
