"""A chat that keeps the KV cache across turns: each turn prefills only what it adds.

    session = ChatSession(program.method("forward_cached"), system="You are terse.", max_new_tokens=128)
    turn = session.say("Hi!", on_text=lambda piece: print(piece, end="", flush=True))
    turn.prefilled_tokens, turn.prompt_tokens       # the new tokens of this turn, the whole conversation
    session.reset()                                  # a new conversation (the system message kept)

Each turn renders the whole conversation with the model's chat template (add_generation_prompt), as
`edgeshare-generate --chat` does, and compares its tokens with what the KV cache holds (the earlier
prompts and replies, every reply token but the last); only the rest is prefilled, so the reply's
tokens equal a fresh run over the whole conversation. Where the template renders earlier turns
otherwise than they went into the cache (a reply whose text encodes to other tokens, a template
that rewrites history), the cache is used up to where they differ and the turn says how many
earlier tokens it prefilled again (`reprefilled_tokens`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from edgeshare.extension.python.text import TextDecoder, TokenizerFileError, _StopStrings

__all__ = ["ChatSession", "ChatTurn", "TurnTooLong"]


class TurnTooLong(ValueError):
    """The conversation with this turn does not fit in the method's length (nothing was changed)."""


@dataclasses.dataclass
class ChatTurn:
    """One reply.

    Attributes:
      text: the reply's text (cut before a stop string).
      tokens: its token ids.
      prompt_tokens: the whole rendered conversation's tokens before the reply.
      prefilled_tokens: the tokens this turn executed in its prefill (the rest came from the cache).
      reprefilled_tokens: of those, tokens of earlier turns executed again (the template renders
        them otherwise than they went into the cache, or the cache was reset by /adapter).
      finish_reason: "stop", "length" or "interrupted" (Ctrl-C).
      prefill_ms: the prefill's execute in milliseconds.
      decode_tokens_per_s: new tokens after the first per second.
      seed: the sampler's seed, None for greedy.
    """

    text: str
    tokens: List[int]
    prompt_tokens: int
    prefilled_tokens: int
    reprefilled_tokens: int
    finish_reason: str
    prefill_ms: float
    decode_tokens_per_s: float
    seed: Optional[int]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class ChatSession:
    """A conversation over one stateful method whose KV cache it keeps between turns.

    Args:
      method: a loaded stateful Method whose program's folder has the tokenizer and chat template.
      system: a system message to start with (None: none).
      max_new_tokens: tokens per reply at most.
      stop: stop strings.
      options: Method.generate's sampling options (temperature, top_k, top_p,
        repetition_penalty, seed, eos_id, stop_ids).
    """

    def __init__(self, method: Any, system: Optional[str] = None, max_new_tokens: int = 256,
                 stop: Sequence[str] = (), **options: Any) -> None:
        tokenizer = method.program.tokenizer
        if tokenizer is None:
            raise TokenizerFileError(f"{method.program.path} has no tokenizer.json or tokenizer.model beside it")
        self._method = method
        self._tokenizer = tokenizer
        self._system = system
        self._max_new_tokens = max_new_tokens
        self._stop = list(stop)
        self._options = options
        spec = method.inputs[0] if method.inputs else None
        self.max_length = int(spec.shape[-1]) if spec is not None else 0
        self.messages: List[Dict[str, str]] = []
        self._in_cache: List[int] = []  # the tokens this session put in the KV cache, in order
        self.reset()

    def reset(self) -> None:
        """Starts a new conversation (keeping the system message); the next turn prefills it whole."""
        self.messages = [{"role": "system", "content": self._system}] if self._system is not None else []
        self._in_cache = []

    def forget_cache(self) -> None:
        """Says the KV cache no longer holds the conversation (e.g. after Program.bind_adapter); the
        conversation is kept and the next turn prefills it whole."""
        self._in_cache = []

    def say(self, text: str, on_text: Optional[Callable[[str], None]] = None) -> ChatTurn:
        """Adds a user turn and generates the reply, streaming its text to on_text.

        A KeyboardInterrupt while the reply is generated ends the reply there (finish_reason
        "interrupted"); what was generated stays in the conversation.

        Raises:
          TurnTooLong: the conversation with this turn is past the method's length (no change).
          TokenizerFileError: the chat template fails on the conversation (no change).
          EdgeshareError: as Method.stream (the conversation unchanged).
        """
        messages = self.messages + [{"role": "user", "content": text}]
        ids = [int(i) for i in self._tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                    tokenize=True)]
        if self.max_length and len(ids) >= self.max_length:
            raise TurnTooLong(
                f"this turn brings the conversation to {len(ids)} tokens, and the method was exported for "
                f"{self.max_length} (--max-seq-len) with room for the reply: /reset starts over")
        matched = _common_prefix(self._in_cache, ids)
        cached = min(matched, self._method.cached_tokens, len(ids) - 1)
        reprefilled = max(0, len(self._in_cache) - cached)
        # From here on the cache holds at least this much of ours, whatever happens to the prefill.
        self._in_cache = self._in_cache[:cached]
        stream = self._method.stream(np.asarray(ids, dtype=np.int64), self._max_new_tokens, cached_tokens=cached,
                                     **self._options)
        self.messages = messages
        decoder = TextDecoder(self._tokenizer)
        stops = _StopStrings(self._stop)
        tokens: List[int] = []
        pieces: List[str] = []
        finish = ""
        try:
            for token in stream:
                tokens.append(token)
                piece = stops.push(decoder.add(token))
                if piece:
                    pieces.append(piece)
                    if on_text is not None:
                        on_text(piece)
                if stops.stopped:
                    finish = "stop"
                    break
            if not stops.stopped:
                piece = stops.push(decoder.finish())
                piece += "" if stops.stopped else stops.finish()
                if piece:
                    pieces.append(piece)
                    if on_text is not None:
                        on_text(piece)
        except KeyboardInterrupt:
            finish = "interrupted"
        prefill_ms, per_s, native_finish, prefilled = self._method._native.stream_timings()
        finish = finish or str(native_finish) or "stop"
        # The cache holds the prompt and every reply token but the last one returned (never fed).
        self._in_cache = ids + tokens[:-1]
        reply = "".join(pieces)
        self.messages = self.messages + [{"role": "assistant", "content": reply}]
        return ChatTurn(reply, tokens, len(ids), int(prefilled), reprefilled, finish, float(prefill_ms), float(per_s),
                        stream.seed)

    def __repr__(self) -> str:
        return f"ChatSession({self._method!r}, {len(self.messages)} messages)"
