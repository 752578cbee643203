"""bench/aarch64's instruction counts and refusals.

The plugin's count is checked on a program of our own, built here with the aarch64 cross compiler:
a loop of N iterations whose body is a fixed sequence of instructions, so the count must grow by
exactly the same amount from N to 2N as from 2N to 3N, and by at least the loop's own instructions.
"""

import subprocess
import sys

import pytest

from edgeshare.bench import aarch64

LOOP = r"""
int main(int argc, char** argv) {
  long n = 0;
  for (const char* p = argv[1]; *p; ++p) n = n * 10 + (*p - '0');
  volatile long sum = 0;
  for (long i = 0; i < n; ++i) sum += i;
  return 0;
}
"""


@pytest.fixture(scope="module")
def loop_binary(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loop")
    source, binary = folder / "loop.c", folder / "loop"
    source.write_text(LOOP)
    subprocess.run(["aarch64-linux-gnu-gcc", "-O1", "-o", str(binary), str(source)], check=True)
    return str(binary)


def _count(binary: str, n: int) -> int:
    return aarch64.count_instructions([binary, str(n)], {}, f"the loop of {n}")


def test_the_count_is_exact_and_linear_in_the_work(loop_binary):
    counts = [_count(loop_binary, n) for n in (100_000, 200_000, 300_000)]
    assert counts[1] - counts[0] == counts[2] - counts[1]
    # At least a load, an add, a store, a compare and a branch an iteration.
    assert counts[1] - counts[0] >= 5 * 100_000
    assert _count(loop_binary, 100_000) == counts[0]


def test_a_failing_program_is_one_line_naming_it(loop_binary, tmp_path):
    with pytest.raises(aarch64.BenchError, match="the missing one failed under qemu"):
        aarch64.count_instructions([str(tmp_path / "missing")], {}, "the missing one")


def test_an_x86_generate_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        aarch64.parse_options(["--generate", sys.executable])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "is not an aarch64 executable" in err[-1] and "--config=aarch64" in err[-1]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--formats", "int3"], "no format 'int3'"),
        (["--llamacpp", "sve"], "no variant 'sve'"),
        (["--tokens", "12,4"], "1 <= N1 < N2"),
        (["--tokens", "a,b"], "not two integers"),
        (["--tokens", "4,200"], "bound 128"),
    ],
)
def test_bad_flags_are_one_line(flags, message, capsys, loop_binary):
    with pytest.raises(SystemExit) as exit_info:
        aarch64.parse_options([*flags, "--generate", loop_binary])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_table_puts_each_edgeshare_row_beside_its_format_on_llamacpp():
    rows = [
        {"format": "int8", "side": "edgeshare", "set": "best", "insns_per_token": 30e6},
        {"format": "Q8_0", "side": "llama.cpp", "set": "dotprod", "insns_per_token": 20e6},
        {"format": "Q4_0", "side": "llama.cpp", "set": "dotprod", "insns_per_token": 10e6},
    ]
    table = aarch64.format_table(rows).splitlines()
    assert table[2] == "| int8 / Q8_0 | best | 30.00 | dotprod | 20.00 | 1.50 |"
    assert len(table) == 3


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
