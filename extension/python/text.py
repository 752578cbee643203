"""Text in, text out: the model's tokenizer, its chat template and end tokens, from the export folder.

export_lora copies the model directory's tokenizer.json, tokenizer_config.json, its chat template
(chat_template.jinja and additional_chat_templates/, or in tokenizer_config.json, or a processor's
chat_template.json: read_chat_templates) and generation_config.json (its end tokens) beside the
programs; a loaded Program finds them in its folder. Tokenizing is Hugging Face `tokenizers` (no torch); chat templates are rendered
with jinja2 as transformers' apply_chat_template does; the tokens come from the runtime's C++
generator and sampler.

    program = Program.load("out/a.pte", ["out/foundation.ptd"])
    method = program.method("forward_cached")
    print(method.generate_text("Once upon a time", max_new_tokens=32).text)     # greedy
    for piece in method.stream_text("Once upon a time", 32, temperature=0.8, seed=1):
        print(piece, end="", flush=True)                  # never splits a UTF-8 character
    chat = program.tokenizer.apply_chat_template([{"role": "user", "content": "Hi!"}])
    reply = method.generate_text(chat, 64, add_special_tokens=False)
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from datetime import datetime
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

__all__ = [
    "MissingTextPackage",
    "TextDecoder",
    "TextGenerationResult",
    "Tokenizer",
    "TokenizerFileError",
    "generate_text",
    "read_chat_templates",
    "read_end_token_ids",
    "stream_text",
]

GENERATION_CONFIG = "generation_config.json"
TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_MODEL = "tokenizer.model"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
CHAT_TEMPLATE_JINJA = "chat_template.jinja"
CHAT_TEMPLATE_JSON = "chat_template.json"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
# Where a chat template is looked for, in transformers' order (see read_chat_templates).
CHAT_TEMPLATE_PLACES = (
    CHAT_TEMPLATE_JINJA,
    CHAT_TEMPLATE_DIR + "/*.jinja",
    TOKENIZER_CONFIG + "'s chat_template",
    CHAT_TEMPLATE_JSON,
)

# The special-token attributes transformers gives a chat template as strings.
_SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TokenizerFileError(ValueError):
    """A tokenizer or generation config file in an export folder is malformed (naming it)."""


class MissingTextPackage(ImportError):
    """A package that text in and out needs (tokenizers, sentencepiece, jinja2) is not installed:
    the runtime-only wheel runs on ids, and its [text] extra brings them."""


def import_text_package(name: str) -> Any:
    """Imports `name`, one of the [text] extra's packages.

    Raises:
      MissingTextPackage: it is not installed (the message says how to install it, on one line).
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name.split(".")[0]:
            raise
        raise MissingTextPackage(
            f"text needs the Python package '{name.split('.')[0]}', which is not installed (the edgeshare wheel's "
            "[text] extra installs it: pip install 'edgeshare-...whl[text]'); ids work without it") from None


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    """The JSON object in `path`, or None when there is no such file."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise TokenizerFileError(f"{path} is not readable JSON: {e}") from e
    if not isinstance(value, dict):
        raise TokenizerFileError(f"{path} is not a JSON object")
    return value


def read_end_token_ids(folder: str) -> List[int]:
    """The end tokens of generation_config.json in `folder` (eos_token_id: an id or a list).

    Args:
      folder: an export folder.

    Returns:
      The ids, [] without the file or without eos_token_id.

    Raises:
      TokenizerFileError: the file is malformed or its eos_token_id is not ids, naming it.
    """
    path = os.path.join(folder, GENERATION_CONFIG)
    config = _read_json(path)
    if config is None or config.get("eos_token_id") is None:
        return []
    eos = config["eos_token_id"]
    ids = eos if isinstance(eos, list) else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise TokenizerFileError(f"{path}: eos_token_id must be a token id or a list of them, not {eos!r:.60}")
    return list(ids)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerFileError(f"{path} is not readable UTF-8 text: {e}") from e


def _named_templates(value: Any, where: str) -> Dict[str, str]:
    """A chat_template entry: one template (named "default") or a list of {"name", "template"}."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list) and all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in value
    ):
        return {t["name"]: t["template"] for t in value}
    raise TokenizerFileError(f'{where}: chat_template must be a string or a list of {{"name", "template"}}')


