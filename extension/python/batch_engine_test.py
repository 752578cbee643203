"""BatchEngine from Python on the generation fixture's batch export (a and b in slots 0 and 1).

Requests on a, b and the bare model submitted from three Python threads at once generate together
and each equals transformers' greedy tokens; an adapter is loaded into another slot and unloaded
while requests run; bad requests raise EdgeshareError with the runtime's code and one line.
"""

import json
import os
import threading

import numpy as np
import pytest
from edgeshare.extension.python import BatchEngine, EdgeshareError


@pytest.fixture(scope="module")
def fixture():
    path = os.environ["GENERATION_EXPECTED_JSON"]
    with open(path, encoding="utf-8") as f:
        expected = json.load(f)
    folder = os.path.dirname(path)
    prompt = np.load(os.path.join(folder, "prompt.npy"))
    return os.path.join(folder, "batch"), prompt, expected


def test_three_threads_generate_together_and_each_equals_transformers(fixture):
    folder, prompt, expected = fixture
    engine = BatchEngine.open(folder, threads=2)
    assert engine.adapters == {"a": 0, "b": 1}
    n = expected["new_tokens"]
    out = {}

    def run(adapter):
        out[adapter] = list(engine.submit(prompt, max_new_tokens=n, adapter=adapter))

    threads = [threading.Thread(target=run, args=(a,)) for a in ("a", "b", None)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert out["a"] == expected["tokens"]["a"]
    assert out["b"] == expected["tokens"]["b"]
    assert out[None] == expected["tokens"]["foundation"]


def test_adapters_load_and_unload_while_others_run(fixture):
    folder, prompt, expected = fixture
    engine = BatchEngine.open(folder)
    n = expected["new_tokens"]
    # As long as the bound allows, so that it most likely still runs when the load below comes:
    # slot 0 is then in use and the load is refused. On a fast machine the tiny model's request
    # can end first; the load (of slot 0's own file, so changing nothing) then succeeds and the
    # next attempt tries again. The C++ engine test checks the refusal step by step.
    longest = engine.max_seq_len - len(prompt)
    refused = None
    for _ in range(50):
        running = engine.submit(prompt, max_new_tokens=longest, adapter="a")
        try:
            engine.load_adapter(0, os.path.join(folder, "a.ptd"))
        except EdgeshareError as e:
            refused = e
            break
        assert list(running)[:n] == expected["tokens"]["a"]
    assert refused is not None and refused.code == "InvalidState", refused
    first = next(running)
    engine.load_adapter(2, os.path.join(folder, "b.ptd"), name="b2")
    assert engine.adapters["b2"] == 2
    assert list(engine.submit(prompt, max_new_tokens=n, adapter="b2")) == expected["tokens"]["b"]
    engine.unload_adapter("a")
    with pytest.raises(EdgeshareError, match="no adapter 'a'"):
        engine.submit(prompt, max_new_tokens=2, adapter="a")
    tokens = [first] + list(running)
    assert tokens[:n] == expected["tokens"]["a"] and len(tokens) == longest
    assert running.finish_reason == "length"


def test_bad_requests_are_one_line_errors(fixture):
    folder, prompt, expected = fixture
    engine = BatchEngine.open(folder, max_queue=1)
    cases = [
        (dict(prompt_ids=np.zeros(engine.max_seq_len, np.int64), max_new_tokens=2), "InvalidArgument", "no room"),
        (dict(prompt_ids=prompt, max_new_tokens=2, adapter=7), "InvalidArgument", "adapter slot"),
        (dict(prompt_ids=prompt.astype(np.int32), max_new_tokens=2), "InvalidArgument", "int64"),
        (dict(prompt_ids=prompt, max_new_tokens=2, stop_ids=[10**6]), "InvalidArgument", "vocabulary"),
    ]
    for kwargs, code, words in cases:
        with pytest.raises(EdgeshareError, match=words) as e:
            engine.submit(**kwargs)
        assert e.value.code == code
    with pytest.raises(EdgeshareError, match="not a batch manifest|cannot open"):
        BatchEngine.open(os.path.dirname(folder))



def test_a_cancelled_request_ends_early_and_the_others_do_not(fixture):
    folder, prompt, expected = fixture
    engine = BatchEngine.open(folder)
    # Full-length requests on every slot first: the cancelled one waits behind them, so cancel()
    # lands before it could finish, unless this thread is held up for all of their steps (then it
    # ended by length, never with more tokens).
    others = [engine.submit(prompt, max_new_tokens=expected["new_tokens"], adapter="a") for _ in range(engine.slots)]
    stream = engine.submit(prompt, max_new_tokens=expected["new_tokens"], adapter="b")
    stream.cancel()
    tokens = list(stream)
    if len(tokens) == expected["new_tokens"]:
        assert stream.finish_reason == "length"
    else:
        assert len(tokens) < expected["new_tokens"] and stream.finish_reason == "stop"
    assert tokens == expected["tokens"]["b"][: len(tokens)]
    for other in others:
        assert list(other) == expected["tokens"]["a"]


def test_wait_changed_and_take_deliver_every_token_once_in_order(fixture):
    # The server's pump reads streams this way: ids with something new, then all of it at once.
    folder, prompt, expected = fixture
    engine = BatchEngine.open(folder, threads=2)
    native = engine._native
    streams = {"a": engine.submit(prompt, max_new_tokens=expected["new_tokens"], adapter="a"),
               "b": engine.submit(prompt, max_new_tokens=expected["new_tokens"], adapter="b")}
    ids = {stream.request_id: name for name, stream in streams.items()}
    got = {name: [] for name in streams}
    ended = set()
    for _ in range(10_000):  # bounded: each round waits at most 100 ms
        if len(ended) == len(ids):
            break
        for request_id in native.wait_changed(100):
            tokens, done = native.take(request_id)
            got[ids[request_id]] += tokens
            if done:
                ended.add(request_id)
    assert got["a"] == expected["tokens"]["a"]
    assert got["b"] == expected["tokens"]["b"]
    # Nothing is listed twice: once taken to the end, an id stays quiet.
    assert native.wait_changed(0) == []
    with pytest.raises(EdgeshareError) as unknown:
        native.take(max(ids) + 1000)
    assert unknown.value.code == "NotFound"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
