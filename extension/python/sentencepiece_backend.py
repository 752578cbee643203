"""A SentencePiece tokenizer.model behind the part of Hugging Face `tokenizers`' Tokenizer that
text.Tokenizer uses (encode(...).ids, decode, token_to_id, get_vocab_size), on the `sentencepiece`
package (no torch, no protobuf). Its ids and text are what transformers' LlamaTokenizer makes of
the same folder (the tokenizers-backed one it converts a tokenizer.model to), and the C++
SentencePieceTokenizer's:

- added tokens: the model's control and unknown pieces (special), its user-defined pieces (not
  special) and tokenizer_config.json's added_tokens_decoder are matched in the raw text first.
- each stretch between them: spaces become "▁", and one "▁" is put in front unless the stretch
  starts with one (Hugging Face's Metaspace, not SentencePiece's dummy prefix, which always adds
  one): in front of every stretch for legacy tokenizers, of the text's start only otherwise, never
  with add_prefix_space false. The pieces are SentencePiece's BPE over that string with the
  model's own normalizer turned off (transformers ignores it too). In a model without byte pieces,
  a character with no piece is left out (transformers' converted BPE has no unknown token).
- BOS (and EOS) as tokenizer_config.json's add_bos_token / add_eos_token say.
- decode: special tokens left out (or written as their text with skip_special_tokens=False); "▁"
  as a space; a run of byte tokens is its UTF-8 text, or one U+FFFD per token when the run is not
  valid UTF-8; one leading space of the whole text dropped (with add_prefix_space); ids outside the
  vocabulary skipped.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["AddedToken", "SentencePieceBackend", "SentencePieceOptions"]

_SPACE = "\u2581"
_REPLACEMENT = "\ufffd"
_UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE = 2, 3, 4, 6
# An added token's id above this is refused (it would size the vocabulary).
_MAX_ADDED_ID = 1 << 24


@dataclasses.dataclass(frozen=True)
class Encoding:
    """What encode returns (the `ids` of a tokenizers.Encoding)."""

    ids: List[int]


@dataclasses.dataclass(frozen=True)
class AddedToken:
    """A token of tokenizer_config.json's added_tokens_decoder."""

    id: int
    content: str
    special: bool


@dataclasses.dataclass(frozen=True)
class SentencePieceOptions:
    """What tokenizer_config.json says about a tokenizer.model (transformers' LlamaTokenizer defaults)."""

    add_bos: bool = True
    add_eos: bool = False
    # "always" (legacy), "first" (the text's start only) or "never" (add_prefix_space false).
    prepend_scheme: str = "first"
    added_tokens: Tuple[AddedToken, ...] = ()


def _varint(data: bytes, at: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: bytes) -> List[Tuple[int, bytes, bytes]]:
    """The top-level fields of a protobuf message: (number, whole field bytes, payload)."""
    out = []
    at = 0
    while at < len(data):
        start = at
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(data, at)
            payload = b""
        elif wire == 1:
            at += 8
            payload = b""
        elif wire == 2:
            size, at = _varint(data, at)
            payload = data[at:at + size]
            at += size
        elif wire == 5:
            at += 4
            payload = b""
        else:
            raise ValueError(f"wire type {wire}")
        if at > len(data):
            raise ValueError("a truncated field")
        out.append((number, data[start:at], payload))
    return out


def without_normalizer(model: bytes) -> Tuple[bytes, List[int]]:
    """The model with its normalizer turned off (no dummy prefix, no whitespace folding, no
    character map; spaces still escaped as "▁": what Hugging Face's Metaspace leaves to the BPE),
    and the type of each piece.

    Args:
      model: a serialized sentencepiece ModelProto.

    Returns:
      The same model with normalizer_spec (field 3) replaced and no self-test samples, and each
      piece's type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).

    Raises:
      ValueError: the bytes are not a protobuf message.
    """
    fields = _fields(model)
    types = []
    for number, _, payload in fields:
        if number == 1:  # pieces: {1: piece, 2: score, 3: type (NORMAL when absent)}
            kind = 1
            for n, whole, _ in _fields(payload):
                if n == 3:
                    kind = _varint(whole, 1)[0]
            types.append(kind)
    # Keep what the normalizer fields 1-6 (name, charsmap, dummy prefix, whitespace folding,
    # escaping, rule tsv) do not cover. Occurrences of one embedded message merge.
    spec = b"".join(payload for number, _, payload in fields if number == 3)
    kept = b"".join(whole for number, whole, _ in _fields(spec) if number > 6)
    name = b"identity"
    ours = (kept + b"\x0a" + _put_varint(len(name)) + name  # name
            + b"\x18\x00"  # add_dummy_prefix = false
            + b"\x20\x00"  # remove_extra_whitespaces = false
            + b"\x28\x01")  # escape_whitespaces = true
    # Without self_test_data (4) too: its samples were made with the model's own normalizer, and
    # the library checks them when it loads the model.
    rest = b"".join(whole for number, whole, _ in fields if number not in (3, 4))
    return rest + b"\x1a" + _put_varint(len(ours)) + ours, types