def read_chat_templates(folder: str, tokenizer_config: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
    """The chat templates of an export folder (or model directory), by name, where transformers'
    tokenizers look for them and in their order: chat_template.jinja (named "default") and
    additional_chat_templates/NAME.jinja, which current transformers writes; else
    tokenizer_config.json's chat_template (one string, or a list of {"name", "template"}); else the
    chat_template of chat_template.json (the file processors used to write, which transformers'
    tokenizers do not read: taken only when the tokenizer has no template of its own).

    Args:
      folder: the folder holding the tokenizer files.
      tokenizer_config: tokenizer_config.json as read already (None: read it here).

    Returns:
      name -> template source; empty when the folder has none.

    Raises:
      TokenizerFileError: a file is malformed, naming it.
    """
    templates: Dict[str, str] = {}
    jinja = os.path.join(folder, CHAT_TEMPLATE_JINJA)
    if os.path.isfile(jinja):
        templates["default"] = _read_text(jinja)
    named = os.path.join(folder, CHAT_TEMPLATE_DIR)
    if os.path.isdir(named):
        for name in sorted(os.listdir(named)):
            if name.endswith(".jinja") and os.path.isfile(os.path.join(named, name)):
                templates[name[: -len(".jinja")]] = _read_text(os.path.join(named, name))
    if templates:
        return templates
    config_path = os.path.join(folder, TOKENIZER_CONFIG)
    config = tokenizer_config if tokenizer_config is not None else _read_json(config_path) or {}
    if config.get("chat_template") is not None:
        return _named_templates(config["chat_template"], config_path)
    json_path = os.path.join(folder, CHAT_TEMPLATE_JSON)
    legacy = _read_json(json_path)
    if legacy is not None:
        if legacy.get("chat_template") is None:
            raise TokenizerFileError(f"{json_path} has no chat_template")
        return _named_templates(legacy["chat_template"], json_path)
    return {}


def _token_text(value: Any) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


class Tokenizer:
    """A model's tokenizer: Hugging Face `tokenizers` over tokenizer.json, with the special tokens
    and chat template of tokenizer_config.json and the end tokens of generation_config.json."""

    def __init__(self, backend: Any, config: Mapping[str, Any], end_token_ids: Sequence[int], folder: str,
                 chat_templates: Optional[Mapping[str, str]] = None) -> None:
        """Internal: use Tokenizer.from_folder()."""
        self._backend = backend
        self._specials: Optional[frozenset] = None
        self._config = dict(config)
        self._folder = folder
        self.special_tokens: Dict[str, str] = {}
        for name in _SPECIAL_TOKEN_NAMES:
            text = _token_text(self._config.get(name))
            if text is not None:
                self.special_tokens[name] = text
        ids = list(end_token_ids)
        eos = self.special_tokens.get("eos_token")
        if not ids and eos is not None and backend.token_to_id(eos) is not None:
            ids = [backend.token_to_id(eos)]
        self.end_token_ids: List[int] = ids
        if chat_templates is None:
            chat_templates = read_chat_templates(folder, self._config) if os.path.isdir(folder) else {}
        # name -> source; "default" is the one used unless apply_chat_template names another.
        self.chat_templates: Dict[str, str] = dict(chat_templates)

    @property
    def chat_template(self) -> Optional[str]:
        """The default chat template's source (None without one)."""
        return self.chat_templates.get("default")

    @classmethod
    def from_folder(cls, folder: str) -> Optional[Tokenizer]:
        """Loads the tokenizer of an export folder (or a model directory), as transformers picks it:
        tokenizer.json (Hugging Face `tokenizers`) when there is one, else a SentencePiece
        tokenizer.model (the `sentencepiece` package, with the ids and text of transformers'
        LlamaTokenizer for the folder).

        Args:
          folder: the folder holding tokenizer.json or tokenizer.model (and optionally
            tokenizer_config.json, special_tokens_map.json, generation_config.json).

        Returns:
          The tokenizer, or None when the folder has neither file.

        Raises:
          TokenizerFileError: a file is malformed, naming it.
        """
        path = os.path.join(folder, TOKENIZER_JSON)
        model = os.path.join(folder, TOKENIZER_MODEL)
        if not os.path.isfile(path) and not os.path.isfile(model):
            return None
        config: Dict[str, Any] = {}
        for name in (SPECIAL_TOKENS_MAP, TOKENIZER_CONFIG):  # tokenizer_config wins, as in transformers
            config.update(_read_json(os.path.join(folder, name)) or {})
        templates = read_chat_templates(folder, _read_json(os.path.join(folder, TOKENIZER_CONFIG)) or {})
        if not os.path.isfile(path):
            return cls(_sentencepiece(model, config, os.path.join(folder, TOKENIZER_CONFIG)), config,
                       read_end_token_ids(folder), folder, templates)
        tokenizers = import_text_package("tokenizers")

        try:
            backend = tokenizers.Tokenizer.from_file(path)
        except Exception as e:  # tokenizers raises its own Exception subclass for a bad file
            raise TokenizerFileError(f"{path} is not a tokenizers file: {' '.join(str(e).split())}") from e
        return cls(backend, config, read_end_token_ids(folder), folder, templates)

    @property
    def vocab_size(self) -> int:
        """Tokens known, added ones included."""
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """The ids of `text` (with the tokenizer's post-processing, e.g. a BOS, when add_special_tokens).

        Raises:
          TypeError: text is not a str.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode(): text must be a str, not {type(text).__name__}")
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of `ids` (special tokens left out unless skip_special_tokens is False)."""
        return str(self._backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens))

    def holds_text(self, token: int, skip_special_tokens: bool = True) -> bool:
        """Whether text decoded up to `token` may still change with the tokens after it: a
        byte-fallback token ("<0xNN>": when its run turns out not to be UTF-8, every byte of the
        run is U+FFFD) or a special token left out (the byte tokens on both sides make one run)."""
        token = int(token)
        if skip_special_tokens and token in self._special_ids():
            return True
        piece = self._backend.id_to_token(token) if token >= 0 else None
        return piece is not None and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")

    def _special_ids(self) -> frozenset:
        if self._specials is None:
            added = self._backend.get_added_tokens_decoder()
            self._specials = frozenset(int(i) for i, t in added.items() if t.special)
        return self._specials

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        chat_template: Optional[str] = None,
        **kwargs: Any,
    ) -> Union[str, List[int]]:
        """Renders a conversation with the model's chat template, as transformers'
        apply_chat_template does (a sandboxed jinja2 environment with trim_blocks and lstrip_blocks,
        its tojson, raise_exception and strftime_now; the special tokens as strings).

        Args:
          messages: [{"role": "system" | "user" | "assistant", "content": str}, ...].
          add_generation_prompt: end with what opens the assistant's turn.
          tokenize: return the ids (encoded without adding special tokens again) instead of text.
          chat_template: the name of one of chat_templates, or a template's source (None: "tool_use"
            when tools are given and there is one, else "default"), as in transformers.
          **kwargs: more variables for the template (e.g. tools).

        Returns:
          The prompt text, or its ids with tokenize.

        Raises:
          ValueError: the tokenizer has no chat template (naming every place looked in), no template
            of that name, or the template raised (naming it).
        """
        jinja2 = import_text_package("jinja2")

        template = _compile(self._chat_template_source(chat_template, kwargs.get("tools")))
        # transformers passes tools and documents always (None without them): `tools is none` holds.
        variables = {"tools": None, "documents": None, **self.special_tokens, **kwargs}
        try:
            text = template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except jinja2.exceptions.TemplateError as e:
            raise TokenizerFileError(f"the chat template of {self._folder} failed: {e}") from e
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _chat_template_source(self, chosen: Optional[str], tools: Any) -> str:
        """The template apply_chat_template renders, picked as transformers' get_chat_template does."""
        if chosen is not None:
            return self.chat_templates.get(chosen, chosen)
        if tools is not None and "tool_use" in self.chat_templates:
            return self.chat_templates["tool_use"]
        if "default" in self.chat_templates:
            return self.chat_templates["default"]
        if self.chat_templates:
            raise TokenizerFileError(
                f"{self._folder} has chat templates {sorted(self.chat_templates)} but none named 'default': give "
                "chat_template=NAME")
        raise TokenizerFileError(f"{self._folder} has no chat template: looked for {', '.join(CHAT_TEMPLATE_PLACES)}")

    def __repr__(self) -> str:
        return f"Tokenizer({self._folder!r}, vocab_size={self.vocab_size})"


