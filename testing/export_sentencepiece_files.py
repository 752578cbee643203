"""Writes the SentencePiece fixture: tiny_sentencepiece's tokenizer.model (trained here) in two
folders, and what transformers' LlamaTokenizer (the Hugging Face `tokenizers` pipeline it converts a
tokenizer.model to) makes of each, for the C++ and Python tokenizers to equal.

    export_sentencepiece_files --out DIR
    # DIR/{tokenizer.model, tokenizer_config.json, special_tokens_map.json, generation_config.json}:
    #   Llama 2's settings (legacy: true)
    # DIR/chat/{tokenizer.model, tokenizer_config.json, ...}: legacy false and added tokens (ChatML's
    #   turn tokens, special, and one that is not special) after the model's pieces
    # DIR/plain/{tokenizer.model, ...}: a model trained with sentencepiece's default options (a
    #   normalizer transformers ignores, no byte fallback: unknown characters)
    # DIR/expected.json: {"llama2" | "chat" | "plain": {"vocab_size": N, "corpus": [str, ...],
    #   "ids": [[...]] (encode with special tokens, i.e. the BOS), "ids_plain": [[...]] (without),
    #   "decoded": [str, ...] (decode of "ids" skipping special tokens),
    #   "decoded_special": [str, ...] (keeping them),
    #   "random_ids": [[...]] (seeded draws over the whole vocabulary, added tokens included, and
    #   runs of byte tokens that are not all UTF-8), "random_decoded", "random_decoded_special"}}
"""

import argparse
import json
import os
import random
import warnings
from typing import Any, Dict, List, Optional, Sequence

from edgeshare.models import tiny_sentencepiece

CONFIGS = {"llama2": "", "chat": "chat", "plain": "plain"}


def _expected(folder: str) -> Dict[str, Any]:
    """transformers' ids and text for the corpus and random id runs in `folder`."""
    import transformers  # noqa: PLC0415

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    if type(tok).__name__ != "LlamaTokenizer":
        raise SystemExit(f"{folder}: transformers made a {type(tok).__name__}, not a LlamaTokenizer")
    corpus = tiny_sentencepiece.TEST_CORPUS
    ids = [list(tok(text)["input_ids"]) for text in corpus]
    plain = [list(tok(text, add_special_tokens=False)["input_ids"]) for text in corpus]
    size = len(tok)
    rng = random.Random(23)
    random_ids: List[List[int]] = [[rng.randrange(size) for _ in range(rng.randrange(1, 24))] for _ in range(200)]
    # Byte runs dense enough to hold complete characters next to broken ones, with special tokens
    # inside some runs (skipped, they do not end the run).
    byte_ids = [i for i in range(size) if tok.convert_ids_to_tokens(i).startswith("<0x")] or list(range(size))
    runs = byte_ids * 6 + [1, 2]
    random_ids += [[rng.choice(runs) for _ in range(rng.randrange(1, 9))] for _ in range(200)]
    return {
        "vocab_size": size,
        "corpus": corpus,
        "ids": ids,
        "ids_plain": plain,
        "decoded": [tok.decode(i, skip_special_tokens=True) for i in ids],
        "decoded_special": [tok.decode(i, skip_special_tokens=False) for i in ids],
        "random_ids": random_ids,
        "random_decoded": [tok.decode(i, skip_special_tokens=True) for i in random_ids],
        "random_decoded_special": [tok.decode(i, skip_special_tokens=False) for i in random_ids],
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes the files into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    expected = {}
    for name, sub in CONFIGS.items():
        folder = os.path.join(args.out, sub)
        os.makedirs(folder, exist_ok=True)
        if name == "chat":
            tiny_sentencepiece.save_tokenizer(folder, legacy=False, added_tokens=tiny_sentencepiece.ADDED_TOKENS)
        elif name == "plain":
            tiny_sentencepiece.save_tokenizer(folder, llama=False)
        else:
            tiny_sentencepiece.save_tokenizer(folder)
        expected[name] = _expected(folder)
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
