"""bench/batch's llama.cpp rows without llama.cpp: llama-batched-bench's output parsed from a
captured real run (testdata/llama_batched_bench.txt), its refusals, its command line, the rows'
ratios and the table. Fast: no model, no export, no llama.cpp build."""

import os

import pytest
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench import batch
from edgeshare.bench._batch_llamacpp import (
    BatchedBenchOutputError,
    BatchedBenchRow,
    batched_bench_command,
    cpu_has_amx,
    decode_rates,
    parse_batched_bench,
)

# One real run, kept as bench/batch keeps it (its command, stdout, stderr): `llama-batched-bench -m
# model-q4_0.gguf -c 1024 -npp 32 -ntg 16 -npl 1,2,4,8 -t 2 -tb 2 -nr` on bench/batch's "bench" model
# (2-core Intel Xeon with AMX, a busy machine; the figures are not a measurement).
SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "llama_batched_bench.txt")
PREFILL_S_1 = 0.045
S_TG = (55.96, 78.34, 140.28, 195.33)
HEADER = "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
SEPARATOR = "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"


def _sample() -> str:
    with open(SAMPLE, encoding="utf-8") as f:
        return f.read()


def test_real_output_gives_one_row_per_batch_size_with_its_s_tg() -> None:
    rows = parse_batched_bench(_sample())
    assert [row.sequences for row in rows] == [1, 2, 4, 8]
    assert all(row.prompt_tokens == 32 and row.new_tokens == 16 for row in rows)
    assert rows[0] == BatchedBenchRow(32, 16, 1, PREFILL_S_1, S_TG[0])
    assert decode_rates(rows, batch.SEQUENCES) == dict(zip(batch.SEQUENCES, S_TG))


def test_columns_are_found_by_their_header_names() -> None:
    swapped = "| B | S_TG t/s | PP | TG | T_PP s |\n|---|---|---|---|---|\n| 4 | 99.50 | 32 | 16 | 0.125 |\n"
    assert parse_batched_bench(swapped) == [BatchedBenchRow(32, 16, 4, 0.125, 99.5)]


def test_a_batch_size_the_tool_left_out_is_refused_naming_the_context() -> None:
    rows = parse_batched_bench(_sample())
    with pytest.raises(BatchedBenchOutputError, match=r"no row for B = 16 .*-c"):
        decode_rates(rows, [1, 16])


def test_output_without_the_table_is_refused() -> None:
    with pytest.raises(BatchedBenchOutputError, match="no table with an S_TG"):
        parse_batched_bench("main: error: unable to load model\n")


def test_a_row_that_does_not_parse_is_refused_with_its_line() -> None:
    short = f"{HEADER}\n{SEPARATOR}\n|    32 |     16 |    1 |     48 |\n"
    with pytest.raises(BatchedBenchOutputError, match="line 3 has 4 cells"):
        parse_batched_bench(short)
    garbled = f"{HEADER}\n{SEPARATOR}\n|    32 |     16 |    x |     48 | 1 | 2 | 3 | 4 | 5 | 6 |\n"
    with pytest.raises(BatchedBenchOutputError, match="line 3 does not parse"):
        parse_batched_bench(garbled)


def test_command_asks_for_every_batch_size_on_separate_prompts_at_the_threads_given() -> None:
    command = batched_bench_command("/bin/llama-batched-bench", "m.gguf", 1024, 32, 64, (1, 2, 4, 8), 2)
    assert command == [
        "/bin/llama-batched-bench", "-m", "m.gguf", "-c", "1024", "-npp", "32", "-ntg", "64",
        "-npl", "1,2,4,8", "-t", "2", "-tb", "2",
    ]  # fmt: skip
    assert "-pps" not in command and "-nr" not in command
    assert batched_bench_command("b", "m.gguf", 1024, 32, 64, (1,), 2, no_repack=True)[-1] == "-nr"


def test_amx_is_read_from_the_cpu_flags(tmp_path) -> None:  # noqa: ANN001 (pytest's fixture)
    with_amx, without = tmp_path / "amx", tmp_path / "plain"
    with_amx.write_text("processor\t: 0\nflags\t\t: fpu avx512_vnni amx_bf16 amx_tile amx_int8\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu avx512_vnni\n")
    assert cpu_has_amx(str(with_amx))
    assert not cpu_has_amx(str(without))
    assert not cpu_has_amx(str(tmp_path / "missing"))