def _sentencepiece(model: str, config: Mapping[str, Any], config_path: str) -> Any:
    """The SentencePiece backend of `model` with what the config says, as transformers'
    LlamaTokenizer reads it: add_bos_token / add_eos_token, legacy and add_prefix_space (where a
    "▁" goes in front of the text), added_tokens_decoder."""
    from edgeshare.extension.python.sentencepiece_backend import (  # noqa: PLC0415
        AddedToken,
        SentencePieceBackend,
        SentencePieceOptions,
    )

    flags = {}
    for key, default in (("add_bos_token", True), ("add_eos_token", False), ("legacy", False),
                         ("add_prefix_space", True)):
        value = config.get(key)
        if value is not None and not isinstance(value, bool):
            raise TokenizerFileError(f"{config_path}: {key} must be true or false, not {value!r:.40}")
        flags[key] = default if value is None else value
    added = []
    decoder = config.get("added_tokens_decoder")
    if decoder is not None and not isinstance(decoder, dict):
        raise TokenizerFileError(f"{config_path}: added_tokens_decoder must be an object")
    for key, token in (decoder or {}).items():
        content = token.get("content") if isinstance(token, dict) else None
        special = token.get("special", False) if isinstance(token, dict) else None
        if not (str(key).isascii() and str(key).isdigit()) or not isinstance(content, str) or not isinstance(special, bool):
            raise TokenizerFileError(
                f'{config_path}: added_tokens_decoder["{key}"] must be {{"content": text, "special": true|false}}')
        added.append(AddedToken(int(key), content, special))
    scheme = "never" if not flags["add_prefix_space"] else "always" if flags["legacy"] else "first"
    options = SentencePieceOptions(add_bos=flags["add_bos_token"], add_eos=flags["add_eos_token"],
                                   prepend_scheme=scheme, added_tokens=tuple(added))
    try:
        return SentencePieceBackend(model, options)
    except ValueError as e:
        raise TokenizerFileError(str(e)) from e


