"""End to end: export the demo's two LoRA programs, run both in ONE C++ runtime process, and check
what users rely on: outputs match torch eager, the foundation is fetched and packed once, and broken
files give a one-line error, not a crash."""

import tempfile

import numpy as np
import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.lora import export_lora
from edgeshare.models import demo_lora
from edgeshare.testing.run_binary import RunError, run_programs

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exported():
    foundation, adapters, inputs = demo_lora()
    out = tempfile.mkdtemp(prefix="run_test_")
    result = export_lora(foundation, adapters, inputs, out, XnnpackPartitioner())
    return result, inputs


def _programs(result):
    return [result.program_paths[name] for name in sorted(result.program_paths)]


def _expected(result, inputs):
    with torch.no_grad():
        return {name: module(*inputs).numpy() for name, module in result.modules.items()}


def test_both_programs_match_torch_eager(exported):
    result, inputs = exported
    run = run_programs(_programs(result), [result.foundation_path], [inputs[0].numpy()])
    expected = _expected(result, inputs)
    for name in result.program_paths:
        got = run.outputs[f"{name}.forward"][0]
        np.testing.assert_allclose(got, expected[name], atol=TOLERANCE, rtol=TOLERANCE)
    # The adapters really differ, so matching both means each program used its own.
    assert not np.allclose(expected["lora_a"], expected["lora_b"], atol=1e-3)


def test_foundation_is_fetched_once_and_packed_once(exported):
    result, inputs = exported
    run = run_programs(_programs(result), [result.foundation_path], [inputs[0].numpy()])
    fetches = run.stats["named_data_fetches"]
    for key in result.shared_keys:
        assert fetches.get(key) == 1, f"foundation key {key} fetched {fetches.get(key)} times"
    foundation_linears = len([k for k in result.shared_keys if k.endswith(".weight")])
    adapter_weights = sum(len(keys) for keys in result.adapter_keys.values())
    # One packed operator per foundation linear, shared; one per adapter matrix per program.
    assert run.stats["packed_entries"] == foundation_linears + adapter_weights
    assert run.stats["cache_hits"] == foundation_linears * (len(result.program_paths) - 1)
    assert run.stats["data_files_open"] == 1
    # Counted where the bytes leave foundation.ptd, whoever fetched them.
    at_map = run.stats["data_map_fetches"]
    assert set(at_map) == set(result.shared_keys), at_map
    assert all(n == 1 for n in at_map.values()), at_map


def test_sharing_off_fetches_the_foundation_per_program(exported):
    result, inputs = exported
    run = run_programs(_programs(result), [result.foundation_path], [inputs[0].numpy()], share=False)
    for key in result.shared_keys:
        assert run.stats["named_data_fetches"][key] == len(result.program_paths)
        assert run.stats["data_map_fetches"][key] == len(result.program_paths)
    assert run.stats["cache_hits"] == 0
    expected = _expected(result, inputs)
    for name in result.program_paths:
        np.testing.assert_allclose(run.outputs[f"{name}.forward"][0], expected[name], atol=TOLERANCE)


def test_two_threads_give_the_same_answers(exported):
    result, inputs = exported
    run = run_programs(
        _programs(result),
        [result.foundation_path],
        [inputs[0].numpy()],
        extra_args=["--threads", "2", "--iterations", "3"],
    )
    expected = _expected(result, inputs)
    for name in result.program_paths:
        np.testing.assert_allclose(run.outputs[f"{name}.forward"][0], expected[name], atol=TOLERANCE)


def test_portable_kernels_match_torch_without_a_delegate():
    foundation, adapters, inputs = demo_lora()
    out = tempfile.mkdtemp(prefix="run_test_portable_")
    result = export_lora(foundation, {"lora_a": adapters["lora_a"]}, inputs, out, partitioner=None)
    run = run_programs(_programs(result), [result.foundation_path], [inputs[0].numpy()])
    expected = _expected(result, inputs)
    np.testing.assert_allclose(run.outputs["lora_a.forward"][0], expected["lora_a"], atol=TOLERANCE)


def test_missing_data_file_names_it(exported):
    result, _ = exported
    with pytest.raises(RunError) as error:
        run_programs(_programs(result), ["/nonexistent/foundation.ptd"])
    assert "/nonexistent/foundation.ptd" in error.value.message
    assert len(error.value.message.splitlines()) == 1


def test_program_without_its_data_file_names_the_missing_key(exported):
    result, _ = exported
    with pytest.raises(RunError) as error:
        run_programs(_programs(result)[:1])
    assert "key '" in error.value.message and "forward" in error.value.message


