"""edgeshare-serve's HTTP application: OpenAI's completion and chat APIs over one BatchEngine.

    model = ServedModel.open("out", threads=2, max_queue=64)   # a batch export with its tokenizer
    app = make_app(model)                                     # an ASGI app; serve_cli.py runs it in uvicorn

ServedModel owns the engine (whose own thread steps every running request together), the
tokenizer and chat template of the export folder, and the counters /metrics reports. Requests are
handled on the event loop; everything that blocks runs in thread pools: tokenizing and adapter
loads in one, and each running request's wait for its next token (BatchStream's next releases the
GIL) in another sized for every slot, so the loop never waits on the engine. At most `slots`
requests generate at once; up to `max_queue` more wait on the loop (llama.cpp's "deferred"), and
past that a request is refused with 429. A response is an ASGI callable that also listens for the
client going away: a request whose client disconnects is cancelled in the engine, and its slot is
free at the next step.

The model a request names picks the adapter (vLLM's convention: the base model's name runs the bare
foundation); llama.cpp's `lora` field picks one by slot id instead. /v1/load_lora_adapter and
/v1/unload_lora_adapter take vLLM's bodies and change the engine's adapters while others generate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import threading
import time
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Set

import numpy as np
from edgeshare.extension.python._errors import EdgeshareError
from edgeshare.extension.python.batch import BatchEngine, BatchStream
from edgeshare.extension.python.serve_api import (
    ApiError,
    GenerationRequest,
    parse_json_body,
    read_chat,
    read_completion,
)
from edgeshare.extension.python.text import TextDecoder, Tokenizer, TokenizerFileError, _StopStrings
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

__all__ = ["ServedModel", "make_app"]

# The largest request body read (413 past it): a prompt of a whole context is far below this.
DEFAULT_MAX_BODY_BYTES = 4 << 20

# The engine's error codes -> the HTTP status of a request it refused.
_ENGINE_STATUS = {"InvalidArgument": 400, "ResourceExhausted": 429, "NotFound": 404, "InvalidState": 400}


class _Metrics:
    """What /metrics reports; touched only on the event loop."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.prompt_seconds = 0.0
        self.predicted_tokens = 0
        self.predicted_seconds = 0.0
        self.processing = 0
        self.deferred = 0
        self.rejected = 0
        self.cancelled = 0
        self.requests = 0

    def text(self, adapters: int) -> str:
        prompt_rate = self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0
        predicted_rate = self.predicted_tokens / self.predicted_seconds if self.predicted_seconds > 0 else 0.0
        rows = [
            ("llamacpp:prompt_tokens_total", "counter", "Prompt tokens processed.", self.prompt_tokens),
            ("llamacpp:prompt_seconds_total", "counter", "Seconds from a request's submission to its first token, "
             "summed over requests.", self.prompt_seconds),
            ("llamacpp:tokens_predicted_total", "counter", "Tokens generated.", self.predicted_tokens),
            ("llamacpp:tokens_predicted_seconds_total", "counter", "Seconds from a request's first token to its "
             "last, summed over requests.", self.predicted_seconds),
            ("llamacpp:prompt_tokens_seconds", "gauge", "Prompt tokens per second of prompt time.", prompt_rate),
            ("llamacpp:predicted_tokens_seconds", "gauge", "Generated tokens per second of generation time, per "
             "request.", predicted_rate),
            ("llamacpp:requests_processing", "gauge", "Requests generating now.", self.processing),
            ("llamacpp:requests_deferred", "gauge", "Requests waiting for a free slot.", self.deferred),
            ("edgeshare:requests_total", "counter", "Generation requests admitted.", self.requests),
            ("edgeshare:requests_rejected_total", "counter", "Requests refused because the queue was full (429).",
             self.rejected),
            ("edgeshare:requests_cancelled_total", "counter", "Requests cancelled because their client went away.",
             self.cancelled),
            ("edgeshare:adapters_resident", "gauge", "Adapters the engine holds.", adapters),
        ]
        lines: List[str] = []
        for name, kind, help_text, value in rows:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"


