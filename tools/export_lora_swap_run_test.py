"""export_lora --hf-model --swappable, then //tools:run --swap-adapter on one loaded lora.pte.

A tiny Llama (seeded, never downloaded) with three PEFT adapters: "a" and "c" of one structure
(q_proj, v_proj, rank 4) and "b" of another. lora.pte is loaded over foundation.ptd + a.ptd, then
c.ptd and a.ptd again are bound in turn: each run equals that adapter's own program (exported
without --swappable) at two token counts, and the foundation is fetched and packed once, as without
swapping. Binding another structure's .ptd, the foundation's or a corrupt file is a one-line error.
"""

import os

import numpy as np
import pytest
from edgeshare.models import hf_tiny
from edgeshare.testing.run_binary import RunError, run_programs
from edgeshare.tools import export_lora

TOLERANCE = 1e-5
MAX_SEQ_LEN = 32
IDS = np.arange(5, dtype=np.int64).reshape(1, 5)
# Programs of an --hf-model export also have forward_cached (its inputs are not these).
FORWARD = ["--method", "forward"]


def save_adapters(root: str):
    """The tiny llama, a and b as save_tiny_lora writes them, and c: a's structure, other weights."""
    files = hf_tiny.save_tiny_lora("llama", root)
    spec = hf_tiny.FAMILIES["llama"].adapters["a"]
    c = os.path.join(root, "c")
    hf_tiny.save_peft_adapter(hf_tiny.make_tiny_model("llama", 0), c, spec.target_modules, spec.rank, spec.alpha, 7)
    return files.model_dir, {"a": files.adapter_dirs["a"], "c": c, "b": files.adapter_dirs["b"]}


def _export(model_dir, adapters, out, *flags):
    argv = ["--hf-model", model_dir, "--out", out, "--max-seq-len", str(MAX_SEQ_LEN), *flags]
    for name, path in adapters.items():
        argv += ["--adapter", f"{name}={path}"]
    assert export_lora.main(argv) == 0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("swap")
    model_dir, adapters = save_adapters(str(root / "in"))
    _export(model_dir, adapters, str(root / "swap"), "--swappable")
    _export(model_dir, adapters, str(root / "own"))
    # b alone, swappable: a .ptd of another structure.
    _export(model_dir, {"b": adapters["b"]}, str(root / "b_only"), "--swappable")
    return str(root)


def _files(root, *names):
    return [os.path.join(root, name) for name in names]


def test_summary_names_the_program_each_adapter_file_and_the_other_structure(tmp_path, capsys):
    model_dir, adapters = save_adapters(str(tmp_path / "in"))
    _export(model_dir, adapters, str(tmp_path / "o"), "--swappable")
    out = capsys.readouterr().out
    assert "swappable program: " in out and "lora.pte" in out
    for name in ("a", "c"):
        assert os.path.join(str(tmp_path / "o"), f"{name}.ptd") in out
    assert "adapter 'b' has another structure" in out and "b.pte" in out
    # save_pretrained writes generation_config.json (the model's end tokens): it goes beside the programs.
    assert os.path.exists(os.path.join(model_dir, "generation_config.json"))
    assert sorted(os.listdir(tmp_path / "o")) == sorted(
        ["a.ptd", "b.pte", "c.ptd", "foundation.pte", "foundation.ptd", "lora.pte", "generation_config.json"]
    )


def test_foundation_file_is_the_normal_exports(exported):
    swap, own = _files(exported, "swap/foundation.ptd", "own/foundation.ptd")
    with open(swap, "rb") as f, open(own, "rb") as g:
        assert f.read() == g.read()


