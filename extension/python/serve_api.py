"""The OpenAI request bodies edgeshare-serve takes, read into plain data, and its error replies.

serve_app.py hands each parsed JSON body of /v1/completions and /v1/chat/completions to
read_completion / read_chat and gets a GenerationRequest back, or an ApiError that becomes OpenAI's
error JSON with its HTTP status:

    try:
        request = read_chat(body)
    except ApiError as e:
        return JSONResponse(e.body(), status_code=e.status)

Fields OpenAI defines that change what is generated and that the engine cannot do (n > 1, echo,
logprobs, best_of, suffix, penalties, logit_bias, tools) are refused with 400 naming the field, not
ignored: a client relying on one would otherwise get a silently different answer. Fields that only
describe the caller (user, metadata, store...) are ignored, as other servers do. Two extensions
other OpenAI-compatible servers take are read too: llama.cpp's `lora` and vLLM's `top_k`,
`repetition_penalty` and `ignore_eos`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = [
    "ApiError",
    "GenerationRequest",
    "LoraChoice",
    "parse_json_body",
    "read_chat",
    "read_completion",
]

# Most stop strings a request may give (OpenAI's limit is 4; a few more cost nothing here).
MAX_STOP_STRINGS = 16
# Fields that would change the answer and that edgeshare-serve does not implement, with the value that
# means "off" (sent by some clients explicitly).
_UNSUPPORTED = {
    "echo": (False,),
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "best_of": (None, 1),
    "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "functions": (None, []),
    "response_format": (None, {"type": "text"}),
}


class ApiError(Exception):
    """A request the server answers with OpenAI's error JSON and an HTTP status."""

    _TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "invalid_request_error",
              429: "rate_limit_error", 500: "server_error", 503: "server_error"}

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> Dict[str, Any]:
        """{"error": {"message", "type", "param", "code"}} as OpenAI's API writes it."""
        return {"error": {"message": self.message, "type": self._TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


@dataclasses.dataclass(frozen=True)
class LoraChoice:
    """llama.cpp's per-request `lora` field: an adapter by slot id or by name (scale 1)."""

    slot: Optional[int] = None
    name: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """One completion or chat completion request, checked.

    Attributes:
      chat: True for /v1/chat/completions (messages rendered with the chat template).
      model: the `model` field (None when absent: the base model).
      prompt: the completion prompt as text or token ids (None for chat).
      messages: the chat messages, each {"role": str, "content": str} (None for completions).
      max_tokens: new tokens at most (None: until the context is full).
      temperature, top_p, top_k, seed, repetition_penalty: the sampler's settings (temperature 0: greedy).
      stop: stop strings: the text ends before the first one that appears.
      stream: answer with server-sent events.
      include_usage: with stream, a last chunk carries the usage counts (stream_options).
      ignore_eos: keep generating past the model's end tokens (vLLM's extension).
      lora: llama.cpp's per-request adapter choice (None: `model` decides).
    """

    chat: bool
    model: Optional[str]
    prompt: Union[None, str, List[int]]
    messages: Optional[List[Dict[str, str]]]
    max_tokens: Optional[int]
    temperature: float
    top_p: float
    top_k: int
    seed: Optional[int]
    repetition_penalty: float
    stop: Tuple[str, ...]
    stream: bool
    include_usage: bool
    ignore_eos: bool
    lora: Optional[LoraChoice]


def parse_json_body(raw: bytes) -> Dict[str, Any]:
    """The request body as a JSON object, or ApiError 400 saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the request body is not UTF-8 (byte {e.start})") from None
    try:
        body = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        if not isinstance(e, json.JSONDecodeError):
            raise ApiError(400, f"the request body is not JSON: {e}") from None
        raise ApiError(400, f"the request body is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ApiError(400, "the request body is not JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {_json_type(body)}")
    return body


def _no_constant(name: str) -> Any:
    """Python's json reads NaN and Infinity, which JSON does not have."""
    raise ValueError(f"{name} is not a JSON value")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _integer(body: Mapping[str, Any], key: str, default: Optional[int], low: int, high: Optional[int] = None
             ) -> Optional[int]:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"'{key}' must be an integer, not {_json_type(value)}", key)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise ApiError(400, f"'{key}' is {value}: it must be {bound}", key)
    return value


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float, low_open: bool = False
            ) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"'{key}' must be a number, not {_json_type(value)}", key)
    if not (low < value if low_open else low <= value) or value > high:
        raise ApiError(400, f"'{key}' is {value}: it must be in {'(' if low_open else '['}{low}, {high}]", key)
    return float(value)


