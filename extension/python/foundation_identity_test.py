"""Program.load and Program.bind_adapter refuse an adapter exported for another foundation of the
same structure (the demo MLP drawn from two seeds), naming both, and keep the bound adapter."""

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.swappable import export_swappable
from edgeshare.extension.python import EdgeshareError, Program
from edgeshare.models.demo import make_adapter, make_foundation

X = torch.randn(4, 256, generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("foundations")
    out = {}
    for label, seed in (("a", 0), ("b", 7)):
        foundation = make_foundation(seed)
        adapters = {"lora_a": make_adapter(foundation, 1), "lora_b": make_adapter(foundation, 2)}
        out[label] = root / label
        export_swappable(foundation, adapters, (X,), str(out[label]), XnnpackPartitioner())
    return out


def _load(folder, adapter):
    return Program.load(str(folder / "lora.pte"), [str(folder / "foundation.ptd"), str(adapter)])


def test_bind_adapter_of_another_foundation_raises_and_keeps_the_bound_one(folders):
    program = _load(folders["b"], folders["b"] / "lora_a.ptd")
    forward = program.method("forward")
    (before,) = forward.execute(X.numpy())
    stranger = folders["a"] / "lora_b.ptd"
    with pytest.raises(EdgeshareError, match=r"lora_b\.ptd was exported for foundation [0-9a-f]{12}, but .*lora\.pte "
                       r"runs over foundation [0-9a-f]{12}") as info:
        program.bind_adapter(str(stranger))
    assert "\n" not in str(info.value)
    (after,) = forward.execute(X.numpy())
    np.testing.assert_array_equal(after, before)
    program.bind_adapter(str(folders["b"] / "lora_b.ptd"))  # its own foundation's adapter binds
    (swapped,) = forward.execute(X.numpy())
    assert not np.allclose(swapped, before, atol=1e-4)


def test_load_with_an_adapter_file_of_another_foundation_raises(folders):
    with pytest.raises(EdgeshareError, match=r"exported for foundation [0-9a-f]{12}, but .* foundation [0-9a-f]{12}"):
        _load(folders["b"], folders["a"] / "lora_a.ptd")


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
