"""export_lora: exports LoRA variants of one foundation as .pte programs plus a shared foundation.ptd.

    bazel run //tools:export_lora                         # the built-in demo -> ./edgeshare_out/
    bazel run //tools:export_lora -- --out DIR --reference
    bazel run //tools:export_lora -- --model my_model.py:make --methods
    bazel run //tools:export_lora -- --hf-model DIR --adapter chat=DIR --adapter code=DIR --out OUT
    bazel run //tools:export_lora -- --hf-model DIR --adapter chat=DIR --adapter code=DIR --swappable
    bazel run //tools:export_lora -- --hf-model DIR --adapter chat=DIR --adapter code=DIR --batch-slots 8

--hf-model takes a directory that transformers' save_pretrained wrote (config.json + safetensors;
loaded offline) and --adapter NAME=DIR (repeatable) PEFT LoRA adapter directories
(adapter_config.json + adapter_model.safetensors). It writes OUT/<NAME>.pte per adapter,
OUT/foundation.pte (no adapter) and OUT/foundation.ptd; each program's method "forward" takes int64
input_ids [1, T], T from 1 to --max-seq-len, and returns the logits [1, T, vocab]. The model
directory's tokenizer files and generation_config.json are copied into OUT under their own names
(the runtime reads them from the program's folder).

--model names a function (path/to/file.py:function or package.module:function; relative paths
resolve against the directory the command was run from) returning
(foundation nn.Module, {adapter name: state dict or module}, example inputs).

--swappable (with --hf-model or --model) writes the adapters that share the first adapter's
structure (adapted modules, rank, alpha) as ONE OUT/lora.pte plus OUT/<NAME>.ptd per adapter (only
its weights), which a loaded lora.pte swaps without touching the foundation (tools/run
--swap-adapter, Program.bind_adapter in Python); an adapter of another structure gets its own
OUT/<NAME>.pte over the same foundation. OUT/foundation.pte and OUT/foundation.ptd as without it.

--batch-slots N (with --hf-model) writes OUT/batch.pte, whose method "forward_batch" runs N
sequences at once in one pass over the foundation, each in its own KV-cache slot and on any of the
adapters (generation/batch_engine.h runs it), OUT/batch_tables.ptd (the adapter tables, the given
adapters in slots 0, 1, ...), OUT/<NAME>.ptd per adapter (loadable into any slot at run time) and
OUT/batch.json; OUT/foundation.pte and OUT/foundation.ptd as without it (docs/batching.md).

--foundation-index FILE (with --hf-model, not --swappable) also writes FILE: the foundation.ptd's
identity and each entry's SHA-256, a few kilobytes. --over-foundation FILE (with --hf-model and
--adapter) then exports only the adapters' programs over that foundation: OUT/<NAME>.pte, byte for
byte what an export of the model with every adapter writes, without foundation.pte, foundation.ptd
or the tokenizer files. Give it the model and options the foundation was exported with: a program
that asks for a foundation key the index lacks, or for other bytes, is refused. One process per
adapter (a build action each, tools/defs.bzl) re-exports only the adapters that changed.

A weight of an adapter model is the foundation's when its dtype, shape and bytes equal a foundation
tensor's, whatever it is called (--foundation-by bytes, the default); --foundation-by names decides
by name instead (names containing "lora" are the adapter's; LoRA wrapper components are dropped).
"""

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence, TextIO, Tuple, Union

import numpy as np
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import check_out_dir, read_ptd_index
from edgeshare.exir.data_policy import FoundationDataPolicy
from edgeshare.exir.errors import ExportError
from edgeshare.exir.export_options import AdapterOptions, ExportOptions, QuantizationOptions
from edgeshare.exir.fc_formats import (
    FC_FORMATS,
    FC_MIXES,
    adapter_formats,
    fc_format,
    format_for_option,
    quantized_formats,
    unquantized_formats,
)
from edgeshare.exir.foundation_index import read_foundation_index, write_foundation_index
from edgeshare.exir.hf import BatchExportResult, export_hf_batch, export_hf_lora, export_hf_swappable
from edgeshare.exir.hf_batch import TABLE_DTYPES
from edgeshare.exir.lora import LoraExportResult, adapter_models, export_lora
from edgeshare.exir.swappable import SwappableExportResult, export_swappable
from edgeshare.exir.tokenizer_files import read_tokenizer_files, write_tokenizer_files

