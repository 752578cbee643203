"""The Python runtime on the demo's two LoRA programs: same outputs as //tools:run and torch eager,
the same foundation sharing in one process, errors raised with the runtime's message, and methods
run from two Python threads at once."""

import faulthandler
import gc
import json
import os
import subprocess
import sys
import threading
from typing import Dict, List

import numpy as np
import pytest
from edgeshare.extension.python import (
    DataFile,
    EdgeshareError,
    Program,
    TensorSpec,
    set_num_threads,
    weights_cache_stats,
)
from edgeshare.testing.run_binary import run_programs

FOUNDATION = os.environ["FOUNDATION_PTD"]
PROGRAMS = {"lora_a": os.environ["LORA_A_PTE"], "lora_b": os.environ["LORA_B_PTE"]}
INPUTS = {name: np.load(os.environ[f"{name.upper()}_INPUT"]) for name in PROGRAMS}
EAGER = {name: np.load(os.environ[f"{name.upper()}_OUTPUT"]) for name in PROGRAMS}


def _child_env():
    """The environment of a fresh Python process that imports what this one does."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


@pytest.fixture(scope="module")
def programs():
    foundation = DataFile.open(FOUNDATION)
    return {name: Program.load(path, [foundation]) for name, path in PROGRAMS.items()}


def test_outputs_equal_tools_run_and_torch_eager(programs):
    x = INPUTS["lora_a"]
    run = run_programs(list(PROGRAMS.values()), [FOUNDATION], [x])
    for name, program in programs.items():
        (got,) = program.method("forward").execute(x)
        assert got.dtype == np.float32 and got.shape == run.outputs[f"{name}.forward"][0].shape
        np.testing.assert_allclose(got, run.outputs[f"{name}.forward"][0], atol=1e-5, rtol=1e-5)
        (own,) = program.method("forward").execute(INPUTS[name])
        np.testing.assert_allclose(own, EAGER[name], atol=1e-4, rtol=1e-4)
    # The adapters differ, so matching both means each program ran its own.
    assert not np.allclose(EAGER["lora_a"], EAGER["lora_b"], atol=1e-3)


_SHARING_SCRIPT = """
import json, os, sys
from edgeshare.extension.python import DataFile, Program, weights_cache_stats
assert "torch" not in sys.modules, "the runtime imported torch"
foundation = DataFile.open(os.environ["FOUNDATION_PTD"])
a = Program.load(os.environ["LORA_A_PTE"], [foundation])
b = Program.load(os.environ["LORA_B_PTE"], [os.environ["FOUNDATION_PTD"]])  # by path: same file
print(json.dumps(weights_cache_stats()))
"""


def test_two_programs_share_the_foundation_as_tools_run_does():
    # A fresh process, so that the counters and cache entries are these two loads' alone.
    done = subprocess.run([sys.executable, "-c", _SHARING_SCRIPT], env=_child_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    run = run_programs(list(PROGRAMS.values()), [FOUNDATION], [INPUTS["lora_a"]])
    for key in ("packs", "cache_hits", "packed_entries", "named_data_fetches", "data_files_open"):
        assert stats[key] == run.stats[key], (key, stats[key], run.stats[key])
    assert stats["cache_hits"] > 0 and stats["data_files_open"] == 1
    # //tools:run counts fetches where bytes leave foundation.ptd: the delegate fetched each once.
    foundation_keys = set(run.stats["data_map_fetches"]) & set(stats["named_data_fetches"])
    assert foundation_keys and all(stats["named_data_fetches"][k] == 1 for k in foundation_keys)


def test_methods_and_their_planned_inputs_and_outputs(programs):
    program = programs["lora_a"]
    assert program.methods == ["forward"]
    assert program.path == PROGRAMS["lora_a"]
    method = program.method("forward")
    assert method is program.method("forward")
    assert method.num_inputs == 1 and method.num_outputs == 1
    x = INPUTS["lora_a"]
    assert method.inputs == [TensorSpec(dtype="float32", shape=x.shape)]
    assert method.outputs == [TensorSpec(dtype="float32", shape=EAGER["lora_a"].shape)]


def test_torch_tensors_and_non_contiguous_arrays_are_accepted(programs):
    torch = pytest.importorskip("torch")
    method = programs["lora_a"].method("forward")
    x = INPUTS["lora_a"]
    (expected,) = method.execute(x)
    (from_torch,) = method.execute(torch.from_numpy(x))
    np.testing.assert_array_equal(from_torch, expected)
    (from_transposed,) = method.execute(np.ascontiguousarray(x.T).T)
    np.testing.assert_array_equal(from_transposed, expected)
    with pytest.raises(EdgeshareError, match="input 0 of method 'forward' cannot be read as an array: .*grad"):
        method.execute(torch.from_numpy(x).requires_grad_())


def test_outputs_are_copies_that_the_next_execute_leaves_alone(programs):
    method = programs["lora_a"].method("forward")
    x = INPUTS["lora_a"]
    (first,) = method.execute(x)
    kept = first.copy()
    method.execute(x * 2)
    np.testing.assert_array_equal(first, kept)


def test_a_method_keeps_its_program_and_data_file_alive():
    method = Program.load(PROGRAMS["lora_b"], [FOUNDATION]).method("forward")
    gc.collect()
    (got,) = method.execute(INPUTS["lora_b"])
    np.testing.assert_allclose(got, EAGER["lora_b"], atol=1e-4, rtol=1e-4)


def test_missing_files_are_named():
    with pytest.raises(EdgeshareError) as error:
        DataFile.open("/nonexistent/foundation.ptd")
    assert error.value.code == "AccessFailed"
    assert "/nonexistent/foundation.ptd" in str(error.value)
    with pytest.raises(EdgeshareError) as error:
        Program.load("/nonexistent/lora_a.pte", [FOUNDATION])
    assert "/nonexistent/lora_a.pte" in error.value.message


_NO_DATA_FILE_SCRIPT = """
import os
from edgeshare.extension.python import EdgeshareError, Program
try:
    Program.load(os.environ["LORA_A_PTE"])
