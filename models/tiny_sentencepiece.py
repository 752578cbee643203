"""A small SentencePiece tokenizer.model trained here (the `sentencepiece` package; nothing from the
hub) with the options Llama 2's and Mistral's tokenizer.model record: BPE with byte fallback,
<unk>/<s>/</s> as ids 0/1/2, no pad, a dummy prefix, whitespace runs kept (whitespace-only pieces
allowed), digits split, identity normalization. What a Llama 2 / Mistral model directory has
instead of a tokenizer.json.

    from edgeshare.models import tiny_sentencepiece
    tiny_sentencepiece.save_tokenizer(model_dir)   # tokenizer.model, tokenizer_config.json, ...
    tiny_sentencepiece.save_tokenizer(chat_dir, legacy=False, added_tokens=tiny_sentencepiece.ADDED_TOKENS)
"""

import io
import json
import os
from typing import Any, Dict, List, Sequence

from edgeshare.models.tiny_tokenizer import CORPUS, HELD_OUT

__all__ = ["ADDED_TOKENS", "TEST_CORPUS", "VOCAB", "save_tokenizer", "train"]

# 3 meta pieces, 256 byte pieces and the rest pieces and merges (character_coverage below 1 leaves
# the rarest characters to byte fallback).
VOCAB = 560

# What tests encode: the training corpus, text it never saw, and what is particular to
# SentencePiece (the control tokens' texts, leading and trailing whitespace runs, a Llama 2 chat turn).
TEST_CORPUS = CORPUS + HELD_OUT + [
    "<s>[INST] Hallo, wie geht's? [/INST] Gut! 🙂</s>",
    "   three leading spaces and two trailing  ",
    "<unk> is a token too, and so is </s> and <s>",
    "\n\nnew lines first",
    "ＡＢＣ ｶﾀｶﾅ full width 한국어 🧑🏽‍🚀",
    "<|im_start|>user\n [[image]]  what is this?<|im_end|>\n<|im_start|>assistant\n",
]

# tokenizer_config.json's added_tokens_decoder of a chat model: ChatML's turn tokens after the
# model's pieces (special) and a placeholder that is an added token but not a special one.
ADDED_TOKENS = [
    {"id": VOCAB, "content": "<|im_start|>", "special": True},
    {"id": VOCAB + 1, "content": "<|im_end|>", "special": True},
    {"id": VOCAB + 2, "content": "[[image]]", "special": False},
]


def train(llama: bool = True) -> bytes:
    """Trains the model on tiny_tokenizer's corpus.

    Args:
      llama: with Llama 2's options (above); False keeps the trainer's own defaults instead (nmt_nfkc
        normalization, whitespace runs folded, no byte fallback), which transformers ignores.

    Returns:
      The tokenizer.model bytes (deterministic for a given sentencepiece version).
    """
    import sentencepiece  # noqa: PLC0415 (only tokenizer fixtures need it)

    options: Dict[str, Any] = dict(
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        normalization_rule_name="identity",
    ) if llama else {}
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 4),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB,
        character_coverage=0.98,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
        **options,
    )
    return model.getvalue()


def save_tokenizer(model_dir: str, legacy: bool = True, added_tokens: Sequence[Dict[str, Any]] = (),
                   llama: bool = True) -> List[str]:
    """Writes tokenizer.model with Llama 2's tokenizer_config.json (LlamaTokenizer, BOS added, no EOS),
    special_tokens_map.json and generation_config.json (eos_token_id 2, </s>) into model_dir.

    Args:
      model_dir: an existing model directory.
      legacy: tokenizer_config.json's legacy (Llama 2's own files say true: a "▁" in front of the
        text after every added token; false: in front of the text's start only).
      added_tokens: [{"id", "content", "special"}] for tokenizer_config.json's added_tokens_decoder.
      llama: train with Llama 2's options (see train()).

    Returns:
      The files written.
    """
    paths = [os.path.join(model_dir, name) for name in (
        "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")]
    with open(paths[0], "wb") as f:
        f.write(train(llama))
    tokens = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    config: Dict[str, Any] = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                              "clean_up_tokenization_spaces": False, "legacy": legacy, **tokens}
    if added_tokens:
        config["added_tokens_decoder"] = {
            str(t["id"]): {"content": t["content"], "special": t["special"], "lstrip": False, "rstrip": False,
                           "normalized": False, "single_word": False}
            for t in added_tokens
        }
    for path, value in ((paths[1], config), (paths[2], tokens),
                        (paths[3], {"bos_token_id": 1, "eos_token_id": 2})):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False, indent=2)
    return paths