def test_truncated_and_corrupt_files_give_one_line_errors(exported, tmp_path):
    result, _ = exported
    pte = open(_programs(result)[0], "rb").read()
    ptd = open(result.foundation_path, "rb").read()
    # The delegate's output made a constant in a new segment: //tools:run maps the .pte read-only,
    # so running it would be a SIGSEGV; loading must refuse it instead.
    from edgeshare.exir._serialize import Segment, deserialize_pte, serialize_pte

    crafted = deserialize_pte(pte, "constant_output.pte")
    for entry in crafted.program.namedData or []:
        entry.key = entry.key.decode()  # read back as bytes; serialize_pte sorts str keys
    plan = crafted.program.executionPlans[0]
    output = plan.instructions[0].instrArgs.args[-1]
    tensor = plan.values[output].val
    tensor.allocation = None
    tensor.constantSegment = len(crafted.segments)
    nbytes = 4 * int(np.prod(tensor.sizes))
    alignment = crafted.program.segmentAlignment
    segments = [Segment(data, alignment) for data in crafted.segments + [bytes(nbytes)]]
    cases = {
        "constant_output.pte": (serialize_pte(crafted.program, segments, alignment), None),
        "truncated.pte": (pte[: len(pte) // 2], None),
        "bad_magic.pte": (b"XXXX" + pte[4:], None),
        "empty.pte": (b"", None),
        "truncated.ptd": (pte, ptd[: len(ptd) // 3]),
        "flipped.ptd": (pte, ptd[:100] + bytes([ptd[100] ^ 0xFF]) + ptd[101:]),
    }
    for name, (pte_bytes, ptd_bytes) in cases.items():
        pte_path = tmp_path / (name if name.endswith(".pte") else "ok.pte")
        pte_path.write_bytes(pte_bytes)
        data = [result.foundation_path]
        if ptd_bytes is not None:
            ptd_path = tmp_path / name
            ptd_path.write_bytes(ptd_bytes)
            data = [str(ptd_path)]
        with pytest.raises(RunError) as error:
            run_programs([str(pte_path)], data)
        assert error.value.returncode == 1, name
        message = error.value.message
        assert len(message.splitlines()) == 1, (name, message)
        assert name in message or "ok.pte" in message, (name, message)
        if name == "constant_output.pte":
            assert f"writes argument 1, value {output}, which is a constant" in message, message


@pytest.fixture(scope="module")
def multi_method(exported):
    foundation, adapters, inputs = demo_lora()
    out = tempfile.mkdtemp(prefix="run_test_methods_")
    result = export_lora(
        foundation, adapters, inputs, out, XnnpackPartitioner(), multi_method=True, program_name="both"
    )
    single, _ = exported
    assert open(result.foundation_path, "rb").read() == open(single.foundation_path, "rb").read()
    return result


def test_method_flag_runs_only_that_method_of_every_program_that_has_it(exported, multi_method):
    single, inputs = exported
    both = multi_method.program_paths["lora_a"]
    programs = [both] + _programs(single)
    expected = _expected(single, inputs)
    x = [inputs[0].numpy()]
    run = run_programs(programs, [single.foundation_path], x, extra_args=["--method", "lora_b"])
    assert sorted(run.outputs) == ["both.lora_b"]
    np.testing.assert_allclose(run.outputs["both.lora_b"][0], expected["lora_b"], atol=TOLERANCE)
    run = run_programs(programs, [single.foundation_path], x, extra_args=["--method", "forward"])
    assert sorted(run.outputs) == ["lora_a.forward", "lora_b.forward"]
    for name in ("lora_a", "lora_b"):
        np.testing.assert_allclose(run.outputs[f"{name}.forward"][0], expected[name], atol=TOLERANCE)
    run = run_programs(programs, [single.foundation_path], x, extra_args=["--method", "lora_a", "--method", "forward"])
    assert sorted(run.outputs) == ["both.lora_a", "lora_a.forward", "lora_b.forward"]
    # Without the flag every method of every program runs, as before.
    run = run_programs(programs, [single.foundation_path], x)
    assert sorted(run.outputs) == ["both.lora_a", "both.lora_b", "lora_a.forward", "lora_b.forward"]


def test_method_no_program_has_is_a_one_line_error_listing_the_methods(exported, multi_method):
    single, _ = exported
    programs = [multi_method.program_paths["lora_a"]] + _programs(single)
    with pytest.raises(RunError) as error:
        run_programs(programs, [single.foundation_path], extra_args=["--method", "forward", "--method", "chat"])
    message = error.value.message
    assert error.value.returncode == 1 and len(message.splitlines()) == 1
    assert "'chat'" in message and "both.lora_a" in message and "lora_b.forward" in message


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
