"""Program.bind_adapter: adapters exported with --swappable swapped on one loaded lora.pte.

A tiny Llama with PEFT adapters "a" and "c" of one structure and "b" of another. After each swap
(a -> c -> a -> c) the logits equal that adapter's own program at two token counts, the weights
cache neither fetches nor packs anything, and a file that is no adapter of the program (another
structure, the foundation's, a corrupt one) raises EdgeshareError and leaves the previous adapter
in place.
"""

import os

import numpy as np
import pytest
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import export_hf_lora, export_hf_swappable
from edgeshare.extension.python import DataFile, EdgeshareError, Program, weights_cache_stats
from edgeshare.models import hf_tiny

TOLERANCE = 1e-5
MAX_SEQ_LEN = 32
TOKENS = (3, 17)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("swap"))
    files = hf_tiny.save_tiny_lora("llama", os.path.join(root, "in"))
    same = {"a": files.adapter_dirs["a"], "c": hf_tiny.save_twin_adapter("llama", os.path.join(root, "in"))}
    swap = os.path.join(root, "swap")
    export_hf_swappable(files.model_dir, same, swap, MAX_SEQ_LEN, XnnpackPartitioner())
    own = os.path.join(root, "own")
    export_hf_lora(files.model_dir, same, own, MAX_SEQ_LEN, XnnpackPartitioner())
    other = os.path.join(root, "other")
    export_hf_swappable(files.model_dir, {"b": files.adapter_dirs["b"]}, other, MAX_SEQ_LEN, XnnpackPartitioner())
    return root


def _ids(tokens):
    return np.random.default_rng(tokens).integers(0, hf_tiny.VOCAB, size=(1, tokens), dtype=np.int64)


@pytest.fixture(scope="module")
def want(exported):
    """Each adapter's own program's logits, per token count."""
    foundation = DataFile.open(os.path.join(exported, "own", "foundation.ptd"))
    logits = {}
    for name in ("a", "c"):
        forward = Program.load(os.path.join(exported, "own", f"{name}.pte"), [foundation]).method("forward")
        logits[name] = {t: forward.execute(_ids(t))[0] for t in TOKENS}
    assert not np.allclose(logits["a"][3], logits["c"][3], atol=1e-3), "a and c should differ"
    return logits


def _load(exported):
    swap = os.path.join(exported, "swap")
    return Program.load(
        os.path.join(swap, "lora.pte"), [os.path.join(swap, "foundation.ptd"), os.path.join(swap, "a.ptd")]
    )


def _check(program, want, name):
    forward = program.method("forward")
    for tokens in TOKENS:
        (got,) = forward.execute(_ids(tokens))
        np.testing.assert_allclose(got, want[name][tokens], atol=TOLERANCE, rtol=TOLERANCE, err_msg=name)


def _cache(stats):
    return {k: stats[k] for k in ("packs", "bytes_fetched", "packed_entries", "named_data_fetches")}


def test_swaps_back_and_forth_equal_each_adapters_own_program_and_fetch_nothing(exported, want):
    program = _load(exported)
    _check(program, want, "a")
    before = _cache(weights_cache_stats())
    for name in ("c", "a", "c"):
        program.bind_adapter(os.path.join(exported, "swap", f"{name}.ptd"))
        assert program.adapter is not None and program.adapter.path.endswith(f"{name}.ptd")
        _check(program, want, name)
    assert _cache(weights_cache_stats()) == before


def test_generation_after_swaps_equals_each_adapters_own_program(exported):
    """forward_cached (the KV cache) swaps with forward: greedy tokens after a -> c -> a -> c on one
    loaded lora.pte equal each adapter's own program's, token for token (the cache is reset)."""
    foundation = DataFile.open(os.path.join(exported, "own", "foundation.ptd"))
    prompt = _ids(5)
    own = {
        name: Program.load(os.path.join(exported, "own", f"{name}.pte"), [foundation])
        .method("forward_cached")
        .generate(prompt, 16)
        .tokens
        for name in ("a", "c")
    }
    assert own["a"] != own["c"]
    program = _load(exported)
    assert program.method("forward_cached").generate(prompt, 16).tokens == own["a"]
    for name in ("c", "a", "c"):
        program.bind_adapter(os.path.join(exported, "swap", f"{name}.ptd"))
        assert program.method("forward_cached").generate(prompt, 16).tokens == own[name], name


@pytest.mark.parametrize(
    "bad, code, message",
    [
        ("other/b.ptd", "InvalidArgument", "another structure"),
        ("swap/foundation.ptd", "InvalidArgument", "a foundation's data file"),
        ("corrupt.ptd", "InvalidData", "corrupt.ptd"),
        ("missing.ptd", "AccessFailed", "missing.ptd"),
    ],
)
def test_a_file_that_is_no_adapter_of_the_program_is_refused_and_the_previous_adapter_stays(
    exported, want, bad, code, message
):
    with open(os.path.join(exported, "corrupt.ptd"), "wb") as f:
        f.write(b"ESPD" + b"\0" * 60)
    program = _load(exported)
    program.bind_adapter(DataFile.open(os.path.join(exported, "swap", "c.ptd")))
    with pytest.raises(EdgeshareError, match=message) as e:
        program.bind_adapter(os.path.join(exported, bad))
    assert e.value.code == code and "\n" not in str(e.value)
    assert program.adapter.path.endswith("c.ptd")
    _check(program, want, "c")


def test_the_foundation_file_before_any_swap_is_refused_as_pinned(exported, want):
    program = _load(exported)
    with pytest.raises(EdgeshareError, match="pins by digest"):
        program.bind_adapter(os.path.join(exported, "swap", "foundation.ptd"))
    assert program.adapter is None
    _check(program, want, "a")


def test_a_program_without_swappable_weights_refuses_an_adapter(exported):
    own = os.path.join(exported, "own")
    program = Program.load(os.path.join(own, "a.pte"), [os.path.join(own, "foundation.ptd")])
    with pytest.raises(EdgeshareError, match="no adapter of") as e:
        program.bind_adapter(os.path.join(exported, "swap", "c.ptd"))
    assert e.value.code == "InvalidArgument"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
