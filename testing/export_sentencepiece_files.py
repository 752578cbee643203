"""Writes the SentencePiece fixture: tiny_sentencepiece's tokenizer.model (trained here) and what the
`sentencepiece` package makes of it, for the C++ and Python tokenizers to equal.

    export_sentencepiece_files --out DIR
    # DIR/tokenizer.model, tokenizer_config.json, special_tokens_map.json, generation_config.json
    # DIR/expected.json: {"corpus": [str, ...],
    #   "ids": [[...]] (BOS, then each stretch between control-token texts encoded by sentencepiece,
    #   the control tokens themselves between), "ids_plain": [[...]] (the same without the BOS),
    #   "decoded": [str, ...] (sentencepiece's decode of "ids"),
    #   "random_ids": [[...]] (seeded draws over the whole vocabulary: byte runs that are not UTF-8,
    #   control and unknown tokens), "random_decoded": [str, ...] (sentencepiece's decode of each)}
"""

import argparse
import json
import os
import random
from typing import List, Optional, Sequence

import sentencepiece
from edgeshare.models import tiny_sentencepiece

# The texts the library gives control tokens in Hugging Face's conversion (added special tokens).
_CONTROLS = ("<unk>", "<s>", "</s>")


def _encode(sp: sentencepiece.SentencePieceProcessor, text: str) -> List[int]:
    """The ids of text without a BOS: control-token texts as their ids, the rest by the library."""
    ids: List[int] = []
    rest = text
    while rest:
        hits = [(rest.find(c), -len(c), c) for c in _CONTROLS if c in rest]
        if not hits:
            ids += sp.encode(rest)
            break
        at, _, control = min(hits)
        if at:
            ids += sp.encode(rest[:at])
        ids.append(sp.piece_to_id(control))
        rest = rest[at + len(control):]
    return ids


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes the files into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tiny_sentencepiece.save_tokenizer(args.out)
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.out, "tokenizer.model"))
    corpus = tiny_sentencepiece.TEST_CORPUS
    plain = [_encode(sp, text) for text in corpus]
    ids = [[sp.bos_id()] + p for p in plain]
    rng = random.Random(23)
    random_ids = [[rng.randrange(sp.get_piece_size()) for _ in range(rng.randrange(1, 24))] for _ in range(200)]
    # Byte runs dense enough to hold complete characters next to broken ones.
    byte_ids = [i for i in range(sp.get_piece_size()) if sp.is_byte(i)]
    random_ids += [[rng.choice(byte_ids) for _ in range(rng.randrange(1, 9))] for _ in range(200)]
    expected = {
        "corpus": corpus,
        "ids": ids,
        "ids_plain": plain,
        "decoded": [sp.decode(i) for i in ids],
        "random_ids": random_ids,
        "random_decoded": [sp.decode(i) for i in random_ids],
    }
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
