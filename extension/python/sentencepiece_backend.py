"""A SentencePiece tokenizer.model behind the part of Hugging Face `tokenizers`' Tokenizer that
text.Tokenizer uses (encode(...).ids, decode, token_to_id, get_vocab_size), on the `sentencepiece`
package (no torch, no protobuf). Its ids and text are the C++ SentencePieceTokenizer's:

- encode: the texts of the control and unknown pieces ("<s>", "</s>", "<unk>") are those tokens, as
  Hugging Face's added special tokens are (a chat template writes them); each stretch between them is
  encoded by sentencepiece with its own dummy prefix (transformers' legacy Llama tokenizer); BOS
  (and EOS) are added as tokenizer_config.json's add_bos_token / add_eos_token say (BOS only by
  default, as Llama).
- decode: sentencepiece's (control pieces left out, or written as their text with
  skip_special_tokens=False); ids outside the vocabulary are skipped.
"""

import dataclasses
from typing import Any, List, Optional, Sequence

__all__ = ["SentencePieceBackend"]


@dataclasses.dataclass(frozen=True)
class Encoding:
    """What encode returns (the `ids` of a tokenizers.Encoding)."""

    ids: List[int]


class SentencePieceBackend:
    """tokenizer.model for text.Tokenizer."""

    def __init__(self, path: str, add_bos: bool = True, add_eos: bool = False) -> None:
        """Loads the model.

        Args:
          path: a tokenizer.model.
          add_bos: encode(add_special_tokens=True) starts with the BOS id.
          add_eos: and ends with the EOS id.

        Raises:
          ValueError: the file is not a SentencePiece model (the message names it, on one line).
        """
        import sentencepiece  # noqa: PLC0415 (only SentencePiece models need it)

        try:
            self._sp: Any = sentencepiece.SentencePieceProcessor(model_file=path)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"{path} is not a SentencePiece model: {' '.join(str(e).split())}") from e
        sp = self._sp
        self._size = int(sp.get_piece_size())
        self._controls = sorted(
            ((sp.id_to_piece(i), i) for i in range(self._size) if sp.is_control(i) or sp.is_unknown(i)),
            key=lambda c: -len(c[0]),
        )
        self._controls = [c for c in self._controls if c[0]]
        self._control_ids = {i for i in range(self._size) if sp.is_control(i)}
        self._prefix = [sp.bos_id()] if add_bos and sp.bos_id() >= 0 else []
        self._suffix = [sp.eos_id()] if add_eos and sp.eos_id() >= 0 else []
        # A byte token consumes the dummy prefix's space without one of its own (decode of a stretch
        # that does not start the text).
        byte_a = sp.piece_to_id("<0x41>")
        self._lead: Optional[int] = byte_a if sp.is_byte(byte_a) else None

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """Pieces in the model (a SentencePiece model has no added tokens)."""
        del with_added_tokens
        return self._size

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of a piece, or None."""
        i = int(self._sp.piece_to_id(token))
        return i if 0 <= i < self._size and self._sp.id_to_piece(i) == token else None

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        """The ids of text."""
        ids: List[int] = list(self._prefix) if add_special_tokens else []
        rest = text
        while rest:
            hits = [(rest.find(t), n, t, i) for n, (t, i) in enumerate(self._controls) if t in rest]
            if not hits:
                ids += self._sp.encode(rest)
                break
            at, _, piece, i = min(hits)
            if at:
                ids += self._sp.encode(rest[:at])
            ids.append(i)
            rest = rest[at + len(piece):]
        if add_special_tokens:
            ids += self._suffix
        return Encoding(ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ids."""
        known = [int(i) for i in ids if 0 <= int(i) < self._size]
        if skip_special_tokens:
            return str(self._sp.decode(known))
        text: List[str] = []
        run: List[int] = []
        started = False  # a piece that is not a control one came before: no dummy prefix to drop
        for i in known + [-1]:
            if i >= 0 and i not in self._control_ids:
                run.append(i)
                continue
            if run:
                if started and self._lead is not None:
                    text.append(str(self._sp.decode([self._lead] + run))[1:])
                else:
                    text.append(str(self._sp.decode(run)))
                started, run = True, []
            if i >= 0:
                text.append(self._sp.id_to_piece(i))
        return "".join(text)