_TEMPLATES: Dict[str, Any] = {}


def _compile(source: str) -> Any:
    """The jinja2 template transformers would compile from `source` (cached)."""
    if source in _TEMPLATES:
        return _TEMPLATES[source]
    import jinja2  # noqa: PLC0415
    from jinja2.ext import loopcontrols  # noqa: PLC0415
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    _TEMPLATES[source] = env.from_string(source)
    return _TEMPLATES[source]


class TextDecoder:
    """Turns tokens into text pieces as they come, never splitting a UTF-8 character: a piece is
    given out once the text of the tokens so far no longer ends in an incomplete character (U+FFFD
    from a partial byte sequence), and not after a token whose text the next ones may change (a
    byte-fallback token, see Tokenizer.holds_text). The pieces concatenate to
    tokenizer.decode(all tokens).

        decoder = TextDecoder(tokenizer)
        for token in tokens: print(decoder.add(token), end="")
        print(decoder.finish())
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids: List[int] = []
        self._prefix = 0  # the window decoded each time starts here (a few tokens back)
        self._read = 0  # tokens whose text was given out

    def _text(self, start: int, end: int) -> str:
        return self._tokenizer.decode(self._ids[start:end], skip_special_tokens=self._skip)

    def add(self, token: int) -> str:
        """Adds one token; returns the text it completes ("" while a character is incomplete)."""
        self._ids.append(int(token))
        if self._tokenizer.holds_text(token, self._skip):
            return ""
        done = self._text(self._prefix, self._read)
        text = self._text(self._prefix, len(self._ids))
        if len(text) > len(done) and not text.endswith("\ufffd") and text.startswith(done):
            self._prefix = self._read
            self._read = len(self._ids)
            return text[len(done):]
        return ""

    def finish(self) -> str:
        """The text not given out yet (an incomplete character at the end, as decode renders it)."""
        done = self._text(self._prefix, self._read)
        text = self._text(self._prefix, len(self._ids))
        self._prefix = self._read = len(self._ids)
        return text[len(done):] if text.startswith(done) else text


class _StopStrings:
    """Holds back text that may begin a stop string; cuts the text where one appears."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def push(self, piece: str) -> str:
        if not self._stops:
            return piece
        text = self._held + piece
        found = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        if found:
            self._held = ""
            self.stopped = True
            return text[: min(found)]
        hold = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:n]):
                    hold = n
                    break
        self._held = text[len(text) - hold:] if hold else ""
        return text[: len(text) - hold]

    def finish(self) -> str:
        held, self._held = self._held, ""
        return held


@dataclasses.dataclass(frozen=True)
class TextGenerationResult:
    """What generate_text returned.

    Attributes:
      text: the new text (special tokens such as the end token left out; cut before a stop string).
      tokens: the new token ids, in order (the end token included when generation stopped on it).
      prompt_tokens: how many tokens the prompt had.
      stop_reason: "end_token", "stop_string" or "length" (max_new_tokens, or the sequence reached
        the method's length).
      prefill_ms: the prompt's one execute, in milliseconds.
      decode_tokens_per_s: new tokens after the first per second of their executes.
      seed: the sampler's seed (drawn fresh when none was given), None for greedy generation.
      prefilled_tokens: the prompt tokens executed (fewer than prompt_tokens with cached_tokens).
    """

    text: str
    tokens: List[int]
    prompt_tokens: int
    stop_reason: str
    prefill_ms: float = 0.0
    decode_tokens_per_s: float = 0.0
    seed: Optional[int] = None
    prefilled_tokens: int = 0

    @property
    def finish_reason(self) -> str:
        """As OpenAI's and transformers' APIs name it: "stop" (an end token or a stop string) or
        "length"."""
        return "length" if self.stop_reason == "length" else "stop"


