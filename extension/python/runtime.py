"""The Python runtime: open data files, load programs, run methods on numpy arrays.

Everything runs in edgeshare's C++ runtime (the _edgeshare_runtime extension), in this process:
data files are opened once per process and shared, and the XNNPACK delegate's process-wide weights
cache packs a foundation weight once for every program loaded over it, exactly as in the C++ tools.

    foundation = DataFile.open("foundation.ptd")
    lora_a = Program.load("lora_a.pte", [foundation])
    lora_b = Program.load("lora_b.pte", [foundation])      # shares the foundation's packed weights
    (logits,) = lora_a.method("forward").execute(x)          # x: a numpy array (or a CPU torch tensor)

Adapters exported with `export_lora --swappable` (one lora.pte, one <name>.ptd per adapter) are
swapped on the loaded program, without fetching or packing anything of the foundation:

    chat = Program.load("lora.pte", [foundation, DataFile.open("chat.ptd")])
    chat.bind_adapter(DataFile.open("code.ptd"))           # every method now runs adapter "code"

Errors: every runtime failure raises EdgeshareError with the runtime's Error name in `.code` and its
one-line message (naming the file, method, input or key). Threads: loading and execute() release the
GIL; two methods run in parallel on two threads, and calls on one method wait for each other. A
program's methods split their work across the program's own threads (Program.load(threads=N); the
default is set_num_threads()'s count, 1 at start), so programs with different counts run side by side.
Lifetimes: a Method keeps its Program alive, and a Program its data files.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from edgeshare.extension.python import _edgeshare_runtime as _native
from edgeshare.extension.python._errors import EdgeshareError

__all__ = [
    "DataFile",
    "EdgeshareError",
    "GenerationResult",
    "Method",
    "Program",
    "TensorSpec",
    "TokenStream",
    "set_num_threads",
    "set_verify_content",
    "set_weight_sharing",
    "weights_cache_stats",
]

PathLike = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """An input or output of a method, as the program planned it.

    Attributes:
      dtype: the numpy dtype name ("float32", "int64", "bool", ...), or the runtime's type name
        when numpy has none ("BFloat16").
      shape: the planned sizes; a dim exported dynamic (e.g. the token count) takes any size from 1
        to this bound.
      dynamic_dims: the dims exported dynamic, e.g. (1,) for input_ids [1, T] with T up to
        --max-seq-len; () when every dim is fixed.
    """

    dtype: str
    shape: tuple[int, ...]
    dynamic_dims: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """What Method.generate returned.

    Attributes:
      tokens: the new token ids, in order (the prompt is not repeated).
      prefill_ms: the prompt's one execute (with the first token's argmax), in milliseconds.
      decode_tokens_per_s: new tokens after the first per second of decode executes (0 with fewer
        than two new tokens).
      finish_reason: "stop" (a stop id: an end token) or "length" (max_new_tokens, or the
        sequence reached the method's length, --max-seq-len).
      prefilled_tokens: the prompt tokens executed (fewer than the prompt's with cached_tokens).
      seed: the sampler's seed (drawn fresh when none was given), None for greedy generation.
    """

    tokens: List[int]
    prefill_ms: float
    decode_tokens_per_s: float
    finish_reason: str = "length"
    prefilled_tokens: int = 0
    seed: Optional[int] = None


class TokenStream:
    """The iterator Method.stream returns: the new token ids as they are generated.

    Attributes:
      seed: the sampler's seed (drawn fresh when none was given), None for greedy generation.
    """

    def __init__(self, tokens: Iterator[int], seed: Optional[int]) -> None:
        self._tokens = tokens
        self.seed = seed

    def __iter__(self) -> "TokenStream":
        return self

    def __next__(self) -> int:
        return next(self._tokens)


class DataFile:
    """A .ptd data file, memory-mapped and verified once per process.

    Opening the same file again (by any path) gives the same mapping while it is open; it closes
    when neither Python nor any program loaded over it holds it.
    """

    def __init__(self, native: Any) -> None:
        """Internal: use DataFile.open()."""
        self._native = native

    @classmethod
    def open(cls, path: PathLike) -> DataFile:
        """Opens (or finds already open) the data file at `path`.

        Args:
          path: the .ptd file.

        Returns:
          The open file.

        Raises:
          EdgeshareError: AccessFailed for a missing file, InvalidData for a malformed one; the
            message names the file.
        """
        return cls(_native.DataFile.open(os.fspath(path)))

    @property
    def path(self) -> str:
        """The path it was first opened by."""
        return self._native.path

    def __repr__(self) -> str:
        return f"DataFile({self.path!r})"


class Method:
    """One loaded method of a Program, ready to execute.

    Adapters are swapped for every method at once: Program.bind_adapter.
    A stateful method (a KV cache, e.g. "forward_cached" of an --hf-model export) also generates:
    generate() greedy-decodes token ids.
    """

    def __init__(self, native: Any, program: Program) -> None:
        """Internal: use Program.method()."""
        self._native = native
        self._program = program  # The native handle keeps the C++ program; this, the Python one.
        self._inputs = [_spec(spec) for spec in native.inputs]
        self._outputs = [_spec(spec) for spec in native.outputs]

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def program(self) -> Program:
        return self._program

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    @property
    def inputs(self) -> List[Optional[TensorSpec]]:
        """Each input's planned dtype and shape; None for an input that is not a tensor."""
        return list(self._inputs)

    @property
    def outputs(self) -> List[Optional[TensorSpec]]:
        """Each output's planned dtype and shape (its upper bound); None for a non-tensor."""
        return list(self._outputs)

    def execute(self, *inputs: Any) -> List[np.ndarray]:
        """Runs the method once.

        Args:
          *inputs: one array per input, of the input's dtype and shape (a dynamic dim may take
            any size up to its bound): numpy arrays, CPU torch tensors (read through __array__,
            without copying when contiguous) or anything with the buffer protocol. Each is copied
            once, straight into the method's planned input memory.

        Returns:
          The outputs as new numpy arrays of their real shapes (copied out: the method's memory is
          reused by the next call).

        Raises:
          EdgeshareError: InvalidArgument for a wrong number of inputs, an input of another dtype
            or shape (naming the method and input), a token id outside the vocabulary or a start
            position outside the KV cache of a token method; a kernel's or delegate's error
            naming the instruction.
        """
        return list(self._native.execute(*inputs))

    def generate(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        eos_id: Optional[int] = None,
        *,
        stop_ids: Optional[Sequence[int]] = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        cached_tokens: int = 0,
    ) -> GenerationResult:
        """Generates with this stateful method: resets its KV cache, prefills the prompt in one
        execute, then runs one execute per new token, picked by the runtime's C++ sampler (the one
        //tools:generate uses, so a seed gives the same tokens in both).

        Greedy by default (temperature 0: the largest logit, the first on ties). Stops after
        max_new_tokens, where the sequence reaches the method's length (--max-seq-len: both
        finish_reason "length"), or after a stop id (included; "stop"): eos_id and stop_ids, or
        when both are None, the model's end tokens (eos_token_id of the generation_config.json
        beside the program; none without it). The GIL is released while it runs; calls on one
        method wait for each other.

        A conversation can continue in the KV cache: give the whole sequence again with
        cached_tokens=method.cached_tokens (or fewer), and only the rest is prefilled; the tokens
        equal a fresh run's.

        Args:
          prompt_ids: int64 token ids of shape [P] or [1, P] (numpy or a CPU torch tensor), each
            within the vocabulary.
          max_new_tokens: how many tokens to generate at most (fewer where the sequence reaches the
            method's length; the prompt itself must fit in it).
          eos_id: a stop id (a token id within the vocabulary).
          stop_ids: more stop ids.
          temperature: 0 for greedy; otherwise logits are divided by it before sampling.
          top_k: sample among the k most probable tokens (0: all; 1: greedy).
          top_p: sample among the most probable tokens whose probability reaches top_p (1: all).
          repetition_penalty: transformers' penalty on every token of the prompt and output (1: none).
          seed: the sampler's seed; a seeded run repeats exactly. None draws a fresh one
            (os.urandom), reported in the result. Greedy generation takes none.
          cached_tokens: how many leading prompt tokens the KV cache holds from this method's last
            generation (at most cached_tokens of the method): they are not run again.

        Returns:
          The new tokens, the timings, the finish reason and the seed.

        Raises:
          TypeError: max_new_tokens, eos_id, a stop id, top_k or seed is not an int (3.7, "5",
            True), or a float option is not a number.
          EdgeshareError: InvalidArgument for a prompt of another dtype or shape, an empty prompt,
            a token id or stop id outside the vocabulary, a prompt (plus new tokens) longer than
            the method was exported for (--max-seq-len), a negative max_new_tokens, cached_tokens
            past what the cache holds or not short of the prompt, sampling options out of range
            (temperature < 0, top_p outside (0, 1], repetition_penalty <= 0),
            or a method without the generation signature or state (naming it); the method's own
            errors.
        """
        args, used_seed = self._generation_args(prompt_ids, max_new_tokens, eos_id, stop_ids, temperature, top_k,
                                                top_p, repetition_penalty, seed, cached_tokens)
        tokens, prefill_ms, decode_tokens_per_s, finish, prefilled = self._native.generate(*args)
        return GenerationResult(list(tokens), float(prefill_ms), float(decode_tokens_per_s), str(finish),
                                int(prefilled), used_seed)

    def stream(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        eos_id: Optional[int] = None,
        *,
        stop_ids: Optional[Sequence[int]] = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        cached_tokens: int = 0,
    ) -> TokenStream:
        """generate() one token at a time: the prompt is checked and prefilled at the call, each
        next() runs one execute (the GIL released) and yields its token. The tokens equal
        generate()'s with the same arguments. Another use of the method (execute, generate, a new
        stream, bind_adapter) ends this stream: its next next() raises EdgeshareError InvalidState.

        Args and Raises: as generate().

        Returns:
          An iterator of the new token ids, with the seed used as its `seed`.
        """
        args, used_seed = self._generation_args(prompt_ids, max_new_tokens, eos_id, stop_ids, temperature, top_k,
                                                top_p, repetition_penalty, seed, cached_tokens)
        ticket = self._native.start_generation(*args)
        return TokenStream(self._tokens(ticket), used_seed)

    @property
    def cached_tokens(self) -> int:
        """How many leading tokens of the last generation's sequence (its prompt and every new token
        but the last) the KV cache holds: what a continuing generate(cached_tokens=...) may skip.
        0 after execute() or a bind_adapter."""
        return int(self._native.cached_length())


    def generate_text(self, prompt: Any, max_new_tokens: int, **options: Any) -> Any:
        """Text in, text out with the program's tokenizer (text.generate_text): returns a
        TextGenerationResult (text, tokens, prompt_tokens, stop_reason).

        Args:
          prompt: text (encoded with program.tokenizer) or token ids.
          max_new_tokens: tokens to generate at most.
          **options: stop (stop strings), add_special_tokens, and generate()'s options.

        Raises:
          ValueError: a text prompt and no tokenizer in the program's folder; as generate().
        """
        from edgeshare.extension.python.text import generate_text  # noqa: PLC0415 (tokenizers is optional)

        return generate_text(self, prompt, max_new_tokens, **options)

    def stream_text(self, prompt: Any, max_new_tokens: int, **options: Any) -> Iterator[str]:
        """generate_text as an iterator of text pieces as they are decoded (text.stream_text); the
        pieces concatenate to generate_text's text and never split a UTF-8 character.

        Raises:
          As generate_text.
        """
        from edgeshare.extension.python.text import stream_text  # noqa: PLC0415 (tokenizers is optional)

        return stream_text(self, prompt, max_new_tokens, **options)

    def _tokens(self, ticket: int) -> Iterator[int]:
        while True:
            token = self._native.next_token(ticket)
            if token is None:
                return
            yield int(token)

    def _generation_args(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        eos_id: Optional[int],
        stop_ids: Optional[Sequence[int]],
        temperature: float,
        top_k: int,
        top_p: float,
        repetition_penalty: float,
        seed: Optional[int],
        cached_tokens: int = 0,
    ) -> Tuple[Tuple[Any, ...], Optional[int]]:
        count = _integer("max_new_tokens", max_new_tokens)
        stops = [_integer("eos_id", eos_id)] if eos_id is not None else []
        if stop_ids is not None:
            stops += [_integer("stop_ids", i) for i in stop_ids]
        elif eos_id is None:
            stops = list(self._program.end_token_ids)
        for i in stops:
            if i < 0:
                kind = "eos_id" if eos_id is not None and i == eos_id else "stop id"
                raise EdgeshareError("InvalidArgument", f"generate(): {kind} is {i}, not a token id")
        greedy = _number("temperature", temperature) == 0.0 or _integer("top_k", top_k) == 1
        if seed is None:
            # A fresh seed per unseeded run, as transformers and llama.cpp do; reported so it repeats.
            seed_value = 0 if greedy else int.from_bytes(os.urandom(8), "little")
        else:
            seed_value = _integer("seed", seed)
        if not 0 <= seed_value < 2**64:
            raise EdgeshareError("InvalidArgument", f"generate(): seed {seed_value} is outside 0..2^64-1")
        args = (
            prompt_ids,
            count,
            stops,
            _number("temperature", temperature),
            _integer("top_k", top_k),
            _number("top_p", top_p),
            _number("repetition_penalty", repetition_penalty),
            seed_value,
            _integer("cached_tokens", cached_tokens),
        )
        return args, None if greedy else seed_value

    def __repr__(self) -> str:
        return f"Method({self.name!r} of {self._program.path!r})"


class Program:
    """A .pte program loaded with every method (or those asked for), over the data files that hold
    its external weights.

    Loading fetches and packs weights through the process-wide caches: a second program over the
    same foundation data file reuses its packed weights.
    """

    def __init__(self, native: Any, data_files: List[DataFile]) -> None:
        """Internal: use Program.load()."""
        self._native = native
        self._data_files = data_files
        self._methods: Dict[str, Method] = {}
        self._adapter: Optional[DataFile] = None
        self._end_token_ids: Optional[List[int]] = None
        self._tokenizer: Any = None

    @classmethod
    def load(
        cls,
        path: PathLike,
        data_files: Sequence[Union[DataFile, PathLike]] = (),
        methods: Optional[Sequence[str]] = None,
        threads: Optional[int] = None,
    ) -> Program:
        """Maps the .pte at `path` and loads every method of it, or only `methods`.

        Args:
          path: the .pte file.
          data_files: the data files (DataFile objects or paths of .ptd files) holding the weights
            the program takes from outside, e.g. its foundation.
          methods: the methods to load (None: all). A method that is never run still holds its
            operators and working memory once loaded, so a program that only generates can load
            its KV-cache method alone, e.g. methods=["forward_cached"].
          threads: how many threads the program's methods split their work across (the calling
            thread and threads - 1 helpers the program owns); None: set_num_threads()'s count.

        Returns:
          The loaded program.

        Raises:
          EdgeshareError: with the runtime's message naming the file, method or key: AccessFailed
            for a missing file, InvalidProgram for a malformed one, NotFound for a weight none of
            `data_files` holds, InvalidData for a data file whose contents are not the ones the
            program was exported with, AlreadyExists for a key in two data files, InvalidArgument
            for a name in `methods` the program does not have, or for fewer than 1 or more than
            256 threads.
          TypeError: `data_files` or `methods` is one string rather than a sequence of them.
          ValueError: `methods` is empty.
        """
        if isinstance(data_files, (str, bytes, os.PathLike)):
            raise TypeError(f"Program.load({os.fspath(path)!r}): data_files must be a list of files, not one path")
        if isinstance(methods, (str, bytes)):
            raise TypeError(f"Program.load({os.fspath(path)!r}): methods must be a list of names, not one name")
        wanted = [] if methods is None else [str(m) for m in methods]
        if methods is not None and not wanted:
            raise ValueError(f"Program.load({os.fspath(path)!r}): methods is empty; give None to load every method")
        files = [f if isinstance(f, DataFile) else DataFile.open(f) for f in data_files]
        count = _default_threads if threads is None else int(threads)
        native = _native.Program.load(os.fspath(path), [f._native for f in files], wanted, count)
        return cls(native, files)

    @property
    def path(self) -> str:
        return self._native.path

    @property
    def data_files(self) -> List[DataFile]:
        return list(self._data_files)

    @property
    def methods(self) -> List[str]:
        """The loaded methods' names, in the program's order."""
        return list(self._native.method_names)

    def bind_adapter(self, adapter: Union[DataFile, PathLike]) -> None:
        """Swaps the adapter of every method to another adapter data file of the same structure.

        For a program exported with `export_lora --swappable` (lora.pte), loaded over the
        foundation's data file and one adapter's. Nothing of the foundation is fetched or packed
        again, the adapter's weights are read where the file is mapped (not packed), and every
        method's state (a KV cache) is reset. The GIL is released meanwhile; a method runs either
        before or after the swap, never during it. The program keeps `adapter` open while bound.
        An open DataFile hashes each entry once: keep the adapters you switch between open
        (DataFile.open each once) and swapping back costs no SHA-256 (about 0.05 ms per swap).

        Args:
          adapter: the adapter's .ptd (a DataFile or a path).

        Raises:
          EdgeshareError: InvalidArgument for a file of another structure (other keys: another set
            of adapted modules) or the foundation's data file (its weights are pinned), InvalidData
            for other shapes or a corrupt file, AccessFailed for a missing one; the message names
            the file. On error every method keeps its previous adapter.
        """
        file = adapter if isinstance(adapter, DataFile) else DataFile.open(adapter)
        self._native.bind_adapter(file._native)
        self._adapter = file

    @property
    def adapter(self) -> Optional[DataFile]:
        """The adapter bound last by bind_adapter (None before the first swap)."""
        return self._adapter

    @property
    def folder(self) -> str:
        """The folder the program was loaded from: its export folder, where its tokenizer files and
        generation_config.json are (export_lora copies them from the model directory)."""
        return os.path.dirname(os.path.abspath(self.path))

    @property
    def end_token_ids(self) -> List[int]:
        """The model's end tokens: eos_token_id of generation_config.json in the program's folder
        (an id or a list of ids), or [] without that file.

        Raises:
          ValueError: the file is not JSON or its eos_token_id is not ids, naming the file.
        """
        if self._end_token_ids is None:
            from edgeshare.extension.python.text import read_end_token_ids  # noqa: PLC0415 (tokenizers is optional)

            self._end_token_ids = read_end_token_ids(self.folder)
        return list(self._end_token_ids)

    @property
    def tokenizer(self) -> Any:
        """The model's Tokenizer (edgeshare.extension.python.text) from tokenizer.json in the program's
        folder, loaded once; None when the export has no tokenizer (then generate with ids).

        Raises:
          ValueError: a tokenizer file is malformed, naming it.
        """
        if self._tokenizer is None:
            from edgeshare.extension.python.text import Tokenizer  # noqa: PLC0415 (tokenizers is optional)

            self._tokenizer = Tokenizer.from_folder(self.folder) or False
        return self._tokenizer or None

    def method(self, name: str) -> Method:
        """The loaded method called `name` (the same object on every call).

        Raises:
          EdgeshareError: NotFound naming the program and listing its methods.
        """
        if name not in self._methods:
            self._methods[name] = Method(self._native.method(name), self)
        return self._methods[name]

    def __repr__(self) -> str:
        return f"Program({self.path!r}, methods={self.methods})"


def weights_cache_stats() -> Dict[str, Any]:
    """What the process has fetched, packed and shared so far, as //tools:run --stats-json reports.

    Returns:
      "packs", "cache_hits", "bytes_fetched", "packed_entries" (live), "named_data_fetches" (key ->
      fetches by the delegate), "verifications", "bytes_verified", "verification_failures",
      "external_constants" (the executor's counters), "data_files_open", "sharing", "verify".
    """
    return dict(_native.weights_cache_stats())


_MAX_THREADS = 256
_default_threads = 1


def set_num_threads(threads: int) -> None:
    """The thread count of programs loaded after this call without threads= (1 at start).

    A default only: each program owns its threads, made when it is loaded, and keeps them; programs
    loaded earlier are unchanged.

    Raises:
      EdgeshareError: InvalidArgument for fewer than 1 or more than 256 threads.
    """
    global _default_threads
    if not 1 <= threads <= _MAX_THREADS:
        raise EdgeshareError(
            "InvalidArgument", f"set_num_threads({threads}): 1 to {_MAX_THREADS} threads are possible"
        )
    _default_threads = int(threads)


def set_verify_content(enabled: bool) -> None:
    """Turns hashing of fetched weights against their recorded digests on (default) or off, for
    loads from now on. Off trusts the data files as they are."""
    _native.set_verify_content(enabled)


def set_weight_sharing(enabled: bool) -> None:
    """Turns the process-wide sharing of weights on (default) or off, for loads from now on."""
    _native.set_weight_sharing(enabled)


def _integer(name: str, value: Any) -> int:
    """`value` as an int, refusing what int() would quietly truncate or parse (3.7, "5", True)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"generate(): {name} must be an int, not {type(value).__name__} {value!r:.40}") from None


def _number(name: str, value: Any) -> float:
    """`value` as a float, refusing strings and bools."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"generate(): {name} must be a number, not {type(value).__name__} {value!r:.40}")
    return float(value)


def _spec(native: Optional[tuple[Any, Sequence[int], Sequence[int]]]) -> Optional[TensorSpec]:
    if native is None:
        return None
    dtype, shape, dynamic = native
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return TensorSpec(dtype=name, shape=tuple(shape), dynamic_dims=tuple(dynamic))