except EdgeshareError as error:
    print(error.code, error.message)
"""


def test_data_files_given_as_one_path_is_a_type_error():
    with pytest.raises(TypeError, match="data_files must be a list"):
        Program.load(PROGRAMS["lora_a"], FOUNDATION)


def test_program_without_its_data_file_names_the_missing_key():
    # A fresh process: in this one the foundation's weights are already in the shared cache, which
    # answers a lookup by the weight's recorded digest without asking a data file.
    done = subprocess.run(
        [sys.executable, "-c", _NO_DATA_FILE_SCRIPT], env=_child_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    code, message = done.stdout.strip().split(" ", 1)
    assert code == "NotFound", done.stdout
    assert "key '" in message and "'forward'" in message and PROGRAMS["lora_a"] in message, message


def test_corrupt_files_raise_one_line_errors_naming_them(tmp_path):
    pte = open(PROGRAMS["lora_a"], "rb").read()
    ptd = open(FOUNDATION, "rb").read()
    cases = {
        "truncated.pte": (pte[: len(pte) // 2], None),
        "bad_magic.pte": (b"XXXX" + pte[4:], None),
        "empty.pte": (b"", None),
        "truncated.ptd": (pte, ptd[: len(ptd) // 3]),
        "flipped.ptd": (pte, ptd[:100] + bytes([ptd[100] ^ 0xFF]) + ptd[101:]),
    }
    for name, (pte_bytes, ptd_bytes) in cases.items():
        pte_path = tmp_path / (name if name.endswith(".pte") else "ok.pte")
        pte_path.write_bytes(pte_bytes)
        data = FOUNDATION
        if ptd_bytes is not None:
            data = tmp_path / name
            data.write_bytes(ptd_bytes)
        with pytest.raises(EdgeshareError) as error:
            Program.load(pte_path, [data])
        message = error.value.message
        assert len(message.splitlines()) == 1, (name, message)
        assert name in message, (name, message)
        assert error.value.code in ("InvalidProgram", "InvalidData", "AccessFailed"), (name, error.value.code)


def test_wrong_inputs_raise_the_runtimes_message(programs):
    method = programs["lora_a"].method("forward")
    x = INPUTS["lora_a"]
    cases = {
        "dtype": ((x.astype(np.float64),), "input 0 of method 'forward' must be Float, not Double"),
        "int dtype": ((x.astype(np.int32),), "must be Float, not Int"),
        "no runtime type": ((x.astype(np.complex64),), "input 0 of method 'forward' has dtype complex64"),
        "shape": ((x[..., :-1],), "input 0 of method 'forward' must have shape"),
        "rank": ((x[None],), "must have shape"),
        "too few": ((), f"method 'forward' of {PROGRAMS['lora_a']} takes 1 input(s), not 0"),
        "too many": ((x, x), f"method 'forward' of {PROGRAMS['lora_a']} takes 1 input(s), not 2"),
    }
    for case, (inputs, expected) in cases.items():
        with pytest.raises(EdgeshareError) as error:
            method.execute(*inputs)
        assert error.value.code == "InvalidArgument", case
        assert expected in error.value.message, (case, error.value.message)
        assert len(error.value.message.splitlines()) == 1
    # The method is still usable after refusing them.
    (got,) = method.execute(x)
    np.testing.assert_allclose(got, EAGER["lora_a"], atol=1e-4, rtol=1e-4)


def test_unknown_method_lists_the_programs_methods(programs):
    with pytest.raises(EdgeshareError) as error:
        programs["lora_a"].method("chat")
    assert error.value.code == "NotFound"
    assert error.value.message == f"{PROGRAMS['lora_a']} has no method 'chat' (methods: forward)"


def test_bad_thread_count_is_refused():
    with pytest.raises(EdgeshareError) as error:
        set_num_threads(0)
    assert error.value.code == "InvalidArgument"
    for threads in (0, 257):
        with pytest.raises(EdgeshareError) as error:
            Program.load(PROGRAMS["lora_a"], [FOUNDATION], threads=threads)
        assert error.value.code == "InvalidArgument"
        assert "threads" in error.value.message


def test_programs_with_their_own_thread_counts_run_at_once_as_one_thread_does(programs):
    # Each program owns its threads: one of 1 and one of 2 in one process, run from two threads.
    expected = programs["lora_a"].method("forward").execute(INPUTS["lora_a"])[0]
    one = Program.load(PROGRAMS["lora_a"], [FOUNDATION], threads=1)
    two = Program.load(PROGRAMS["lora_a"], [FOUNDATION], threads=2)
    results: Dict[str, List[np.ndarray]] = {"one": [], "two": []}

    def run(name: str, program: Program) -> None:
        for _ in range(20):
            results[name].append(program.method("forward").execute(INPUTS["lora_a"])[0])

    workers = [threading.Thread(target=run, args=item) for item in (("one", one), ("two", two))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for outputs in results.values():
        assert len(outputs) == 20
        for got in outputs:
            np.testing.assert_array_equal(got, expected)


def test_two_threads_run_two_methods_and_one_method_at_once(programs):
    expected = {name: program.method("forward").execute(INPUTS[name])[0] for name, program in programs.items()}
    # Two threads on lora_a's method (they take turns) and one on lora_b's (in parallel).
    jobs = ["lora_a", "lora_b", "lora_a"]
    failures = []

    def work(name):
        try:
            for _ in range(20):
                (got,) = programs[name].method("forward").execute(INPUTS[name])
                np.testing.assert_array_equal(got, expected[name])
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append((name, error))

    threads = [threading.Thread(target=work, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def test_opening_and_loading_refuse_a_fifo_without_blocking(tmp_path):
    # Opening a FIFO for reading would block until a writer comes: the runtime refuses anything but
    # a regular file before it can block. faulthandler ends the test if it blocks after all.
    for name, load in (("data.ptd", DataFile.open), ("program.pte", Program.load)):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        faulthandler.dump_traceback_later(30, exit=True)
        try:
            with pytest.raises(EdgeshareError) as error:
                load(fifo)
        finally:
            faulthandler.cancel_dump_traceback_later()
        assert error.value.code == "AccessFailed"
        assert str(fifo) in error.value.message and "not a regular file" in error.value.message, name


def test_stats_count_what_this_process_loaded(programs):
    stats = weights_cache_stats()
    assert stats["packed_entries"] > 0 and stats["data_files_open"] >= 1
    assert stats["sharing"] is True and stats["verify"] is True
    assert isinstance(stats["external_constants"], dict)


MAX_LEN = 16


@pytest.fixture(scope="module")
def dynamic_program(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from edgeshare.exir import to_edge

    class Scale(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2.0 + 1.0)

    t = torch.export.Dim("T", min=1, max=MAX_LEN)
    ep = torch.export.export(Scale(), (torch.randn(5, 8),), dynamic_shapes=({0: t},))
    out = tmp_path_factory.mktemp("dynamic")
    to_edge(ep).to_executorch().write_to_dir(str(out), "scale")
    return Program.load(out / "scale.pte"), Scale()


def test_a_dynamic_dim_takes_any_length_up_to_its_bound(dynamic_program):
    import torch

    program, module = dynamic_program
    method = program.method("forward")
    assert method.inputs == [TensorSpec(dtype="float32", shape=(MAX_LEN, 8), dynamic_dims=(0,))]
    assert method.outputs == [TensorSpec(dtype="float32", shape=(MAX_LEN, 8), dynamic_dims=(0,))]
    for length in (1, 7, MAX_LEN):
        x = np.random.default_rng(length).standard_normal((length, 8)).astype(np.float32)
        (got,) = method.execute(x)
        assert got.shape == (length, 8)
        np.testing.assert_allclose(got, module(torch.from_numpy(x)).numpy(), atol=1e-6)
    with pytest.raises(EdgeshareError, match=r"input 0 of method 'forward': dim 0 is 17, outside the 1\.\.16"):
        method.execute(np.zeros((MAX_LEN + 1, 8), np.float32))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