def _boolean(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be true or false, not {_json_type(value)}", key)
    return value


def _stop(body: Mapping[str, Any]) -> Tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, "'stop' must be a string or an array of strings", "stop")
    if len(stops) > MAX_STOP_STRINGS:
        raise ApiError(400, f"'stop' has {len(stops)} strings: at most {MAX_STOP_STRINGS}", "stop")
    return tuple(s for s in stops if s)


def _lora(body: Mapping[str, Any]) -> Optional[LoraChoice]:
    """llama.cpp's `lora`: [{"id": slot, "scale": s}, ...] (adapters not listed have scale 0), or a name."""
    value = body.get("lora")
    if value is None:
        return None
    if isinstance(value, str):
        return LoraChoice(name=value)
    if not isinstance(value, list):
        raise ApiError(400, "'lora' must be an adapter's name or [{\"id\": slot, \"scale\": 1.0}]", "lora")
    chosen: List[int] = []
    for item in value:
        if not isinstance(item, dict) or isinstance(item.get("id"), bool) or not isinstance(item.get("id"), int):
            raise ApiError(400, "each 'lora' entry must be {\"id\": slot, \"scale\": number}", "lora")
        scale = item.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ApiError(400, "a 'lora' entry's scale must be a number", "lora")
        if scale == 0:
            continue
        if scale != 1:
            raise ApiError(400, f"'lora' scale {scale}: adapters run at the scale they were exported with "
                           "(scale 1, or 0 to leave one out)", "lora")
        chosen.append(item["id"])
    if len(chosen) > 1:
        raise ApiError(400, f"'lora' picks {len(chosen)} adapters: a request runs on one", "lora")
    return LoraChoice(slot=chosen[0]) if chosen else LoraChoice()


def _common(body: Mapping[str, Any], chat: bool) -> Dict[str, Any]:
    for key, off in _UNSUPPORTED.items():
        if key in body and body[key] not in off:
            raise ApiError(400, f"'{key}' is not supported by this server", key)
    n = _integer(body, "n", 1, 1)
    if n != 1:
        raise ApiError(400, f"'n' is {n}: this server makes one choice per request (n = 1)", "n")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"'model' must be a string, not {_json_type(model)}", "model")
    max_key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    top_k = _integer(body, "top_k", 0, -1, 2**31 - 1)
    stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage") is True)
    return dict(
        model=model,
        max_tokens=_integer(body, max_key, None, 1),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=0 if top_k == -1 else top_k,
        seed=_integer(body, "seed", None, -(2**63), 2**63 - 1),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0, low_open=True),
        stop=_stop(body),
        stream=stream,
        include_usage=stream and include_usage,
        ignore_eos=_boolean(body, "ignore_eos"),
        lora=_lora(body),
    )


def _prompt(value: Any) -> Union[str, List[int]]:
    """A completion prompt: a string, token ids, or a one-element array of either."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        bad = next((t for t in value if not 0 <= t < 2**63), None)
        if bad is not None:
            raise ApiError(400, f"'prompt' holds token id {bad}: ids are >= 0", "prompt")
        return list(value)
    if isinstance(value, list) and len(value) > 1 and all(isinstance(p, (str, list)) for p in value):
        raise ApiError(400, f"'prompt' holds {len(value)} prompts: send one per request", "prompt")
    raise ApiError(400, "'prompt' must be a string or an array of token ids", "prompt")


def read_completion(body: Mapping[str, Any]) -> GenerationRequest:
    """A /v1/completions body, checked (ApiError 400 naming the first bad field)."""
    if "prompt" not in body:
        raise ApiError(400, "'prompt' is required", "prompt")
    common = _common(body, chat=False)
    # OpenAI's completions default: 16 new tokens.
    if common["max_tokens"] is None:
        common["max_tokens"] = 16
    return GenerationRequest(chat=False, prompt=_prompt(body["prompt"]), messages=None, **common)


def _content(message: Mapping[str, Any], i: int) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{i}].content: only text parts ({{\"type\": \"text\", \"text\": ...}}) "
                               "are supported", "messages")
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(400, f"messages[{i}].content must be a string or an array of text parts", "messages")


def read_chat(body: Mapping[str, Any]) -> GenerationRequest:
    """A /v1/chat/completions body, checked (ApiError 400 naming the first bad field)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty array of {\"role\", \"content\"}", "messages")
    read: List[Dict[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", "messages")
        read.append({"role": message["role"], "content": _content(message, i)})
    common = _common(body, chat=True)
    return GenerationRequest(chat=True, prompt=None, messages=read, **common)