class _Run:
    """One admitted request in the engine: its token stream turned into text pieces."""

    def __init__(self, model: ServedModel, stream: BatchStream, request: GenerationRequest, prompt_tokens: int,
                 submitted: float) -> None:
        self._model = model
        self._stream = stream
        self._tokens = model.tokens_of(stream)
        self._request = request
        self._submitted = submitted
        self._first: Optional[float] = None
        self._closed = False
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.finish_reason = "length"
        self.client_gone = False

    async def pieces(self) -> AsyncIterator[str]:
        """The new text as it is decoded, cut before a stop string; close() runs at its end."""
        decoder = TextDecoder(self._model.tokenizer)
        stops = _StopStrings(self._request.stop)
        try:
            while True:
                token = await self._tokens.get()
                if token is None:
                    break
                if isinstance(token, BaseException):
                    raise token
                if self._first is None:
                    self._first = time.monotonic()
                self.completion_tokens += 1
                piece = stops.push(decoder.add(token))
                if piece:
                    yield piece
                if stops.stopped:
                    break
            if not stops.stopped:
                piece = stops.push(decoder.finish())
                piece += "" if stops.stopped else stops.finish()
                if piece:
                    yield piece
            self.finish_reason = "stop" if stops.stopped or self._stream.finish_reason == "stop" else "length"
        finally:
            self.close()

    def close(self) -> None:
        """Ends the request (cancelling it in the engine if it still runs) and frees its place."""
        if self._closed:
            return
        self._closed = True
        self._model.forget(self._stream)
        if self._stream.finish_reason is None:
            # Cancel waits for the engine's lock: in a pool thread, not on the event loop (at
            # shutdown, once the pools are closed, here).
            try:
                self._model.stream_pool.submit(self._stream.cancel)
            except RuntimeError:
                self._stream.cancel()
            if self.client_gone:
                self._model.metrics.cancelled += 1
        now = time.monotonic()
        metrics = self._model.metrics
        metrics.prompt_tokens += self.prompt_tokens
        metrics.prompt_seconds += (self._first or now) - self._submitted
        metrics.predicted_tokens += self.completion_tokens
        metrics.predicted_seconds += now - self._first if self._first is not None else 0.0
        self._model.release(self)