DEMO = "edgeshare.models:demo_lora"


def _user_dir() -> str:
    return os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()


def load_model_function(spec: str) -> Callable[[], Any]:
    """Resolves "path/to/file.py:function" or "package.module:function".

    Args:
      spec: the function's location.

    Returns:
      The function.

    Raises:
      ExportError: the file, module or function cannot be found.
    """
    location, sep, function = spec.rpartition(":")
    if not sep or not location or not function:
        raise ExportError(f"--model '{spec}' must be path/to/file.py:function or package.module:function")
    if location.endswith(".py") or os.sep in location:
        path = location if os.path.isabs(location) else os.path.join(_user_dir(), location)
        if not os.path.isfile(path):
            raise ExportError(f"--model: file '{path}' does not exist")
        module_name = "_edgeshare_user_model_" + os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(path))
        try:
            module_spec.loader.exec_module(module)
        finally:
            sys.path.pop(0)
    else:
        if _user_dir() not in sys.path:
            sys.path.append(_user_dir())
        try:
            module = importlib.import_module(location)
        except ImportError as e:
            raise ExportError(f"--model: cannot import module '{location}': {e}") from e
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ExportError(f"--model: '{location}' has no function '{function}'")
    return fn


def _user_path(path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(_user_dir(), path)


def parse_adapters(specs: Sequence[str]) -> Dict[str, str]:
    """--adapter NAME=DIR values -> {name: directory} (relative directories against the user's).

    Raises:
      ExportError: a value is not NAME=DIR, or a name is given twice.
    """
    adapters: Dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ExportError(f"--adapter '{spec}' must be NAME=DIR")
        if name in adapters:
            raise ExportError(f"--adapter: adapter name '{name}' is given twice")
        adapters[name] = _user_path(path)
    return adapters


def _quiet_transformers() -> None:
    """Progress bars and info logs of transformers would drown the tool's own progress lines."""
    import transformers  # noqa: PLC0415 (only --hf-model needs it)

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # Raised inside peft's loading by transformers' own deprecation; nothing a user can change.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


class _Progress:
    """The export's stages on stderr: on a terminal each stage is a tqdm status line whose elapsed
    time runs while the stage does (and stays, with the stage's time, when the next one starts); to
    a log, one plain line per stage.

    Args:
      stream: where to write (stderr).
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._bar: Optional[Any] = None
        self._lock = threading.Lock()
        self._ticker: Optional[threading.Thread] = None

    def __call__(self, line: str) -> None:
        if not self.tty:
            print(f"export_lora: {line}", file=self.stream, flush=True)
            return
        import tqdm  # noqa: PLC0415 (only a terminal shows bars)

        with self._lock:
            if self._bar is not None:
                self._bar.close()
            self._bar = tqdm.tqdm(desc=f"export_lora: {line}", bar_format="{desc} [{elapsed}]", file=self.stream)
        if self._ticker is None:
            # tqdm redraws on updates only; a stage has none until it ends.
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                if self._bar is not None:
                    self._bar.refresh()

    def close(self) -> None:
        """Ends the last stage's line."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def _unpack(result: Any, spec: str) -> Tuple[torch.nn.Module, Any, Tuple[Any, ...]]:
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise ExportError(
            f"--model {spec} must return (foundation module, {{adapter: state dict or module}}, example inputs)"
        )
    foundation, adapters, inputs = result
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    return foundation, adapters, tuple(inputs)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def write_reference(result: LoraExportResult, inputs: Tuple[Any, ...], out_dir: str) -> List[str]:
    """Writes each program's example inputs and eager outputs as .npy files.

    Floating-point tensors are written as float32; integer ones (token ids) keep their dtype, as
    the runtime takes them. Files: <program>.<method>.input<i>.npy and
    <program>.<method>.output<i>.npy.
    """
    written = []
    for adapter, module in result.modules.items():
        program = os.path.splitext(os.path.basename(result.program_paths[adapter]))[0]
        method = result.methods[adapter]
        with torch.no_grad():
            outputs = module(*inputs)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        for kind, tensors in (("input", inputs), ("output", outputs)):
            for i, t in enumerate(tensors):
                path = os.path.join(out_dir, f"{program}.{method}.{kind}{i}.npy")
                t = t.detach()
                np.save(path, (t.to(torch.float32) if t.is_floating_point() else t).numpy())
                written.append(path)
    return written


def _some(names: Sequence[str], shown: int = 8) -> str:
    """The first names and how many more (tools/inspect lists a file's every key)."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f", ... and {more} more (tools/inspect lists them)" if more > 0 else "")


def report(result: LoraExportResult, extra: Sequence[str]) -> str:
    """A human-readable summary of what was written."""
    lines = ["wrote:"]
    for path, size in result.files.items():
        lines.append(f"  {path}  {size} bytes ({_human(size)})")
    for path in extra:
        lines.append(f"  {path}  {os.path.getsize(path)} bytes")
    lines.append(
        f"shared foundation weights ({len(result.shared_keys)}, {result.shared_bytes} bytes, stored once in "
        f"{result.foundation_path}): {_some(result.shared_keys)}"
    )
    for adapter, size in result.adapter_bytes.items():
        lines.append(
            f"adapter '{adapter}' (method '{result.methods[adapter]}' of {result.program_paths[adapter]}): "
            f"{size} bytes of its own weights ({len(result.adapter_keys[adapter])} tensors)"
        )
    if result.foundation_program is not None:
        lines.append(
            f"foundation (method 'forward' of {result.foundation_program}): no weights of its own, every "
            f"weight in {result.foundation_path}"
        )
    total_adapter = sum(result.adapter_bytes.values())
    per_adapter = total_adapter // max(len(result.adapter_bytes), 1)
    unshared = result.shared_bytes * len(result.adapter_bytes) + total_adapter
    lines.append(
        f"bytes shared: {result.shared_bytes}; bytes per adapter: {per_adapter}; "
        f"without sharing the weights would take {unshared} bytes"
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export_lora", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: ./edgeshare_out); it must be new or empty unless --force",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a non-empty --out whole (the new export is written beside it and renamed in)",
    )
    parser.add_argument(
        "--model", default=None, help=f"path/to/file.py:function or package.module:function (default {DEMO})"
    )
    parser.add_argument(
        "--hf-model", default=None, metavar="DIR", help="a Hugging Face causal LM directory (save_pretrained)"
    )
    parser.add_argument(
        "--adapter", action="append", default=[], metavar="NAME=DIR", help="a PEFT LoRA adapter directory (repeatable)"
    )
    parser.add_argument(
        "--max-seq-len",
        type=int,
        default=None,
        help="largest token count T, prompt and generated tokens together (with --hf-model; default: "
        f"the model's max_position_embeddings, at most {DEFAULT_MAX_SEQ_LEN}: a KV cache of that many "
        "positions takes 90 MiB at fp32 for SmolLM2-135M, 128 MiB for Llama-3.2-1B, half with --kv-dtype fp16)",
    )
    parser.add_argument(
        "--kv-dtype",
        choices=("fp32", "fp16"),
        default="fp32",
        help="forward_cached's KV cache (with --hf-model): fp32 (exact) or fp16 (half the memory)",
    )
    parser.add_argument(
        "--full-logits",
        action="store_true",
        help="forward_cached returns every new position's logits (with --hf-model; default: the last one's)",
    )
    parser.add_argument(
        "--swappable",
        action="store_true",
        help="one lora.pte for the adapters of one structure plus <NAME>.ptd per adapter, swapped at run time",
    )
    parser.add_argument(
        "--batch-slots",
        type=int,
        metavar="N",
        help="(with --hf-model) batch.pte: N sequences at once, each on any of the adapters, in one "
        "pass over the foundation (the batch engine's program), plus <NAME>.ptd per adapter",
    )
    parser.add_argument(
        "--batch-adapter-slots", type=int, metavar="K", help="adapters resident at once (default: N, or the adapters given)"
    )
    parser.add_argument("--batch-rank", type=int, metavar="R", help="the largest LoRA rank a slot takes (default: the adapters')")
    parser.add_argument("--batch-rows", type=int, default=64, metavar="M", help="the most tokens one step runs (default 64)")
    parser.add_argument("--methods", action="store_true", help="one multi-method .pte instead of one per adapter")
    parser.add_argument("--name", default="lora", help="file stem of the multi-method .pte (with --methods)")
    parser.add_argument("--reference", action="store_true", help="also write example inputs and eager outputs (.npy)")
    parser.add_argument(
        "--fc-weight-dtype",
        choices=[f.option for f in unquantized_formats()],
        default=unquantized_formats()[0].option,
        help="dtype of stored fully connected weights (fp16: half the bytes, within a documented "
        "tolerance; see backends/xnnpack/partitioner.py)",
    )
    parser.add_argument(
        "--adapter-dtype",
        default=AdapterOptions().adapter_dtype,
        metavar="|".join(f.adapter_value for f in adapter_formats()),
        # Checked by AdapterOptions (not argparse's choices) so a bad value is one line.
        help="how adapters' linear weights are stored (fp16: half the bytes; int8: per output row with "
        "float32 scales, about a quarter); the foundation is as --fc-weight-dtype/--quantize say",
    )
    parser.add_argument(
        "--quantize",
        choices=["none", *(f.option for f in quantized_formats()), *(m.option for m in FC_MIXES)],
        default="none",
        help="int8: every foundation Linear weight (lm_head included) and the token embedding as int8 "
        "in blocks of 32 inputs with a float16 scale each (llama.cpp's Q8_0 grain; a layer whose "
        "width is not a multiple of 32 is int8 per row, said in the summary); int8-row: int8 per "
        "output row with float32 scales (6%% smaller, coarser); int4: signed 4-bit in groups along the "
        "input dim with float16 scales, and an untied token embedding likewise (gathered one row at a "
        "time; the lm_head, a tied embedding and a layer or table whose width is not a multiple of "
        "the group stay int8, said in the summary); int4k: int4, with every v_proj and down_proj "
        "Linear in int8 blocks of 32 (as llama.cpp's Q4_K_M keeps attn_v and ffn_down at more bits; "
        "about 1.1 bits more per weight); adapters as --adapter-dtype says",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        choices=[g for f in quantized_formats() for g in f.group_sizes],
        default=None,
        help=f"with --quantize int4 or int4k: the group along the input dim (default {QuantizationOptions().group})",
    )
    parser.add_argument(
        "--lm-head",
        choices=[f.option for f in quantized_formats()],
        default=None,
        help="with --quantize int4, int5, int4k or int5k: the output layer's scheme (default int8)",
    )
    parser.add_argument(
        "--calibration",
        metavar="TEXT",
        default=None,
        help="with --hf-model and --quantize int4, int5, int4k or int5k: a UTF-8 text file like the text the "
        "model will see; the model runs over its first tokens and each layer's scale search weighs its "
        "inputs by their mean square there (llama.cpp's importance matrix)",
    )
    parser.add_argument(
        "--foundation-index",
        metavar="FILE",
        default=None,
        help="with --hf-model: also write FILE, the foundation's identity and entry digests (what "
        "--over-foundation reads)",
    )
    parser.add_argument(
        "--over-foundation",
        metavar="FILE",
        default=None,
        help="with --hf-model and --adapter: write only the adapters' programs, over the foundation "
        "whose --foundation-index FILE is (same model and options)",
    )
    parser.add_argument(
        "--foundation-by",
        choices=("bytes", "names"),
        default="bytes",
        help="how foundation weights are recognised: equal dtype, shape and bytes (default), or by "
        "name ('lora' in a name marks an adapter weight)",
    )
    return parser


# The --max-seq-len a model gets by default: room for a chat (a system prompt, a few turns and
# their replies) at a KV cache the size of a small model's weights or less (see --help).
DEFAULT_MAX_SEQ_LEN = 2048


def default_max_seq_len(model_dir: str) -> int:
    """The model's max_position_embeddings (config.json), at most DEFAULT_MAX_SEQ_LEN.

    A config.json that cannot be read gives DEFAULT_MAX_SEQ_LEN: loading the model then says what is
    wrong with it, naming the file.
    """
    try:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return DEFAULT_MAX_SEQ_LEN
    limit = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
        return min(limit, DEFAULT_MAX_SEQ_LEN)
    return DEFAULT_MAX_SEQ_LEN


def _check_hf_flags(args: argparse.Namespace) -> None:
    if args.hf_model is None:
        if args.adapter:
            raise ExportError("--adapter needs --hf-model (--model returns its adapters itself)")
        if args.calibration is not None:
            raise ExportError("--calibration needs --hf-model (the text is read with the model's tokenizer)")
        return
    if not args.adapter and args.swappable:
        raise ExportError("--swappable needs at least one --adapter NAME=DIR")
    for flag, given in (
        ("--model", args.model is not None),
        ("--methods", args.methods),
        ("--reference", args.reference),
        ("--foundation-by names", args.foundation_by == "names"),
    ):
        if given:
            raise ExportError(f"{flag} cannot be combined with --hf-model")


def swappable_report(result: SwappableExportResult) -> str:
    """A summary of a --swappable export: the shared program, each adapter file, the others."""
    lines = ["wrote:"]
    lines.extend(f"  {path}  {size} bytes ({_human(size)})" for path, size in result.files.items())
    program_size = result.files[result.swappable_program]
    lines.append(f"swappable program: {result.swappable_program}  {program_size} bytes ({_human(program_size)})")
    lines.append(f"  {'adapter':<16} {'data file':<40} bytes")
    for name, path in result.adapter_files.items():
        lines.append(f"  {name:<16} {path:<40} {result.files[path]}")
    lines.append(
        f"each adapter file holds {len(result.adapter_keys)} tensors; load {result.swappable_program} over "
        f"{result.foundation_path} and one of them, then bind another to swap"
    )
    for name, path in result.own_programs.items():
        lines.append(
            f"adapter '{name}' has another structure (adapted modules, rank or alpha) than "
            f"'{next(iter(result.adapter_files))}': its own program {path} over {result.foundation_path}"
        )
    lines.append(f"foundation: {result.foundation_program} over {result.foundation_path}")
    return "\n".join(lines)


def batch_report(result: BatchExportResult) -> str:
    """A summary of a --batch-slots export."""
    shape = result.shape
    size = result.files[result.batch_program]
    lines = [
        f"batch program: {result.batch_program}  {size} bytes ({_human(size)}): {shape.slots} sequences of "
        f"{shape.max_seq_len} positions, {shape.adapter_slots} adapter slots of rank {shape.rank} ({shape.table_dtype}), "
        f"{shape.max_rows} tokens a step, {len(shape.targets)} adapted layers"
    ]
    for slot, (name, path) in enumerate(result.adapter_paths.items()):
        lines.append(f"adapter '{name}': {path} (in slot {slot} of {result.tables_path})")
    lines.append(f"manifest: {result.manifest_path}; foundation: {result.foundation_program} over {result.foundation_path}")
    return "\n".join(lines)


def _export_batch(
    args: argparse.Namespace, options: ExportOptions, out_dir: str, progress: Callable[[str], None]
) -> BatchExportResult:
    partitioner = XnnpackPartitioner(options=options.quantization, adapter_dtype=options.adapters.adapter_dtype)
    _quiet_transformers()
    return export_hf_batch(
        _user_path(args.hf_model),
        parse_adapters(args.adapter),
        out_dir,
        slots=args.batch_slots,
        max_seq_len=args.max_seq_len,
        adapter_slots=args.batch_adapter_slots,
        rank=args.batch_rank,
        max_rows=args.batch_rows,
        partitioner=partitioner,
        progress=progress,
        kv_dtype=_KV_DTYPES[args.kv_dtype],
        table_dtype=TABLE_DTYPES[args.adapter_dtype],
    )


def _export_swappable(
    args: argparse.Namespace, options: ExportOptions, out_dir: str, progress: Callable[[str], None]
) -> SwappableExportResult:
    partitioner = XnnpackPartitioner(options=options.quantization, adapter_dtype=options.adapters.adapter_dtype)
    if args.hf_model is not None:
        _quiet_transformers()
        return export_hf_swappable(
            _user_path(args.hf_model),
            parse_adapters(args.adapter),
            out_dir,
            max_seq_len=args.max_seq_len,
            partitioner=partitioner,
            progress=progress,
            kv_dtype=_KV_DTYPES[args.kv_dtype],
            full_logits=args.full_logits,
            calibration=None if args.calibration is None else _user_path(args.calibration),
        )
    spec = args.model or DEMO
    foundation, adapters, inputs = _unpack(load_model_function(spec)(), spec)
    policy = FoundationDataPolicy(foundation)
    modules = adapter_models(foundation, adapters, policy, None, policy.foundation_tag)
    return export_swappable(foundation, modules, inputs, out_dir, partitioner, policy, progress=progress)


_KV_DTYPES = {"fp32": None, "fp16": torch.float16}

# TensorLayout.scalar_type -> the name the summary gives its bytes: the first format row storing
# that type (int8 entries are qb8w's or qc8w's: the summary names both "int8").
_FORMAT_NAMES = {f.scalar_type: f.adapter_value for f in reversed(FC_FORMATS)}
# uint8 entries are packed values of two rows (int4, int5): each is named by its key's suffix.
_PACKED_SUFFIXES = {f.key_suffix: f.adapter_value for f in FC_FORMATS if f.packed_bits is not None}


def export_options(args: argparse.Namespace) -> ExportOptions:
    """The ExportOptions the flags ask for (checked as it is made).

    Raises:
      OptionError: a value or combination the options refuse, naming the flags.
    """
    quantization = QuantizationOptions(args.fc_weight_dtype, args.quantize, args.group_size, args.lm_head)
    adapters = AdapterOptions(
        foundation_by=args.foundation_by, swappable=args.swappable, adapter_dtype=args.adapter_dtype
    )
    return ExportOptions(
        multi_method=args.methods, program_name=args.name, quantization=quantization, adapters=adapters
    )


def format_bytes(ptd_path: str) -> str:
    """One line: the bytes of a .ptd's entries per element format ("fp32 1024, int8 256")."""
    totals: Dict[str, int] = {}
    for key, entry in read_ptd_index(ptd_path).items():
        layout = entry.tensor_layout
        name = "other" if layout is None else _FORMAT_NAMES.get(layout.scalar_type, f"type {layout.scalar_type}")
        name = next((n for suffix, n in _PACKED_SUFFIXES.items() if key.endswith(suffix)), name)
        totals[name] = totals.get(name, 0) + entry.size
    parts = [f"{name} {size} bytes ({_human(size)})" for name, size in sorted(totals.items())]
    return f"{os.path.basename(ptd_path)} by format: {', '.join(parts)}"


def formats_report(result: Union[LoraExportResult, SwappableExportResult], options: QuantizationOptions) -> str:
    """Lines on the weights a quantized export stores in another format than asked, and on the
    formats of the token embeddings gathered outside the delegate ("" when there are none)."""
    lines = []
    requested = options.quantized_format
    for key, why in result.fallbacks.items():
        lines.append(f"{fc_format(requested.fallback).option}, not {requested.option}: {key} ({why})")
    mix = options.mix
    if mix is not None:
        lines.append(
            f"{mix.option}: {', '.join(mix.projections)} {mix.sensitive_format.option} "
            f"({mix.sensitive_format.scheme}), the rest {requested.option}"
        )
    for key, option in result.gathered_formats.items():
        grouped = format_for_option(option).grouped
        lines.append(f"token embedding: {key} {option}" + (f", groups of {options.group}" if grouped else ""))
    return "".join("\n" + line for line in lines)


def _check_index_flags(args: argparse.Namespace) -> None:
    for flag, value in (("--foundation-index", args.foundation_index), ("--over-foundation", args.over_foundation)):
        if value is None:
            continue
        if args.hf_model is None:
            raise ExportError(f"{flag} needs --hf-model")
        if args.swappable:
            raise ExportError(f"{flag} cannot be combined with --swappable")
        if args.batch_slots is not None:
            raise ExportError(f"{flag} cannot be combined with --batch-slots")
    if args.foundation_index is not None and args.over_foundation is not None:
        raise ExportError(
            "--foundation-index and --over-foundation cannot be combined (the second writes no foundation)"
        )
    if args.over_foundation is not None and not args.adapter:
        raise ExportError("--over-foundation needs at least one --adapter NAME=DIR")


def over_foundation_report(result: LoraExportResult, index_path: str) -> str:
    """A summary of an --over-foundation export: the programs and what each holds of its own."""
    lines = ["wrote:"]
    lines.extend(f"  {path}  {size} bytes ({_human(size)})" for path, size in result.files.items())
    index = result.foundation_index
    identity = index.identity.hex() if index is not None else "?"
    lines.append(
        f"over the foundation of {index_path} (identity {identity[:16]}...): its {len(result.shared_keys)} "
        f"weights the programs use, {result.shared_bytes} bytes, read from foundation.ptd at run time"
    )
    for adapter, size in result.adapter_bytes.items():
        lines.append(
            f"adapter '{adapter}' ({result.program_paths[adapter]}): {size} bytes of its own weights "
            f"({len(result.adapter_keys[adapter])} tensors)"
        )
    return "\n".join(lines)


def _check_swappable_flags(args: argparse.Namespace) -> None:
    if args.kv_dtype != "fp32" and args.hf_model is None:
        raise ExportError("--kv-dtype applies to --hf-model exports (their forward_cached method)")
    if args.full_logits and args.hf_model is None:
        raise ExportError("--full-logits applies to --hf-model exports (their forward_cached method)")
    if args.swappable and args.reference:
        raise ExportError("--reference cannot be combined with --swappable")
    batch_only = ("batch_adapter_slots", "batch_rank")
    if args.batch_slots is None:
        given = [f"--{name.replace('_', '-')}" for name in batch_only if getattr(args, name) is not None]
        if given:
            raise ExportError(f"{given[0]} applies to --batch-slots exports")
        return
    if args.hf_model is None:
        raise ExportError("--batch-slots applies to --hf-model exports")
    for flag, value in (("--batch-slots", args.batch_slots), ("--batch-adapter-slots", args.batch_adapter_slots),
                        ("--batch-rank", args.batch_rank), ("--batch-rows", args.batch_rows)):
        if value is not None and value < 1:
            raise ExportError(f"{flag} must be at least 1, got {value}")
    for flag, on in (("--swappable", args.swappable), ("--methods", args.methods), ("--reference", args.reference),
                     ("--full-logits", args.full_logits)):
        if on:
            raise ExportError(f"--batch-slots cannot be combined with {flag}")
    if not args.adapter:
        raise ExportError("--batch-slots needs at least one --adapter NAME=DIR")


def _export(
    args: argparse.Namespace, options: ExportOptions, out_dir: str, progress: Callable[[str], None]
) -> Tuple[LoraExportResult, List[str]]:
    partitioner = XnnpackPartitioner(options=options.quantization, adapter_dtype=options.adapters.adapter_dtype)
    if args.hf_model is not None:
        adapters = parse_adapters(args.adapter)
        _quiet_transformers()
        result = export_hf_lora(
            _user_path(args.hf_model),
            adapters,
            out_dir,
            max_seq_len=args.max_seq_len,
            partitioner=partitioner,
            progress=progress,
            kv_dtype=_KV_DTYPES[args.kv_dtype],
            full_logits=args.full_logits,
            calibration=None if args.calibration is None else _user_path(args.calibration),
            foundation_index=None if args.over_foundation is None else read_foundation_index(args.over_foundation),
        )
        return result, []
    spec = args.model or DEMO
    foundation, adapters, inputs = _unpack(load_model_function(spec)(), spec)
    result = export_lora(
        foundation,
        adapters,
        inputs,
        out_dir,
        partitioner,
        progress=progress,
        options=options,
    )
    return result, write_reference(result, inputs, out_dir) if args.reference else []


def check_out_empty(out_dir: str, force: bool) -> None:
    """Refuses an --out that holds anything unless force: an export never mixes with an older one.

    Raises:
      ExportError: out_dir is a folder with files in it and force is not set.
    """
    if not force and os.path.isdir(out_dir) and os.listdir(out_dir):
        raise ExportError(
            f"--out '{out_dir}' is not empty (an earlier export?): give --force to replace it whole, "
            "or another folder"
        )


@contextlib.contextmanager
def staged_out_dir(out_dir: str) -> Iterator[str]:
    """A new folder beside out_dir to export into, which becomes out_dir only when the block ends
    without an error (an older out_dir is then removed whole); after an error it is removed and
    out_dir is as it was.

    Yields:
      The staging folder's path.
    """
    path = os.path.abspath(out_dir)
    parent, base = os.path.dirname(path), os.path.basename(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{base}.partial-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # as a plain mkdir would have made it
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = None
    if os.path.lexists(path):
        old = tempfile.mkdtemp(prefix=f".{base}.old-", dir=parent)
        os.rename(path, os.path.join(old, base))
    os.rename(staging, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the tool; returns the exit status."""
    args = _parser().parse_args(argv)
    # torch's own deprecation noise from deep-copying graphs; not actionable by users of this tool.
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    out_dir = _user_path(args.out or "edgeshare_out")
    progress = _Progress(sys.stderr)
    try:
        _check_hf_flags(args)
        if args.hf_model is not None and args.max_seq_len is None:
            args.max_seq_len = default_max_seq_len(_user_path(args.hf_model))
        _check_swappable_flags(args)
        _check_index_flags(args)
        for flag in ("foundation_index", "over_foundation"):
            if getattr(args, flag) is not None:
                setattr(args, flag, _user_path(getattr(args, flag)))
        if args.over_foundation is not None:
            read_foundation_index(args.over_foundation)  # before the model loads
        options = export_options(args)
        check_out_dir(out_dir)
        check_out_empty(out_dir, args.force)
        # The model's tokenizer and generation_config.json go beside the programs (checked first).
        with_text = args.hf_model is not None and args.over_foundation is None
        text = read_tokenizer_files(_user_path(args.hf_model)) if with_text else None
        result: Union[LoraExportResult, SwappableExportResult, BatchExportResult]
        with staged_out_dir(out_dir) as staging:
            if args.batch_slots is not None:
                result = _export_batch(args, options, staging, progress)
                summary = batch_report(result)
            elif args.swappable:
                result = _export_swappable(args, options, staging, progress)
                summary = swappable_report(result)
            elif args.over_foundation is not None:
                result, _ = _export(args, options, staging, progress)
                summary = over_foundation_report(result, args.over_foundation)
            else:
                result, extra = _export(args, options, staging, progress)
                summary = report(result, extra)
            if args.over_foundation is None:
                summary += "\n" + format_bytes(os.path.join(staging, result.foundation_path))
            summary += formats_report(result, options.quantization)
            if text is not None and text.contents:
                written = write_tokenizer_files(text, staging, progress)
                summary += "\ntokenizer and generation config: " + ", ".join(os.path.basename(p) for p in written)
            index = getattr(result, "foundation_index", None)
            if args.foundation_index is not None and index is not None:
                write_foundation_index(args.foundation_index, index)
                summary += f"\nfoundation index: {args.foundation_index}"
            summary = summary.replace(staging, os.path.abspath(out_dir))
    except (ValueError, TypeError) as e:
        progress.close()
        # One line: the error names the file, directory, adapter or node at fault.
        print(f"export_lora: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    progress.close()
    print(summary)
    return 0


def main_and_exit(argv: Optional[Sequence[str]] = None) -> NoReturn:
    """main, then the process ends with its exit status.

    Every file is written and closed when main returns. Tearing the interpreter down would free
    torch's, transformers' and the export's objects one at a time and collect their cycles (seconds
    at real size) for nothing: the process ends there instead, its output flushed first.
    """
    status = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main_and_exit()