def _prompt_ids(tokenizer: Optional[Tokenizer], prompt: Union[str, Sequence[int], np.ndarray],
                add_special_tokens: bool, where: str) -> np.ndarray:
    if isinstance(prompt, str):
        if tokenizer is None:
            raise TokenizerFileError(
                f"{where} has no tokenizer.json or tokenizer.model beside it: give token ids, or export with a "
                "model directory that has its tokenizer"
            )
        return np.asarray(tokenizer.encode(prompt, add_special_tokens=add_special_tokens), dtype=np.int64)
    return np.asarray(prompt, dtype=np.int64)


def stream_text(
    method: Any,
    prompt: Union[str, Sequence[int], np.ndarray],
    max_new_tokens: int,
    *,
    stop: Sequence[str] = (),
    add_special_tokens: bool = True,
    result: Optional[List[TextGenerationResult]] = None,
    **options: Any,
) -> Iterator[str]:
    """Generates with `method` (Method.stream) and yields the text as it is decoded.

    Args:
      method: a loaded stateful Method whose program's folder has the tokenizer.
      prompt: text (encoded with the program's tokenizer) or token ids.
      max_new_tokens: tokens to generate at most.
      stop: stop strings: generation ends when the text contains one (it is left out).
      add_special_tokens: let the tokenizer add its special tokens (a BOS) to a text prompt; False
        for a prompt rendered by apply_chat_template.
      result: when given, a TextGenerationResult is appended once the stream ends.
      **options: Method.generate's options (temperature, top_k, top_p, repetition_penalty, seed,
        eos_id, stop_ids; the program's end tokens by default).

    Returns:
      An iterator of text pieces whose concatenation is the generated text.

    Raises:
      TokenizerFileError: a text prompt and no tokenizer; EdgeshareError, TypeError: as Method.generate.
    """
    tokenizer = method.program.tokenizer
    ids = _prompt_ids(tokenizer, prompt, add_special_tokens, method.program.path)
    if tokenizer is None:
        raise TokenizerFileError(
            f"{method.program.path} has no tokenizer.json or tokenizer.model beside it to decode text with"
        )
    tokens_iter = method.stream(ids, max_new_tokens, **options)
    return _pieces(method, tokenizer, tokens_iter, ids.size, stop, result)


def _pieces(method: Any, tokenizer: Tokenizer, tokens_iter: Any, prompt_tokens: int,
            stop: Sequence[str], result: Optional[List[TextGenerationResult]]) -> Iterator[str]:
    decoder = TextDecoder(tokenizer)
    stops = _StopStrings(list(stop))
    tokens: List[int] = []
    text: List[str] = []
    for token in tokens_iter:
        tokens.append(token)
        piece = stops.push(decoder.add(token))
        if piece:
            text.append(piece)
            yield piece
        if stops.stopped:
            break
    if not stops.stopped:
        piece = stops.push(decoder.finish())
        piece += "" if stops.stopped else stops.finish()
        if piece:
            text.append(piece)
            yield piece
    if result is not None:
        prefill_ms, per_s, finish, prefilled = method._native.stream_timings()
        if stops.stopped:
            reason = "stop_string"
        else:
            reason = "length" if finish == "length" else "end_token"
        result.append(
            TextGenerationResult("".join(text), tokens, int(prompt_tokens), reason, float(prefill_ms), float(per_s),
                                 getattr(tokens_iter, "seed", None), int(prefilled))
        )


def generate_text(
    method: Any,
    prompt: Union[str, Sequence[int], np.ndarray],
    max_new_tokens: int,
    *,
    stop: Sequence[str] = (),
    add_special_tokens: bool = True,
    **options: Any,
) -> TextGenerationResult:
    """stream_text, collected: the whole text at the end.

    Args and Raises: as stream_text.

    Returns:
      The text, the tokens and why generation stopped.
    """
    result: List[TextGenerationResult] = []
    for _ in stream_text(method, prompt, max_new_tokens, stop=stop, add_special_tokens=add_special_tokens,
                         result=result, **options):
        pass
    return result[0]