def test_llamacpp_rows_are_medians_against_llamacpps_own_one_sequence() -> None:
    runs = [{1: 100.0, 2: 150.0, 4: 260.0, 8: 400.0}, {1: 90.0, 2: 170.0, 4: 240.0, 8: 420.0},
            {1: 110.0, 2: 160.0, 4: 250.0, 8: 380.0}]  # fmt: skip
    rows = batch.llamacpp_rows("bench", "int4", 2, runs)
    assert [r["case"] for r in rows] == [f"llama.cpp {n} one adapter" for n in (1, 2, 4, 8)]
    assert [r["decode_tokens_per_s"] for r in rows] == [100.0, 160.0, 250.0, 400.0]
    assert [r["vs_alone"] for r in rows] == [1.0, 1.6, 2.5, 4.0]
    assert {r["format"] for r in rows} == {"Q4_0"}


def test_table_leaves_what_llamacpp_does_not_measure_empty() -> None:
    rows = batch.llamacpp_rows("bench", "int8", 2, [{1: 100.0, 2: 150.0, 4: 260.0, 8: 400.0}])
    line = batch.markdown(rows).splitlines()[2]
    assert line == "| bench | Q8_0 |  | fp16 | llama.cpp 1 one adapter | 100.0 | 1.00 |  |  |  |"


def test_int4_export_is_in_groups_of_32_as_q4_0() -> None:
    assert XnnpackPartitioner(quantize="int4").options.group == 32


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))


def _row(case: str, tps: float, rss: float = 100.0, fmt: str = "int4", runner: str = "", tables: str = "fp16") -> dict:
    return {
        "runner": runner,
        "model": "smollm2",
        "format": fmt,
        "adapter_dtype": tables,
        "kv_dtype": "fp32",
        "case": case,
        "decode_tokens_per_s": tps,
        "rss_mib": rss,
        "budget_mib": 226.0,
    }


def test_lines_give_each_format_its_ratios_and_largest_rss_against_the_lines() -> None:
    rows = [
        _row("alone", 300.0, rss=140.0),
        _row("8 adapters", 1200.0, rss=210.0),
        _row("8 none", 1400.0, rss=209.0),
        _row("alone", 200.0, fmt="int8"),
        _row("8 adapters", 780.0, rss=230.0, fmt="int8"),
        _row("8 none", 900.0, fmt="int8"),
    ]
    (int4, int8) = batch.lines(rows)
    assert int4["x_one_at_a_time"] == pytest.approx(4.0) and int4["holds_x_one_at_a_time"]
    assert int4["x_no_adapter"] == pytest.approx(1200 / 1400) and int4["holds_x_no_adapter"]
    assert int4["rss_mib"] == 210.0 and int4["holds_rss"]
    assert int8["x_one_at_a_time"] == pytest.approx(3.9) and not int8["holds_x_one_at_a_time"]
    assert int8["x_no_adapter"] == pytest.approx(780 / 900) and int8["holds_x_no_adapter"]
    assert int8["rss_mib"] == 230.0 and not int8["holds_rss"]
    table = batch.lines_markdown([int4, int8]).splitlines()
    assert table[2] == "| smollm2 | int4 | fp16 | fp32 | 4.00 holds | 0.857 holds | 210 (226) holds |"
    assert table[3] == "| smollm2 | int8 | fp16 | fp32 | 3.90 short | 0.867 holds | 230 (226) short |"


def test_the_no_adapter_line_is_marked_for_fp16_tables_only() -> None:
    rows = [_row(c, t, tables="int8") for c, t in (("alone", 300.0), ("8 adapters", 1200.0), ("8 none", 1500.0))]
    (int8_tables,) = batch.lines(rows)
    assert int8_tables["x_no_adapter"] == pytest.approx(0.8) and int8_tables["holds_x_no_adapter"] is None
    assert batch.lines_markdown([int8_tables]).splitlines()[2] == (
        "| smollm2 | int4 | int8 | fp32 | 4.00 holds | 0.800 | 100 (226) holds |"
    )


def test_lines_leave_out_a_group_without_its_eight_sequence_cases() -> None:
    rows = [_row("alone", 300.0), _row("8 adapters", 1200.0), _row("8 none", 1300.0, runner="after")]
    assert batch.lines(rows) == []
    rows += [_row("alone", 310.0, runner="after"), _row("8 adapters", 1250.0, runner="after")]
    (after,) = batch.lines(rows)
    assert after["runner"] == "after" and after["x_one_at_a_time"] == pytest.approx(1250 / 310)
    assert batch.lines_markdown([after]).splitlines()[0].startswith("| runner | model |")
