"""Many requests at once on many adapters: a batch export run by the C++ batch engine.

A folder that `export_lora --batch-slots N` wrote (batch.pte, batch.json, batch_tables.ptd,
foundation.ptd, one <name>.ptd per adapter) opens as a BatchEngine: a thread of its own steps the
engine while requests are queued or running, each step one pass over the foundation for every
running sequence, each on its own adapter (docs/batching.md). submit() returns a BatchStream that
yields the request's new token ids as they come; iterating releases the GIL, so requests from many
Python threads run together.

    engine = BatchEngine.open("out", threads=2)
    chat = engine.submit(prompt_ids, max_new_tokens=64, adapter="chat")
    code = engine.submit(other_ids, max_new_tokens=64, adapter="code")   # same steps as chat
    for token in chat: ...
    engine.load_adapter(5, "new_adapter.ptd", name="new")   # while others generate
    engine.unload_adapter("code")                            # once its requests end

Errors raise EdgeshareError with the runtime's code and one-line message: InvalidArgument for a
prompt past the bound, a token or stop id outside the vocabulary, an adapter the engine does not
hold; ResourceExhausted when max_queue requests wait already; InvalidState for loading into a slot
in use.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Optional, Sequence, Union

from edgeshare.extension.python import _edgeshare_runtime as _native
from edgeshare.extension.python import runtime as _runtime
from edgeshare.extension.python._errors import EdgeshareError

__all__ = ["BatchEngine", "BatchStream"]

PathLike = Union[str, "os.PathLike[str]"]


class BatchStream:
    """One request of a BatchEngine: iterate it for its new token ids; ends at a stop id, after
    max_new_tokens, at the sequence's bound, or after cancel()."""

    def __init__(self, engine: BatchEngine, request: int) -> None:
        self._engine = engine
        self._id = request

    def __iter__(self) -> Iterator[int]:
        return self

    @property
    def request_id(self) -> int:
        """The engine's id of the request."""
        return self._id

    def __next__(self) -> int:
        token = self._engine._native.next(self._id)
        if token is None:
            raise StopIteration
        return int(token)

    @property
    def finish_reason(self) -> Optional[str]:
        """ "stop" or "length" once the request ended, None while it runs."""
        return self._engine._native.finish_reason(self._id) or None

    def cancel(self) -> None:
        """Ends the request at the next step (its slot is free then); tokens already made remain."""
        try:
            self._engine._native.cancel(self._id)
        except EdgeshareError as e:
            if e.code != "NotFound":  # it ended already
                raise

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None and getattr(engine, "_native", None) is not None:
            engine._native.release(self._id)


class BatchEngine:
    """A batch export running in this process (see the module doc)."""

    def __init__(self, native: Any, folder: str) -> None:
        self._native = native
        self._folder = folder
        self._slots: Dict[str, int] = {name: slot for slot, name in enumerate(native.adapters)}

    @classmethod
    def open(
        cls, folder: PathLike, threads: Optional[int] = None, max_queue: int = 64, prefill_chunk: int = 0
    ) -> BatchEngine:
        """Loads the folder's batch program and starts its engine.

        Args:
          folder: what export_lora --batch-slots wrote.
          threads: threads each step splits its work across (None: set_num_threads()'s count).
          max_queue: requests that may wait for a free sequence slot.
          prefill_chunk: most prompt tokens a request runs in one step (0: the step's bound).
        """
        count = _runtime._default_threads if threads is None else _runtime._integer("threads", threads)
        for name, value in (("max_queue", max_queue), ("prefill_chunk", prefill_chunk)):
            if _runtime._integer(name, value) < 0:
                raise EdgeshareError("InvalidArgument", f"BatchEngine.open(): {name} is {value}, not >= 0")
        path = os.fspath(folder)
        return cls(_native.BatchEngine.open(path, count, int(max_queue), int(prefill_chunk)), path)

    @property
    def adapters(self) -> Dict[str, int]:
        """Adapter name -> its slot, for the adapters the engine holds now."""
        return dict(self._slots)

    @property
    def slots(self) -> int:
        """Sequences that generate at once."""
        return int(self._native.slots)

    @property
    def max_seq_len(self) -> int:
        """Positions per sequence: prompt plus new tokens."""
        return int(self._native.max_seq_len)

    def _slot(self, adapter: Union[None, str, int]) -> int:
        if adapter is None:
            return -1
        if isinstance(adapter, str):
            if adapter not in self._slots:
                held = ", ".join(sorted(self._slots)) or "none"
                raise EdgeshareError("InvalidArgument", f"no adapter '{adapter}' in this engine (it holds: {held})")
            return self._slots[adapter]
        return _runtime._integer("adapter", adapter)

    def submit(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        adapter: Union[None, str, int] = None,
        stop_ids: Sequence[int] = (),
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
    ) -> BatchStream:
        """Queues a request: greedy by default, sampled with temperature > 0.

        Args:
          prompt_ids: int64 token ids, [P] or [1, P].
          max_new_tokens: tokens to generate at most.
          adapter: an adapter's name or slot; None: the bare foundation.
          stop_ids: generation stops after any of these.
          temperature, top_k, top_p, repetition_penalty, seed: as Method.generate's.
        """
        stops = [_runtime._integer("stop_ids", i) for i in stop_ids]
        greedy = _runtime._number("temperature", temperature) == 0.0 or _runtime._integer("top_k", top_k) == 1
        seed_value = (0 if greedy else int.from_bytes(os.urandom(8), "little")) if seed is None else seed
        request = self._native.submit(
            prompt_ids,
            self._slot(adapter),
            _runtime._integer("max_new_tokens", max_new_tokens),
            stops,
            float(temperature),
            _runtime._integer("top_k", top_k),
            _runtime._number("top_p", top_p),
            _runtime._number("repetition_penalty", repetition_penalty),
            _runtime._integer("seed", seed_value),
        )
        return BatchStream(self, request)

    def load_adapter(self, slot: int, path: PathLike, name: Optional[str] = None) -> None:
        """Puts an adapter file (<name>.ptd of a batch export over this foundation) into a slot no
        request uses; `name` (default: the file's stem) then names it in submit()."""
        slot = _runtime._integer("slot", slot)
        self._native.load_adapter(slot, os.fspath(path))
        for old in [n for n, s in self._slots.items() if s == slot]:
            del self._slots[old]
        stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        self._slots[name or stem] = slot

    def unload_adapter(self, adapter: Union[str, int]) -> None:
        """Empties an adapter's slot once its requests end; new requests on it are refused now."""
        slot = self._slot(adapter)
        self._native.unload_adapter(slot)
        for old in [n for n, s in self._slots.items() if s == slot]:
            del self._slots[old]

    def __repr__(self) -> str:
        return f"BatchEngine({self._folder!r}, {self.slots} slots, adapters {sorted(self._slots)})"
