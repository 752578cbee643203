"""The Python example on the demo's files: both adapters' outputs equal torch eager's, and the
second program is served from the shared weights cache."""

import os

import numpy as np
import pytest
from edgeshare.examples.python.two_adapters import main


def test_both_adapters_match_torch_eager_and_share_the_foundation(tmp_path, capsys):
    argv = ["--data", os.environ["FOUNDATION_PTD"], "--outputs", str(tmp_path)]
    argv += ["--program", os.environ["LORA_A_PTE"], "--program", os.environ["LORA_B_PTE"]]
    argv += ["--inputs", os.environ["LORA_A_INPUT"]]
    assert main(argv) == 0
    for name in ("lora_a", "lora_b"):
        assert np.array_equal(np.load(os.environ[f"{name.upper()}_INPUT"]), np.load(os.environ["LORA_A_INPUT"]))
        got = np.load(tmp_path / f"{name}.forward.output0.npy")
        np.testing.assert_allclose(got, np.load(os.environ[f"{name.upper()}_OUTPUT"]), atol=1e-4, rtol=1e-4)
    printed = capsys.readouterr().out
    assert "lora_a.forward output 0" in printed and "lora_b.forward output 0" in printed
    hits = int(printed.split(" hits")[0].rsplit(" ", 1)[1])
    assert hits > 0, printed


def test_a_missing_file_is_a_one_line_error(capsys):
    assert main(["--data", "/nonexistent/foundation.ptd", "--program", os.environ["LORA_A_PTE"]]) == 1
    error = capsys.readouterr().err
    assert "/nonexistent/foundation.ptd" in error and len(error.strip().splitlines()) == 1


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
