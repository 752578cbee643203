"""bench/serve's load client: a bounded number of streamed OpenAI completions sent over loopback at
a fixed concurrency, each request timed from its send to every streamed chunk.

A run is a list of LoadRequest (the body's fields that differ: `model`, llama.cpp's `lora`, the
prompt's token ids) sent by `concurrency` asyncio workers that each take the next request when
their last one ends, so at most `concurrency` are in flight and every request is sent exactly once.
summarise() turns the outcomes into the figures the bench reports: output tokens/s over the run's
wall time, time to first token and inter-token latency (the gaps between a request's successive
text chunks, pooled over every request) at p50 and p99, and the failures.
"""

import asyncio
import dataclasses
import json
import math
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence

import httpx2

__all__ = ["LoadRequest", "Outcome", "RunResult", "percentile", "run_load", "summarise"]


@dataclasses.dataclass(frozen=True)
class LoadRequest:
    """One streamed /v1/completions request.

    Attributes:
      model: the body's `model` (edgeshare: the adapter's name, vLLM's convention).
      prompt: token ids (both servers take a list of ids as the prompt).
      max_tokens: tokens to generate (with ignore_eos, every request makes this many).
      lora: llama.cpp's per-request adapters, [{"id": i, "scale": 1.0}], or None.
    """

    model: str
    prompt: Sequence[int]
    max_tokens: int
    lora: Optional[Sequence[Dict[str, Any]]] = None

    def body(self) -> Dict[str, Any]:
        """The JSON body: greedy, streamed, past the end tokens, with the usage counts at the end."""
        body: Dict[str, Any] = {
            "model": self.model,
            "prompt": list(self.prompt),
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
        if self.lora is not None:
            body["lora"] = [dict(entry) for entry in self.lora]
        return body


@dataclasses.dataclass
class Outcome:
    """What one request did (times in seconds of time.perf_counter()).

    Attributes:
      sent: when the request was sent.
      chunks: when each chunk carrying text arrived.
      tokens: completion tokens (the server's usage count, else one per text chunk).
      error: why it failed ("" when it succeeded: status 200, a stream ending in [DONE]).
      text: the streamed text, joined.
    """

    sent: float
    chunks: List[float] = dataclasses.field(default_factory=list)
    tokens: int = 0
    error: str = ""
    text: str = ""


@dataclasses.dataclass
class RunResult:
    """One run: every request's outcome and the run's wall time (first send to last end)."""

    outcomes: List[Outcome]
    wall_s: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between ranks (numpy's default);
    NaN for no values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _chunk_text(event: Dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    first = choices[0]
    return str(first.get("text") or (first.get("delta") or {}).get("content") or "")


async def _send(client: httpx2.AsyncClient, url: str, request: LoadRequest) -> Outcome:
    outcome = Outcome(sent=time.perf_counter())
    counted = 0
    usage: Optional[int] = None
    done = False
    try:
        async with client.stream("POST", url, json=request.body()) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace").strip().replace("\n", " ")
                outcome.error = f"status {response.status_code}: {text[:200]}"
                return outcome
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    outcome.error = f"error event: {json.dumps(event['error'])[:200]}"
                    return outcome
                text = _chunk_text(event)
                if text:
                    outcome.chunks.append(time.perf_counter())
                    outcome.text += text
                    counted += 1
                if event.get("usage"):
                    usage = int(event["usage"].get("completion_tokens", 0))
    except (httpx2.HTTPError, ValueError, OSError) as e:
        outcome.error = f"{type(e).__name__}: {e}"
        return outcome
    if not done:
        outcome.error = "the stream ended without [DONE]"
    outcome.tokens = usage if usage is not None else counted
    return outcome


async def _run(
    base_url: str,
    requests: Sequence[LoadRequest],
    concurrency: int,
    timeout_s: float,
    during: Optional[Callable[[int], Optional[Awaitable[None]]]],
) -> RunResult:
    limits = httpx2.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    url = base_url.rstrip("/") + "/completions"
    outcomes: List[Optional[Outcome]] = [None] * len(requests)
    side: List["asyncio.Task[None]"] = []
    next_index = 0
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s), limits=limits, trust_env=False) as client:

        async def worker() -> None:
            nonlocal next_index
            while next_index < len(requests):
                index = next_index
                next_index += 1
                if during is not None:
                    extra = during(index)
                    if extra is not None:
                        side.append(asyncio.ensure_future(extra))
                outcomes[index] = await _send(client, url, requests[index])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(requests)))))
        wall = time.perf_counter() - start
        if side:
            await asyncio.gather(*side)
    return RunResult([o for o in outcomes if o is not None], wall)


def run_load(
    base_url: str,
    requests: Sequence[LoadRequest],
    concurrency: int,
    timeout_s: float = 300.0,
    during: Optional[Callable[[int], Optional[Awaitable[None]]]] = None,
) -> RunResult:
    """Sends every request once, `concurrency` at a time, to base_url (".../v1").

    Args:
      base_url: the server's OpenAI base URL.
      requests: sent in order.
      concurrency: requests in flight at once (>= 1).
      timeout_s: the longest wait for any one read, connect or write.
      during: called with each request's index just before it is sent; a coroutine it returns runs
        beside the load (the mid-run adapter load) and is awaited before the run returns.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency is {concurrency}: it must be >= 1")
    if not requests:
        raise ValueError("no requests to send")
    return asyncio.run(_run(base_url, requests, concurrency, timeout_s, during))


def summarise(result: RunResult) -> Dict[str, float]:
    """The run's figures: requests, failures, output_tokens, tokens_per_s (successful requests'
    tokens over the wall time), ttft_ms_p50/p99 and itl_ms_p50/p99 (successful requests only)."""
    good = [o for o in result.outcomes if not o.error]
    ttft = [(o.chunks[0] - o.sent) * 1e3 for o in good if o.chunks]
    gaps = [(b - a) * 1e3 for o in good for a, b in zip(o.chunks, o.chunks[1:])]
    tokens = sum(o.tokens for o in good)
    return {
        "requests": float(len(result.outcomes)),
        "failures": float(len(result.outcomes) - len(good)),
        "output_tokens": float(tokens),
        "wall_s": result.wall_s,
        "tokens_per_s": tokens / result.wall_s if result.wall_s > 0 else float("nan"),
        "ttft_ms_p50": percentile(ttft, 50),
        "ttft_ms_p99": percentile(ttft, 99),
        "itl_ms_p50": percentile(gaps, 50),
        "itl_ms_p99": percentile(gaps, 99),
    }