class ServedModel:
    """A batch export served over HTTP: the engine, the tokenizer, the adapters by name, the counters."""

    def __init__(self, engine: BatchEngine, tokenizer: Tokenizer, name: str, folder: str, adapter_slots: int,
                 slots: int, max_queue: int) -> None:
        """Internal: use ServedModel.open()."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.name = name
        self.folder = folder
        self.adapter_slots = adapter_slots
        self.slots = slots
        self.max_queue = max_queue
        self.created = int(time.time())
        self.metrics = _Metrics()
        # Name -> slot of the resident adapters: replaced whole (under _adapter_lock) when one is
        # loaded or unloaded, so a request reads one consistent snapshot.
        self.adapters: Dict[str, int] = dict(engine.adapters)
        self.adapter_paths: Dict[str, str] = {n: os.path.join(folder, n + ".ptd") for n in self.adapters}
        # Every slot's waiting thread, plus as many for requests cancelled whose thread still waits
        # for the engine's next step, plus a few for the cancels themselves.
        self.stream_pool = concurrent.futures.ThreadPoolExecutor(2 * slots + 4, thread_name_prefix="edgeshare-stream")
        self.work_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="edgeshare-work")
        self._slot_free: Optional[asyncio.Semaphore] = None
        self._adapter_lock: Optional[asyncio.Lock] = None
        self._runs: Set[_Run] = set()
        # One thread takes every request's new tokens from the engine and hands them to the event
        # loop once per batch of them (an engine step), not once per token: a hand-off per token
        # (an executor round trip each) cost the event loop more CPU than the tokens' text.
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._pump: Optional[threading.Thread] = None
        self._pumping = True
        # Request id -> its tokens (then None at its end, or the error that ended it). Touched only
        # on the event loop; tokens of an id not registered yet wait in _early.
        self._queues: Dict[int, asyncio.Queue] = {}
        self._early: Dict[int, List[Any]] = {}
        self._forgotten: Set[int] = set()

    @classmethod
    def open(cls, folder: str, threads: Optional[int] = None, slots: Optional[int] = None, max_queue: int = 64,
             name: Optional[str] = None) -> ServedModel:
        """Opens the batch export in `folder` with its tokenizer.

        Args:
          folder: what export_lora --batch-slots wrote, with the model's tokenizer files beside it.
          threads: threads each engine step uses (None: the runtime's default).
          slots: requests that generate at once (None: the export's slots; at most that).
          max_queue: requests that may wait for a slot before the server answers 429.
          name: the base model's name in the API (None: the folder's name).

        Raises:
          EdgeshareError: not a batch export, or a file the engine refuses.
          TokenizerFileError: no tokenizer beside the program, or a malformed one.
          ValueError: slots or max_queue out of range.
        """
        manifest = os.path.join(folder, "batch.json")
        if not os.path.isfile(manifest):
            raise EdgeshareError("NotFound", f"{folder} has no batch.json: serve a folder that export_lora "
                                 "--batch-slots wrote")
        tokenizer = Tokenizer.from_folder(folder)
        if tokenizer is None:
            raise TokenizerFileError(f"{folder} has no tokenizer.json or tokenizer.model: export with --hf-model "
                                     "from a model directory that has its tokenizer")
        if max_queue < 0:
            raise ValueError(f"--max-queue is {max_queue}: it must be >= 0")
        # The server queues requests itself; the engine's queue only takes the ones submitted
        # while a cancelled request still holds its slot until the next step.
        engine = BatchEngine.open(folder, threads=threads, max_queue=2 * 1024)
        if slots is None:
            slots = engine.slots
        if not 1 <= slots <= engine.slots:
            raise ValueError(f"--slots is {slots}: this export runs 1..{engine.slots} sequences at once "
                             "(export_lora --batch-slots sets the most)")
        with open(manifest, encoding="utf-8") as f:
            adapter_slots = int(json.load(f).get("adapter_slots", len(engine.adapters)))
        base = name or os.path.basename(os.path.normpath(os.path.abspath(folder)))
        return cls(engine, tokenizer, base, folder, adapter_slots, slots, max_queue)

    # --- requests -----------------------------------------------------------------------------

    def _adapter(self, request: GenerationRequest) -> Optional[str]:
        """The adapter a request runs on (None: the bare foundation), from `model` and `lora`."""
        adapters = self.adapters
        chosen: Optional[str] = None
        if request.model is not None and request.model != self.name:
            if request.model not in adapters:
                known = ", ".join([self.name] + sorted(adapters))
                raise ApiError(404, f"the model '{request.model}' does not exist: this server has {known}", "model",
                               "model_not_found")
            chosen = request.model
        lora = request.lora
        if lora is None or (lora.name is None and lora.slot is None):
            return chosen
        if lora.name is not None:
            if lora.name not in adapters:
                raise ApiError(404, f"no adapter '{lora.name}' (resident: {', '.join(sorted(adapters)) or 'none'})",
                               "lora", "model_not_found")
            picked = lora.name
        else:
            by_slot = {slot: n for n, slot in adapters.items()}
            if lora.slot not in by_slot:
                held = ", ".join(f"{s} ({n})" for s, n in sorted(by_slot.items())) or "none"
                raise ApiError(400, f"'lora' id {lora.slot} holds no adapter (ids in use: {held})", "lora")
            picked = by_slot[lora.slot]
        if chosen is not None and chosen != picked:
            raise ApiError(400, f"'model' names adapter '{chosen}' but 'lora' picks '{picked}'", "lora")
        return picked

    def _prompt_ids(self, request: GenerationRequest) -> List[int]:
        try:
            if request.chat:
                ids = self.tokenizer.apply_chat_template(request.messages or [], tokenize=True)
            elif isinstance(request.prompt, str):
                ids = self.tokenizer.encode(request.prompt)
            else:
                ids = list(request.prompt or [])
        except TokenizerFileError as e:
            raise ApiError(400, str(e).splitlines()[0], "messages") from None
        return list(ids)  # the engine checks each id against the model's vocabulary

    async def _admit(self) -> None:
        """Waits for a free slot, or raises 429 when max_queue requests wait already."""
        if self._slot_free is None:
            self._slot_free = asyncio.Semaphore(self.slots)
        if self._slot_free.locked() and self.metrics.deferred >= self.max_queue:
            self.metrics.rejected += 1
            raise ApiError(429, f"the server is busy: {self.slots} requests generating and {self.max_queue} waiting "
                           "(edgeshare-serve --slots, --max-queue); retry later")
        self.metrics.deferred += 1
        try:
            await self._slot_free.acquire()
        finally:
            self.metrics.deferred -= 1
        self.metrics.processing += 1

    def release(self, run: _Run) -> None:
        """Frees the place of an ended request (_Run.close calls it)."""
        self._runs.discard(run)
        self.metrics.processing -= 1
        if self._slot_free is not None:
            self._slot_free.release()

    async def start(self, request: GenerationRequest) -> _Run:
        """Checks a request, tokenizes it, waits for a slot and submits it to the engine."""
        adapter = self._adapter(request)
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(self.work_pool, self._prompt_ids, request)
        bound = self.engine.max_seq_len
        if not ids:
            raise ApiError(400, "the prompt is empty", "messages" if request.chat else "prompt")
        if len(ids) >= bound:
            raise ApiError(400, f"the prompt is {len(ids)} tokens: this model's context is {bound} tokens, prompt and "
                           f"new tokens together (at most {bound - 1} prompt tokens)",
                           "messages" if request.chat else "prompt", "context_length_exceeded")
        room = bound - len(ids)
        new_tokens = min(request.max_tokens or room, room)
        stop_ids = [] if request.ignore_eos else list(self.tokenizer.end_token_ids)
        await self._admit()
        try:
            stream = await loop.run_in_executor(
                self.stream_pool, lambda: self.engine.submit(
                    np.asarray(ids, dtype=np.int64), max_new_tokens=new_tokens, adapter=adapter, stop_ids=stop_ids,
                    temperature=request.temperature, top_k=request.top_k, top_p=request.top_p,
                    repetition_penalty=request.repetition_penalty, seed=request.seed))
        except EdgeshareError as e:
            self.metrics.processing -= 1
            self._slot_free.release()  # type: ignore[union-attr]
            raise ApiError(_ENGINE_STATUS.get(e.code, 500), str(e).splitlines()[0]) from None
        except BaseException:
            self.metrics.processing -= 1
            self._slot_free.release()  # type: ignore[union-attr]
            raise
        self.metrics.requests += 1
        run = _Run(self, stream, request, len(ids), time.monotonic())
        self._runs.add(run)
        return run

    def tokens_of(self, stream: BatchStream) -> asyncio.Queue:
        """The queue the pump fills with a just-submitted request's tokens (on the event loop)."""
        if self._pump is None:
            self._loop = asyncio.get_running_loop()
            self._pump = threading.Thread(target=self._pump_tokens, name="edgeshare-pump", daemon=True)
            self._pump.start()
        queue: asyncio.Queue = asyncio.Queue()
        for item in self._early.pop(stream.request_id, []):
            queue.put_nowait(item)
        self._queues[stream.request_id] = queue
        return queue

    def forget(self, stream: BatchStream) -> None:
        """Stops delivering a closed request's tokens (on the event loop)."""
        if self._queues.pop(stream.request_id, None) is not None:
            self._forgotten.add(stream.request_id)

    def _pump_tokens(self) -> None:
        native = self.engine._native
        while self._pumping:
            ids = native.wait_changed(100)
            batch = []
            for request_id in ids:
                try:
                    tokens, ended = native.take(request_id)
                except EdgeshareError as e:
                    # NotFound: released already (None: nothing will come for it).
                    batch.append((request_id, None if e.code == "NotFound" else [e]))
                    continue
                batch.append((request_id, tokens + [None] if ended else tokens))
            if batch and self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(self._deliver, batch)
                except RuntimeError:  # the loop closed: the server is going down
                    return

    def _deliver(self, batch: List[Any]) -> None:
        for request_id, items in batch:
            if items is None:
                self._forgotten.discard(request_id)
                self._early.pop(request_id, None)
                continue
            queue = self._queues.get(request_id)
            if queue is not None:
                for item in items:
                    queue.put_nowait(item)
            elif request_id in self._forgotten:
                if items and (items[-1] is None or isinstance(items[-1], BaseException)):
                    self._forgotten.discard(request_id)
            else:
                self._early.setdefault(request_id, []).extend(items)

    def cancel_all(self) -> None:
        """Cancels every running request (at shutdown)."""
        for run in list(self._runs):
            run.close()

    # --- adapters -----------------------------------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        if self._adapter_lock is None:
            self._adapter_lock = asyncio.Lock()
        return self._adapter_lock

    async def load_adapter(self, name: str, path: str) -> int:
        """Loads an adapter file into a free adapter slot under `name`; returns the slot."""
        if name == self.name or name in self.adapters:
            raise ApiError(400, f"the adapter '{name}' is loaded already", "lora_name")
        if not os.path.isfile(path):
            raise ApiError(400, f"no adapter file {path}", "lora_path")
        loop = asyncio.get_running_loop()
        async with self._lock():
            used = set(self.adapters.values())
            free = [s for s in range(self.adapter_slots) if s not in used]
            if not free:
                raise ApiError(400, f"all {self.adapter_slots} adapter slots hold adapters: unload one first",
                               "lora_name")
            error: Optional[EdgeshareError] = None
            for slot in free:  # a slot still unloading (requests on it running) refuses a load
                try:
                    await loop.run_in_executor(self.work_pool, self.engine.load_adapter, slot, path, name)
                except EdgeshareError as e:
                    error = e
                    if e.code == "InvalidState":
                        continue
                    break
                self.adapters = dict(self.engine.adapters)
                self.adapter_paths[name] = path
                return slot
            assert error is not None
            raise ApiError(400, f"cannot load {path}: {str(error).splitlines()[0]}", "lora_path")

    async def unload_adapter(self, name: str) -> None:
        """Unloads an adapter: refused for new requests now, its slot empty once its requests end."""
        async with self._lock():
            if name not in self.adapters:
                raise ApiError(404, f"no adapter '{name}' is loaded", "lora_name", "model_not_found")
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self.work_pool, self.engine.unload_adapter, name)
            except EdgeshareError as e:
                raise ApiError(400, str(e).splitlines()[0], "lora_name") from None
            self.adapters = dict(self.engine.adapters)
            self.adapter_paths.pop(name, None)

    def close(self) -> None:
        self.cancel_all()
        self._pumping = False
        if self._pump is not None:
            # Before the interpreter goes: a thread still in the engine then could not return to it.
            self._pump.join()
        self.stream_pool.shutdown(wait=False, cancel_futures=True)
        self.work_pool.shutdown(wait=False, cancel_futures=True)


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _usage(run: _Run) -> Dict[str, int]:
    return {"prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens,
            "total_tokens": run.prompt_tokens + run.completion_tokens}


