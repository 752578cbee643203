"""Method.generate from Python: greedy tokens over a stateful method equal transformers' and
//tools:generate's, and its errors are EdgeshareErrors naming what is wrong.

The fixture (//testing:generation_files) is the tiny Llama with PEFT adapters a and b exported with
--hf-model (max_seq_len 48), a and c (one structure) exported for swapping (swap/), a exported with
every position's logits from forward_cached (full/), a prompt and transformers'
generate(do_sample=False) tokens for it.
"""

import json
import os
import subprocess

import numpy as np
import pytest
from edgeshare.extension.python import DataFile, EdgeshareError, GenerationResult, Program

# expected.json and the files beside it.
FILES = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])


def _path(name: str) -> str:
    return os.path.join(FILES, name)


@pytest.fixture(scope="module")
def expected():
    with open(_path("expected.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def programs():
    foundation = DataFile.open(_path("foundation.ptd"))
    return {stem: Program.load(_path(f"{stem}.pte"), [foundation]) for stem in ("a", "b", "foundation")}


@pytest.fixture(scope="module")
def prompt():
    return np.load(_path("prompt.npy"))


def test_tokens_equal_transformers_for_each_adapter_and_the_foundation(programs, prompt, expected):
    n = expected["new_tokens"]
    for stem, program in programs.items():
        out = program.method("forward_cached").generate(prompt, n)
        assert isinstance(out, GenerationResult)
        assert out.tokens == expected["tokens"][stem], stem
        assert out.prefill_ms > 0 and out.decode_tokens_per_s > 0
    assert expected["tokens"]["a"] != expected["tokens"]["foundation"]


def test_a_program_loaded_with_its_generating_method_alone_generates_the_same(prompt, expected):
    foundation = DataFile.open(_path("foundation.ptd"))
    program = Program.load(_path("a.pte"), [foundation], methods=["forward_cached"])
    assert program.methods == ["forward_cached"]
    assert program.method("forward_cached").generate(prompt, expected["new_tokens"]).tokens == expected["tokens"]["a"]
    with pytest.raises(EdgeshareError) as error:
        program.method("forward")
    assert error.value.message.endswith("has no method 'forward' (methods: forward_cached)")
    with pytest.raises(EdgeshareError) as error:
        Program.load(_path("a.pte"), [foundation], methods=["forward_cached", "chat"])
    assert error.value.code == "InvalidArgument"
    assert error.value.message == f"{_path('a.pte')} has no method 'chat' (methods: forward, forward_cached)"
    with pytest.raises(TypeError, match="not one name"):
        Program.load(_path("a.pte"), [foundation], methods="forward_cached")
    with pytest.raises(ValueError, match="methods is empty"):
        Program.load(_path("a.pte"), [foundation], methods=[])


def test_tokens_equal_transformers_at_the_longest_bound(prompt, expected):
    """The same programs exported for 256 positions: attention reads only the filled ones, and
    the tokens are transformers' still."""
    foundation = DataFile.open(_path("long/foundation.ptd"))
    for stem in ("a", "b", "foundation"):
        method = Program.load(_path(f"long/{stem}.pte"), [foundation]).method("forward_cached")
        assert method.generate(prompt, expected["new_tokens"]).tokens == expected["tokens"][stem], stem


def test_a_half_precision_cache_stays_within_1e_2_of_the_float_one(programs, prompt):
    """A prefill then single tokens (the prompt's again) with a.pte and kv16/a.pte: every logit
    within 1e-2 (and not equal: the cache is really half)."""
    half = Program.load(_path("kv16/a.pte"), [DataFile.open(_path("kv16/foundation.ptd"))])
    ids = prompt.reshape(1, -1).astype(np.int64)
    steps = [(ids, 0)] + [(ids[:, i : i + 1], ids.shape[1] + i) for i in range(4)]
    exact_method = programs["a"].method("forward_cached")
    half_method = half.method("forward_cached")
    worst = 0.0
    for tokens, start in steps:
        position = np.array(start, dtype=np.int64)
        (exact,) = exact_method.execute(tokens, position)
        (rounded,) = half_method.execute(tokens, position)
        worst = max(worst, float(np.abs(exact - rounded).max()))
    assert 0.0 < worst <= 1e-2


def test_forward_cached_returns_the_last_row_unless_exported_with_full_logits(programs, prompt, expected):
    """a.pte's forward_cached returns one row of logits for a prompt (the last position's);
    full/a.pte (exported with full_logits) returns one per prompt token, each equal to forward's,
    and its greedy tokens are transformers' as well."""
    ids = prompt.reshape(1, -1).astype(np.int64)
    start = np.array(0, dtype=np.int64)
    (every,) = programs["a"].method("forward").execute(ids)
    (last,) = programs["a"].method("forward_cached").execute(ids, start)
    assert last.shape == (1, 1, every.shape[2])
    np.testing.assert_allclose(last[0, 0], every[0, -1], rtol=1e-4, atol=1e-4)
    full = Program.load(_path("full/a.pte"), [DataFile.open(_path("full/foundation.ptd"))])
    (rows,) = full.method("forward_cached").execute(ids, start)
    assert rows.shape == every.shape == (1, ids.shape[1], every.shape[2])
    np.testing.assert_allclose(rows, every, rtol=1e-4, atol=1e-4)
    tokens = full.method("forward_cached").generate(prompt, expected["new_tokens"]).tokens
    assert tokens == expected["tokens"]["a"]


def test_tokens_after_swapping_adapters_back_and_forth_equal_transformers(prompt, expected):
    """One loaded swappable lora.pte bound a -> c -> a -> c: 32 greedy tokens after each swap equal
    transformers' with that adapter (the swap resets the KV cache)."""
    n = expected["new_tokens"]
    assert expected["tokens"]["a"] != expected["tokens"]["c"]
    adapters = {name: DataFile.open(_path(f"swap/{name}.ptd")) for name in ("a", "c")}
    program = Program.load(_path("swap/lora.pte"), [DataFile.open(_path("swap/foundation.ptd")), adapters["a"]])
    method = program.method("forward_cached")
    assert method.generate(prompt, n).tokens == expected["tokens"]["a"]
    for name in ("c", "a", "c"):
        program.bind_adapter(adapters[name])
        assert method.generate(prompt, n).tokens == expected["tokens"][name], name


def test_tokens_equal_tools_generate(programs, prompt, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tool = os.path.join(root, "tools", "generate")
    out_json = str(tmp_path / "g.json")
    args = [tool, "--program", _path("a.pte"), "--data", _path("foundation.ptd"), "--prompt-ids", _path("prompt.npy")]
    proc = subprocess.run(args + ["--max-new-tokens", "20", "--json", out_json], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with open(out_json) as f:
        want = json.load(f)["tokens"]
    assert programs["a"].method("forward_cached").generate(prompt.reshape(1, -1), 20).tokens == want


def test_generate_again_resets_the_cache_and_eos_stops(programs, prompt, expected):
    method = programs["b"].method("forward_cached")
    want = expected["tokens"]["b"]
    assert method.generate(prompt, 5).tokens == want[:5]
    assert method.generate(prompt, 5).tokens == want[:5]  # the same: the KV cache was reset
    # execute() between generations does not disturb the next one.
    method.execute(prompt.reshape(1, -1), np.array(0, dtype=np.int64))
    assert method.generate(prompt, 3, eos_id=want[1]).tokens == want[: want.index(want[1]) + 1]


def test_generation_reaching_max_seq_len_stops_there_with_finish_reason_length(programs, prompt, expected):
    method = programs["a"].method("forward_cached")
    fit = expected["max_seq_len"] + 1 - len(prompt)  # the last new token is never fed back
    out = method.generate(prompt, fit + 10)
    assert len(out.tokens) == fit and out.finish_reason == "length"
    assert out.tokens == method.generate(prompt, fit).tokens
    streamed = list(method.stream(prompt, fit + 10))
    assert streamed == out.tokens
    longest = np.zeros(expected["max_seq_len"] + 1, dtype=np.int64)
    with pytest.raises(EdgeshareError, match=f"is longer than the {expected['max_seq_len']}") as e:
        method.generate(longest, 1)  # a prompt past the length itself is still refused
    assert e.value.code == "InvalidArgument" and "forward_cached" in e.value.message


def test_finish_reason_is_stop_at_a_stop_id_and_length_at_max_new_tokens(programs, prompt, expected):
    method = programs["a"].method("forward_cached")
    want = expected["tokens"]["a"]
    assert method.generate(prompt, 3).finish_reason == "length"
    out = method.generate(prompt, 10, eos_id=want[2])
    assert out.tokens[-1] == want[2] and out.finish_reason == "stop"
    assert out.seed is None and out.prefilled_tokens == len(prompt)  # greedy takes no seed


def test_unseeded_sampling_draws_a_fresh_seed_that_repeats_the_run(programs, prompt):
    method = programs["a"].method("forward_cached")
    first = method.generate(prompt, 12, temperature=1.5)
    second = method.generate(prompt, 12, temperature=1.5)
    assert first.seed is not None and second.seed is not None and first.seed != second.seed
    assert method.generate(prompt, 12, temperature=1.5, seed=first.seed).tokens == first.tokens
    stream = method.stream(prompt, 12, temperature=1.5)
    tokens = list(stream)
    assert method.generate(prompt, 12, temperature=1.5, seed=stream.seed).tokens == tokens
    assert method.stream(prompt, 2).seed is None


def test_a_continued_generation_prefills_only_its_new_tokens(programs, prompt):
    method = programs["b"].method("forward_cached")
    first = method.generate(prompt, 6)
    assert method.cached_tokens == len(prompt) + 5
    whole = np.concatenate([prompt, np.asarray(first.tokens, np.int64), prompt[:4]])
    continued = method.generate(whole, 6, cached_tokens=method.cached_tokens)
    assert continued.prefilled_tokens == 5
    fresh = method.generate(whole, 6)
    assert fresh.prefilled_tokens == len(whole) and continued.tokens == fresh.tokens
    method.execute(prompt.reshape(1, -1), np.array(0, dtype=np.int64))
    assert method.cached_tokens == 0  # another run changed the cache
    with pytest.raises(EdgeshareError, match="cached tokens asked for"):
        method.generate(whole, 2, cached_tokens=3)


@pytest.mark.parametrize(
    "bad, words",
    [
        (np.zeros(3, np.float32), "must be int64, not float32"),
        (np.zeros(3, np.int32), "must be int64, not int32"),
        (np.zeros((2, 3), np.int64), "must have shape [P] or [1, P]"),
        (np.zeros(0, np.int64), "the prompt is empty"),
    ],
)
def test_a_wrong_prompt_is_an_edgeshare_error(programs, bad, words):
    with pytest.raises(EdgeshareError) as e:
        programs["a"].method("forward_cached").generate(bad, 4)
    assert e.value.code == "InvalidArgument" and words in e.value.message, e.value.message


def test_a_method_without_state_cannot_generate(programs, prompt):
    with pytest.raises(EdgeshareError, match="method 'forward' takes 1 inputs") as e:
        programs["a"].method("forward").generate(prompt, 4)
    assert e.value.code == "InvalidArgument"
    with pytest.raises(EdgeshareError, match="max_new_tokens is -1"):
        programs["a"].method("forward_cached").generate(prompt, -1)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