class SentencePieceBackend:
    """tokenizer.model for text.Tokenizer."""

    def __init__(self, path: str, options: Optional[SentencePieceOptions] = None) -> None:
        """Loads the model.

        Args:
          path: a tokenizer.model.
          options: tokenizer_config.json's settings (transformers' defaults when None).

        Raises:
          ValueError: the file is not a SentencePiece model, or an added token's id is negative or
            above 2**24 (the message names the file, on one line).
        """
        from edgeshare.extension.python.text import import_text_package  # noqa: PLC0415 (text imports this module)

        sentencepiece = import_text_package("sentencepiece")  # only SentencePiece models need it

        options = options or SentencePieceOptions()
        if options.prepend_scheme not in ("always", "first", "never"):
            raise ValueError(f"prepend_scheme must be always, first or never, not {options.prepend_scheme!r}")
        try:
            with open(path, "rb") as f:
                proto, types = without_normalizer(f.read())
            self._sp: Any = sentencepiece.SentencePieceProcessor(model_proto=proto)
        except (OSError, RuntimeError, ValueError) as e:
            raise ValueError(f"{path} is not a SentencePiece model: {' '.join(str(e).split())}") from e
        sp = self._sp
        self._size = int(sp.get_piece_size())
        # id -> (text, special) of every token matched in the raw text.
        added: Dict[int, Tuple[str, bool]] = {}
        for i, kind in enumerate(types[:self._size]):
            if kind in (_UNKNOWN, _CONTROL, _USER_DEFINED):
                added[i] = (sp.id_to_piece(i), kind != _USER_DEFINED)
        for token in options.added_tokens:
            if not 0 <= token.id < _MAX_ADDED_ID:
                raise ValueError(f"{path}: added token {token.content!r} has id {token.id}")
            added[token.id] = (token.content, token.special)
        self._added = added
        # Of two tokens with one text, the lower id is matched (as in C++).
        self._by_text = {text: i for i, (text, _) in sorted(added.items(), reverse=True) if text}
        # Longest first: of two tokens starting at the same place, the longer one wins.
        self._matchers = sorted(self._by_text.items(), key=lambda t: -len(t[0]))
        self._vocab = max([self._size - 1] + list(added)) + 1
        self._prefix = [sp.bos_id()] if options.add_bos and sp.bos_id() >= 0 else []
        self._suffix = [sp.eos_id()] if options.add_eos and sp.eos_id() >= 0 else []
        self._scheme = options.prepend_scheme
        self._unk = int(sp.unk_id())
        self._bytes = any(kind == _BYTE for kind in types)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """The largest id + 1, added tokens included."""
        return self._vocab if with_added_tokens else self._size

    def id_to_token(self, i: int) -> Optional[str]:
        """The piece or added token of an id, or None."""
        if i in self._added:
            return self._added[i][0]
        return str(self._sp.id_to_piece(i)) if 0 <= i < self._size else None

    def get_added_tokens_decoder(self) -> Dict[int, AddedToken]:
        """The added tokens by id (the model's control, unknown and user-defined pieces included)."""
        return {i: AddedToken(i, text, special) for i, (text, special) in self._added.items()}

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of a piece or added token, or None."""
        if token in self._by_text:
            return self._by_text[token]
        i = int(self._sp.piece_to_id(token))
        return i if 0 <= i < self._size and self._sp.id_to_piece(i) == token else None

    def _split(self, text: str) -> List[Tuple[int, str, int]]:
        """text as (added token id, "", offset) and (-1, stretch between them, offset) parts."""
        parts: List[Tuple[int, str, int]] = []
        at = 0
        while at < len(text):
            best: Optional[Tuple[int, str, int]] = None
            for content, i in self._matchers:
                found = text.find(content, at)
                if found >= 0 and (best is None or found < best[0]):
                    best = (found, content, i)
            end = len(text) if best is None else best[0]
            if end > at:
                parts.append((-1, text[at:end], at))
            if best is None:
                break
            parts.append((best[2], "", best[0]))
            at = best[0] + len(best[1])
        return parts

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        """The ids of text."""
        ids: List[int] = list(self._prefix) if add_special_tokens else []
        for i, stretch, offset in self._split(text):
            if i >= 0:
                ids.append(i)
                continue
            stretch = stretch.replace(" ", _SPACE)
            prepend = self._scheme == "always" or (self._scheme == "first" and offset == 0)
            if prepend and not stretch.startswith(_SPACE):
                stretch = _SPACE + stretch
            if not self._bytes:
                # A character with no piece of its own is left out before merging, as transformers'
                # converted BPE (no unknown token, no byte pieces to fall back to) leaves it out.
                stretch = "".join(c for c in stretch if self._sp.piece_to_id(c) != self._unk)
            ids += self._sp.encode(stretch)
        if add_special_tokens:
            ids += self._suffix
        return Encoding(ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ids."""
        sp = self._sp
        text: List[str] = []
        run = bytearray()
        count = 0
        # Skipped tokens go first, so the byte tokens on both sides of one make one run.
        kept = [i for i in (int(i) for i in ids) if 0 <= i < self._vocab and not (
            skip_special_tokens and i in self._added and self._added[i][1])]
        for i in kept + [-1]:
            byte = 0 <= i < self._size and i not in self._added and sp.is_byte(i)
            if not byte and count:
                try:
                    text.append(run.decode("utf-8"))
                except UnicodeDecodeError:
                    text.append(_REPLACEMENT * count)
                run, count = bytearray(), 0
            if i < 0:
                continue
            if byte:
                run.append(int(sp.id_to_piece(i)[3:5], 16))
                count += 1
            elif i in self._added:
                text.append(self._added[i][0].replace(_SPACE, " "))
            elif i < self._size:
                text.append(sp.id_to_piece(i).replace(_SPACE, " "))
        out = "".join(text)
        if self._scheme != "never" and out.startswith(" "):
            out = out[1:]
        return out