@pytest.mark.parametrize("tokens", [3, 17])
def test_swapped_outputs_equal_each_adapters_own_program(exported, tokens):
    ids = np.random.default_rng(tokens).integers(0, hf_tiny.VOCAB, size=(1, tokens), dtype=np.int64)
    lora, foundation, a, c = _files(exported, "swap/lora.pte", "swap/foundation.ptd", "swap/a.ptd", "swap/c.ptd")
    swapped = run_programs(
        [lora], [foundation, a], [ids], extra_args=FORWARD + ["--swap-adapter", c, "--swap-adapter", a]
    )
    own = run_programs(
        _files(exported, "own/a.pte", "own/c.pte"), [foundation], [ids], extra_args=["--method", "forward"]
    )
    (want_a,), (want_c,) = own.outputs["a.forward"], own.outputs["c.forward"]
    assert not np.allclose(want_a, want_c, atol=1e-3), "a and c should differ"
    for stem, want in (("lora", want_a), ("lora@c", want_c), ("lora@a", want_a)):
        (got,) = swapped.outputs[f"{stem}.forward"]
        assert got.shape == (1, tokens, hf_tiny.VOCAB)
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=TOLERANCE, err_msg=stem)


def test_swaps_fetch_and_pack_no_foundation_weight(exported):
    lora, foundation, a, c = _files(exported, "swap/lora.pte", "swap/foundation.ptd", "swap/a.ptd", "swap/c.ptd")
    once = run_programs([lora], [foundation, a], [IDS], extra_args=FORWARD)
    swapped = run_programs(
        [lora], [foundation, a], [IDS], extra_args=FORWARD + ["--swap-adapter", c, "--swap-adapter", a] * 2
    )
    for counter in ("packs", "bytes_fetched", "packed_entries"):
        assert swapped.stats[counter] == once.stats[counter], counter
    before, after = once.stats["data_map_fetches"], swapped.stats["data_map_fetches"]
    adapter = {k for k in after if k.startswith("adapter/")}
    assert adapter and adapter <= set(before)
    assert {k: n for k, n in after.items() if k not in adapter} == {k: n for k, n in before.items() if k not in adapter}
    # Each swap reads every adapter weight once more, from the mapped file.
    assert all(after[k] == before[k] + 4 for k in adapter)
    assert swapped.stdout.count("bound ") == 4


def test_model_flag_swappable_demo_equals_its_own_programs(tmp_path):
    swap, own = str(tmp_path / "swap"), str(tmp_path / "own")
    assert export_lora.main(["--swappable", "--out", swap]) == 0  # the demo: lora_a, lora_b
    assert export_lora.main(["--out", own]) == 0
    assert sorted(os.listdir(swap)) == ["foundation.ptd", "foundation.pte", "lora.pte", "lora_a.ptd", "lora_b.ptd"]
    x = np.random.default_rng(0).uniform(-1, 1, size=(4, 256)).astype(np.float32)
    foundation = os.path.join(swap, "foundation.ptd")
    swapped = run_programs(
        [os.path.join(swap, "lora.pte")],
        [foundation, os.path.join(swap, "lora_a.ptd")],
        [x],
        extra_args=["--swap-adapter", os.path.join(swap, "lora_b.ptd")],
    )
    want = run_programs([os.path.join(own, "lora_a.pte"), os.path.join(own, "lora_b.pte")], [foundation], [x])
    for stem, name in (("lora", "lora_a"), ("lora@lora_b", "lora_b")):
        np.testing.assert_allclose(
            swapped.outputs[f"{stem}.forward"][0], want.outputs[f"{name}.forward"][0], atol=TOLERANCE, rtol=TOLERANCE
        )


@pytest.mark.parametrize(
    "bad, message",
    [
        ("b_only/b.ptd", "another structure"),
        ("swap/foundation.ptd", "pins by digest"),
        ("corrupt.ptd", "corrupt.ptd"),
    ],
)
def test_binding_a_file_that_is_no_adapter_of_the_program_is_a_one_line_error(exported, bad, message):
    with open(os.path.join(exported, "corrupt.ptd"), "wb") as f:
        f.write(b"ESPD" + b"\0" * 60)
    lora, foundation, a = _files(exported, "swap/lora.pte", "swap/foundation.ptd", "swap/a.ptd")
    with pytest.raises(RunError, match=message) as e:
        run_programs(
            [lora], [foundation, a], [IDS], extra_args=FORWARD + ["--swap-adapter", os.path.join(exported, bad)]
        )
    assert len(str(e.value).strip().splitlines()) == 1, str(e.value)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
