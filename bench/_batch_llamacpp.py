"""bench/batch's llama.cpp rows (--llamacpp): llama.cpp's own llama-batched-bench decoding 1, 2, 4
and 8 sequences in one batch, the best llama.cpp does on one adapter (it runs one set of adapters
per batch, so it cannot mix adapters in one).

The model is bench/batch's, converted with the peer's llama.cpp converters as bench/serve converts
it (convert_once: fp32 as F32, int8 as Q8_0, int4 as Q4_0 quantized from F32; kept in the work
folder's gguf/). llama-batched-bench is built from the same vendored llama.cpp and in the same
build folder as bench/serve's llama-server (llamacpp_binary), and run as

    llama-batched-bench -m MODEL.gguf -c 8*max_seq_len -npp PROMPT -ntg NEW -npl 1,2,4,8 -t T -tb T

Each B is B separate prompts of PROMPT random tokens prefilled in one batch, then NEW steps of one
token per sequence; its S_TG (B*NEW tokens over the decode steps' time) is the row's decode
tokens/s. This llama-batched-bench loads no LoRA adapter: it builds its context without common's
adapter loading, so a --lora on its command line is parsed and ignored. Its figure is therefore the
bare model's, which is also what one adapter merged into the weights costs (the same tensors,
shapes and formats): the best llama.cpp can do when every sequence of the batch is on one adapter.
Applying the adapter unmerged at run time, as llama-server does per request, costs more (that is
bench/serve's comparison).
"""

import dataclasses
import os
import subprocess
from typing import Callable, Dict, List, Sequence

from edgeshare.bench._llm_model import LlmFiles
from edgeshare.bench._runner import BenchError

__all__ = [
    "GGUF_FORMATS",
    "BatchedBenchOutputError",
    "BatchedBenchRow",
    "LlamacppBatch",
    "batched_bench_command",
    "cpu_has_amx",
    "decode_rates",
    "parse_batched_bench",
    "prepare_llamacpp",
]

# bench/batch's --formats -> the llama.cpp format (bench/_llm_peer_llamacpp.py's FORMATS) it is
# measured beside; edgeshare's int4 export is in groups of 32 (the partitioner's default), as Q4_0.
GGUF_FORMATS: Dict[str, str] = {"fp32": "F32", "int8": "Q8_0", "int4": "Q4_0"}
# llama-batched-bench's table columns that a row reads.
_COLUMNS = ("PP", "TG", "B", "T_PP s", "S_TG t/s")


class BatchedBenchOutputError(ValueError):
    """llama-batched-bench's output has no results table, a malformed row, or lacks a batch size."""


@dataclasses.dataclass(frozen=True)
class BatchedBenchRow:
    """One row of llama-batched-bench's table.

    Attributes:
      prompt_tokens: PP, each sequence's prompt.
      new_tokens: TG, tokens decoded per sequence.
      sequences: B, sequences in the batch.
      prefill_s: T_PP, the seconds prefilling every sequence's prompt.
      decode_tokens_per_s: S_TG, B * TG over the decode steps' seconds.
    """

    prompt_tokens: int
    new_tokens: int
    sequences: int
    prefill_s: float
    decode_tokens_per_s: float


