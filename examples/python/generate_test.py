"""The generation example equals transformers' greedy tokens for both adapters and the foundation."""

import json
import os

import numpy as np
import pytest
from edgeshare.examples.python.generate import generate_all


def test_the_example_generates_transformers_tokens() -> None:
    expected_path = os.environ["GENERATION_EXPECTED_JSON"]
    folder = os.path.dirname(expected_path)
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    prompt = np.load(os.path.join(folder, "prompt.npy")).reshape(-1)
    programs = [os.path.join(folder, f"{name}.pte") for name in ("a", "b", "foundation")]
    got = generate_all(os.path.join(folder, "foundation.ptd"), programs, prompt, expected["new_tokens"])
    for name in ("a", "b", "foundation"):
        assert got[name] == expected["tokens"][name], name


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