def _engine_failure(e: EdgeshareError) -> ApiError:
    return ApiError(500, f"generation failed: {str(e).splitlines()[0]}", code=e.code)


def _sse(data: Dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"


class _GenerationResponse(Response):
    """The ASGI response of an admitted request: server-sent events or one JSON body. While it runs
    it listens for the client's disconnect and then cancels the request in the engine."""

    def __init__(self, run: _Run, request: GenerationRequest, model_name: str) -> None:
        super().__init__(status_code=200)
        self._run = run
        self._request = request
        self._model_name = model_name
        self._id = _id("chatcmpl" if request.chat else "cmpl")
        self._created = int(time.time())
        self._finished = False

    def _chunk(self, text: Optional[str], finish: Optional[str], role: bool = False) -> Dict[str, Any]:
        if self._request.chat:
            delta: Dict[str, str] = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: Dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        return {"id": self._id, "object": kind, "created": self._created, "model": self._model_name,
                "choices": [choice]}

    async def _events(self, send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]})

        async def body(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        if self._request.chat:
            await body(_sse(self._chunk("", None, role=True)))
        try:
            async for piece in self._run.pieces():
                await body(_sse(self._chunk(piece, None)))
        except EdgeshareError as e:  # a failed engine step ended the request: say so in the stream
            await body(_sse(_engine_failure(e).body()))
            self._finished = True
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
            return
        await body(_sse(self._chunk(None if self._request.chat else "", self._run.finish_reason)))
        if self._request.include_usage:
            usage = self._chunk(None, None)
            usage["choices"] = []
            usage["usage"] = _usage(self._run)
            await body(_sse(usage))
        self._finished = True
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _whole(self, send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        try:
            text = "".join([piece async for piece in self._run.pieces()])
        except EdgeshareError as e:
            error = _engine_failure(e)
            data = json.dumps(error.body()).encode("utf-8")
            await send({"type": "http.response.start", "status": error.status, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
            self._finished = True
            await send({"type": "http.response.body", "body": data, "more_body": False})
            return
        if self._request.chat:
            choice: Dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": self._run.finish_reason}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self._run.finish_reason}
            kind = "text_completion"
        data = json.dumps({"id": self._id, "object": kind, "created": self._created, "model": self._model_name,
                           "choices": [choice], "usage": _usage(self._run)}, ensure_ascii=False).encode("utf-8")
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        self._finished = True
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def __call__(self, scope: Any, receive: Callable[[], Awaitable[Dict[str, Any]]],
                       send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        task = asyncio.current_task()
        run = self._run

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if self._finished:  # uvicorn says so once the response is complete
                        return
                    run.client_gone = True
                    if task is not None:
                        task.cancel()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await (self._events(send) if self._request.stream else self._whole(send))
        except asyncio.CancelledError:
            if not run.client_gone:
                raise
            if task is not None:
                task.uncancel()
        except OSError:  # the client went away while we wrote to it
            run.client_gone = True
        finally:
            watcher.cancel()
            run.close()


class _BodyLimit:
    """ASGI middleware: reads each request's body whole before the app sees it, and answers 413 to
    one past `limit` bytes (from its Content-Length, unread; a chunked one once it passes)."""

    def __init__(self, app: Any, limit: int) -> None:
        self._app = app
        self._limit = limit

    async def _refuse(self, send: Callable[[Dict[str, Any]], Awaitable[None]]) -> None:
        data = json.dumps(ApiError(413, f"the request body is larger than {self._limit} bytes (edgeshare-serve "
                                        "--max-body-bytes)").body()).encode()
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        for key, value in scope.get("headers", []):
            if key == b"content-length" and value.isdigit() and int(value) > self._limit:
                await self._refuse(send)
                return
        # Read the body here (a chunked one has no length to check first), then hand it on whole.
        chunks: List[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body ended
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self._limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self._app(scope, replay, send)


def make_app(model: ServedModel, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Any:
    """The ASGI application serving `model` (FastAPI, wrapped in the body size limit)."""
    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        model.close()

    app = FastAPI(title="edgeshare-serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, e: HTTPException) -> JSONResponse:
        error = ApiError(e.status_code, str(e.detail))
        return JSONResponse(error.body(), status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        return JSONResponse(ApiError(400, "the request is malformed").body(), status_code=400)

    async def body_of(request: Request) -> Dict[str, Any]:
        return parse_json_body(await request.body())

    @app.get("/health")
    async def health() -> Dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(model.metrics.text(len(model.adapters)), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> Dict[str, Any]:
        def entry(name: str, parent: Optional[str]) -> Dict[str, Any]:
            return {"id": name, "object": "model", "created": model.created, "owned_by": "edgeshare",
                    "root": name if parent is None else model.adapter_paths.get(name, name), "parent": parent,
                    "max_model_len": model.engine.max_seq_len}

        names = sorted(model.adapters)
        return {"object": "list", "data": [entry(model.name, None)] + [entry(n, model.name) for n in names]}

    @app.get("/lora-adapters")
    async def lora_adapters() -> List[Dict[str, Any]]:
        return [{"id": slot, "name": name, "path": model.adapter_paths.get(name, ""), "scale": 1.0}
                for name, slot in sorted(model.adapters.items(), key=lambda item: item[1])]

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        parsed = read_completion(await body_of(request))
        return _GenerationResponse(await model.start(parsed), parsed, parsed.model or model.name)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        parsed = read_chat(await body_of(request))
        return _GenerationResponse(await model.start(parsed), parsed, parsed.model or model.name)

    def string_field(body: Dict[str, Any], key: str) -> str:
        value = body.get(key)
        if not isinstance(value, str) or not value:
            raise ApiError(400, f"'{key}' must be a non-empty string", key)
        return value

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> PlainTextResponse:
        body = await body_of(request)
        name, path = string_field(body, "lora_name"), string_field(body, "lora_path")
        await model.load_adapter(name, path)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request) -> PlainTextResponse:
        name = string_field(await body_of(request), "lora_name")
        await model.unload_adapter(name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    return _BodyLimit(app, max_body_bytes)