def _cells(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_batched_bench(text: str) -> List[BatchedBenchRow]:
    """llama-batched-bench's markdown output (its stdout; log lines around the table are skipped)
    -> its rows in order. Columns are found by their header names.

    Raises:
      BatchedBenchOutputError: no table with an S_TG column, or a row that does not parse.
    """
    header: List[str] = []
    rows: List[BatchedBenchRow] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.lstrip().startswith("|"):
            if rows:
                break
            continue
        cells = _cells(line)
        if not header:
            if "S_TG t/s" in cells:
                header = cells
                missing = [c for c in _COLUMNS if c not in header]
                if missing:
                    raise BatchedBenchOutputError(f"llama-batched-bench's header (line {number}) lacks {missing}")
            continue
        if all(set(cell) <= set("-:") for cell in cells):
            continue
        if len(cells) != len(header):
            raise BatchedBenchOutputError(
                f"llama-batched-bench's line {number} has {len(cells)} cells, its header {len(header)}: {line!r}"
            )
        values = dict(zip(header, cells))
        try:
            rows.append(
                BatchedBenchRow(
                    int(values["PP"]),
                    int(values["TG"]),
                    int(values["B"]),
                    float(values["T_PP s"]),
                    float(values["S_TG t/s"]),
                )
            )
        except ValueError as e:
            raise BatchedBenchOutputError(f"llama-batched-bench's line {number} does not parse ({e}): {line!r}") from e
    if not header:
        raise BatchedBenchOutputError("llama-batched-bench's output has no table with an S_TG t/s column")
    return rows


def decode_rates(rows: Sequence[BatchedBenchRow], sequences: Sequence[int]) -> Dict[int, float]:
    """S_TG per batch size, for each of `sequences`.

    Raises:
      BatchedBenchOutputError: a batch size has no row (llama-batched-bench leaves out, silently,
        a B whose B * (PP + TG) exceeds its -c) or more than one.
    """
    rates: Dict[int, float] = {}
    for n in sequences:
        found = [row for row in rows if row.sequences == n]
        if not found:
            raise BatchedBenchOutputError(
                f"llama-batched-bench gave no row for B = {n} (it leaves out a B whose B * (PP + TG) exceeds its -c)"
            )
        if len(found) > 1:
            raise BatchedBenchOutputError(
                f"llama-batched-bench gave {len(found)} rows for B = {n} (one -npp and one -ntg expected)"
            )
        rates[n] = found[0].decode_tokens_per_s
    return rates


def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has AMX's int8 tiles (the flag amx_int8 in /proc/cpuinfo)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            return any(line.startswith("flags") and "amx_int8" in line.split() for line in f)
    except OSError:
        return False


def batched_bench_command(
    binary: str,
    gguf: str,
    context: int,
    prompt_len: int,
    new_tokens: int,
    sequences: Sequence[int],
    threads: int,
    no_repack: bool = False,
) -> List[str]:
    """llama-batched-bench's command line: separate prompts (no -pps), decoding and prefill on
    `threads` threads, llama.cpp's defaults otherwise (flash attention auto, an F16 KV cache).
    `no_repack` adds -nr: no extra weight buffers (AMX, repacked CPU layouts)."""
    return [
        binary,
        "-m",
        gguf,
        "-c",
        str(context),
        "-npp",
        str(prompt_len),
        "-ntg",
        str(new_tokens),
        "-npl",
        ",".join(str(n) for n in sequences),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        *(["-nr"] if no_repack else []),
    ]


@dataclasses.dataclass(frozen=True)
class LlamacppBatch:
    """One format's llama-batched-bench run, repeatable.

    Attributes:
      command: batched_bench_command's.
      sequences: the batch sizes it is asked for (-npl).
      log_prefix: each run's output is kept in <log_prefix>-<run>.log.
    """

    command: Sequence[str]
    sequences: Sequence[int]
    log_prefix: str

    def run(self, index: int) -> Dict[int, float]:
        """Runs it once -> S_TG per batch size; its stdout and stderr kept in the run's log.

        Raises:
          BenchError: the process failed.
          BatchedBenchOutputError: its output lacks a batch size.
        """
        proc = subprocess.run(list(self.command), capture_output=True, text=True, check=False)
        log_path = f"{self.log_prefix}-{index}.log"
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("$ " + " ".join(self.command) + "\n" + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise BenchError(f"llama-batched-bench exited with status {proc.returncode}; see {log_path}")
        return decode_rates(parse_batched_bench(proc.stdout), self.sequences)


def prepare_llamacpp(
    files: LlmFiles,
    work: str,
    quantize: str,
    max_seq_len: int,
    prompt_len: int,
    new_tokens: int,
    sequences: Sequence[int],
    threads: int,
    say: Callable[[str], None],
) -> LlamacppBatch:
    """The model converted to `quantize`'s llama.cpp format under work/gguf (reused when there) and
    llama-batched-bench built (on first use) -> the run. -c is max(sequences) * max_seq_len, the
    KV cache of edgeshare's batch (a slot of max_seq_len per sequence).

    Raises:
      BenchError: the peer venv, the conversion or the build failed.
    """
    # The peer's modules only when --llamacpp asks for them.
    from edgeshare.bench._llm_peer_llamacpp import FORMATS, convert_once  # noqa: PLC0415
    from edgeshare.bench._serve_servers import llamacpp_binary  # noqa: PLC0415

    fmt = next(f for f in FORMATS if f.name == GGUF_FORMATS[quantize])
    converted = convert_once(files, os.path.join(work, "gguf"), [fmt], say)
    gguf = converted["models"][(fmt.gguf or fmt.quantize or "").lower()]["path"]
    binary = llamacpp_binary("llama-batched-bench", say=say)
    context = max(sequences) * max_seq_len
    # This llama.cpp's AMX matrix multiply (an extra weight buffer, used where the CPU has AMX) dies
    # with SIGSEGV on the bench's Q4_0 and Q8_0 models (Intel Xeon, amx_int8); -nr turns off every
    # extra buffer, AMX and the repacked CPU layouts alike, so on such a CPU the figure is without both.
    no_repack = cpu_has_amx()
    if no_repack:
        say("[llamacpp] this CPU has AMX: llama-batched-bench runs with -nr (no AMX, no repacked weights)")
    command = batched_bench_command(binary, gguf, context, prompt_len, new_tokens, sequences, threads, no_repack)
    return LlamacppBatch(command, tuple(sequences), os.path.join(work, f"llama-batched-bench-{fmt.name}"))
