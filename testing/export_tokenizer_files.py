"""Writes the tokenizer families fixture: one tokenizer.json per model family, shaped as that family's
hub file is (the same normalizer, pre-tokenizer, model options, added-token flags, post-processor and
decoder) over a small vocabulary trained here with Hugging Face `tokenizers` (nothing from the hub),
and what `tokenizers` makes of a few hundred texts in each, for the C++ tokenizer to equal.

    export_tokenizer_files --out DIR
    # DIR/<family>/tokenizer.json for each name in FAMILIES
    # DIR/expected.json: {<family>: {"texts": [str, ...],
    #   "ids": [[...]] (encode with special tokens), "ids_plain": [[...]] (without),
    #   "decoded": [str, ...] (decode of "ids" skipping special tokens), "decoded_special": [...],
    #   "random_ids": [[...]] (seeded draws over the whole vocabulary, byte tokens favoured),
    #   "random_decoded": [...], "random_decoded_special": [...]}}

The families: gemma3 (Replace " " -> "▁" normalizer, Split " " merged with previous, BPE with byte
fallback, decoder Replace/ByteFallback/Fuse), qwen2 (NFC, the Qwen2 regex Split then ByteLevel without
its regex), llama3 (Llama 3's regex, ignore_merges, a template adding <|begin_of_text|>), smollm2
(Digits then ByteLevel with GPT-2's regex), phi3 (Llama 2's legacy shape: Prepend "▁" and Replace
normalizers, decoder Replace/ByteFallback/Fuse/Strip, turn tokens with rstrip), mistral (Metaspace
prepend_scheme first, no normalizer), and two that exercise the rest: nfkc_lowercase (NFKC, Lowercase,
a Regex Replace, Split contiguous, Metaspace always + split and its decoder, a normalized added token)
and nfd_prefix (NFD, Strip, Split merged with next / inverted merged with previous, ByteLevel with
add_prefix_space).
"""

import argparse
import json
import os
import random
import unicodedata
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from edgeshare.models.tiny_tokenizer import CORPUS, HELD_OUT
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

EXTRA = [
    "Ünïcödé wörds: café naïve résumé façade São Paulo Ærøskøbing.",
    "Numbers 1234567890, 3.14159, 1,000,000 and 2024-06-01 or ٣٤٥ and ５６.",
    "Fullwidth ＡＢＣ ｱｲｳ, ligature ﬁ ﬂ, superscript x² and ① ② ③, ㍿ ℃ ™.",
    "CAPITALS AND Title Case, İstanbul ΣΊΣΥΦΟΣ ǅ straße ẞ.",
    "   leading and trailing spaces   ",
    "tabs\t\tand\nnewlines\n\n\nand\r\ncarriage returns",
    "no-break\u00a0space, ideographic\u3000space, thin\u2009space",
    "emoji 😀😃😄 🤖 ❤️ 🏳️‍🌈 and 1️⃣ keycaps",
    "a",
    " ",
    "  ",
    "\n",
    "x y  z   w    v",
]

WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", " \n ", "\u3000", "\u00a0"]


def _base_texts() -> List[str]:
    texts = list(CORPUS) + [t for t in HELD_OUT if t] + EXTRA
    texts += [unicodedata.normalize("NFD", t) for t in texts[:20]]  # composed and decomposed accents
    return texts


def _texts(specials: Sequence[str], count: int, seed: int) -> List[str]:
    """The base texts and seeded mixtures of their fragments, whitespace runs, digits and special tokens."""
    rng = random.Random(seed)
    base = _base_texts()
    words = [w for t in base for w in t.split(" ") if w]
    texts = list(base) + [" ".join(base) * 2]  # one long text: BPE over thousands of characters
    while len(texts) < count:
        parts: List[str] = []
        for _ in range(rng.randint(1, 6)):
            roll = rng.random()
            if roll < 0.5:
                parts.append(rng.choice(words))
            elif roll < 0.65:
                parts.append(rng.choice(WHITESPACE))
            elif roll < 0.75:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
            elif roll < 0.9 and specials:
                parts.append(rng.choice(specials))
            else:
                parts.append(rng.choice(base)[: rng.randint(0, 30)])
        sep = rng.choice(["", " ", " ", "\n"])
        texts.append(sep.join(parts))
    return texts


def _train(tokenizer: Tokenizer, vocab: int, specials: Sequence[str], byte_level: bool) -> Dict[str, Any]:
    """Trains tokenizer's BPE on the corpus; returns the tokenizer's JSON."""
    options: Dict[str, Any] = {"initial_alphabet": pre_tokenizers.ByteLevel.alphabet()} if byte_level else {"limit_alphabet": 120}
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=list(specials), show_progress=False, **options)
    tokenizer.train_from_iterator(list(CORPUS) * 4 + EXTRA, trainer)
    return json.loads(tokenizer.to_str())


def _with_byte_tokens(trained: Dict[str, Any], specials: Sequence[str]) -> Tuple[Dict[str, int], List[Tuple[str, str]]]:
    """SentencePiece's layout: the special tokens, then <0x00>..<0xFF>, then the trained pieces."""
    vocab: Dict[str, int] = {}
    for token in list(specials) + ["<0x%02X>" % b for b in range(256)]:
        vocab[token] = len(vocab)
    for token, _ in sorted(trained["model"]["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in trained["model"]["merges"]]
    return vocab, merges  # type: ignore[return-value]


def _sentencepiece_style(specials: Sequence[str], vocab_size: int) -> Tuple[Dict[str, int], List[Tuple[str, str]]]:
    trainee = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainee.pre_tokenizer = pre_tokenizers.Metaspace()
    return _with_byte_tokens(_train(trainee, vocab_size, specials, byte_level=False), specials)


def _bos_template(tokenizer: Tokenizer, bos: str) -> processors.TemplateProcessing:
    return processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))])


def gemma3() -> Tokenizer:
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab, merges = _sentencepiece_style(specials, 700)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<start_of_turn>", "<end_of_turn>", "<start_of_image>")])
    tokenizer.add_tokens([AddedToken("<unused0>", special=False, normalized=False)])
    tokenizer.post_processor = _bos_template(tokenizer, "<bos>")
    return tokenizer


def _llama2_specials(tokenizer: Tokenizer, specials: Sequence[str]) -> None:
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])


def phi3() -> Tokenizer:
    specials = ["<unk>", "<s>", "</s>"]
    vocab, merges = _sentencepiece_style(specials, 650)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)]
    )
    _llama2_specials(tokenizer, specials)
    tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    turns = ["<|assistant|>", "<|placeholder1|>", "<|system|>", "<|end|>", "<|user|>"]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False, rstrip=True) for t in turns])
    tokenizer.post_processor = _bos_template(tokenizer, "<s>")
    return tokenizer


def mistral() -> Tokenizer:
    specials = ["<unk>", "<s>", "</s>"]
    vocab, merges = _sentencepiece_style(specials, 650)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)]
    )
    _llama2_specials(tokenizer, specials)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("[INST]", "[/INST]", "[TOOL_CALLS]")])
    tokenizer.post_processor = _bos_template(tokenizer, "<s>")
    return tokenizer


def _byte_level(pre_tokenizer: pre_tokenizers.PreTokenizer, specials: Sequence[str], vocab_size: int,
                normalizer: Optional[normalizers.Normalizer] = None, ignore_merges: bool = False) -> Tokenizer:
    trainee = Tokenizer(models.BPE())
    if normalizer is not None:
        trainee.normalizer = normalizer
    trainee.pre_tokenizer = pre_tokenizer
    trained = _train(trainee, vocab_size, specials, byte_level=True)
    trained["model"]["ignore_merges"] = ignore_merges
    tokenizer = Tokenizer.from_str(json.dumps(trained))
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def qwen2() -> Tokenizer:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = _byte_level(
        pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]),
        specials, 600, normalizer=normalizers.NFC())
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|object_ref_start|>", "<tool_call>")])
    return tokenizer


def llama3() -> Tokenizer:
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tokenizer = _byte_level(
        pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]),
        specials, 600, ignore_merges=True)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        _bos_template(tokenizer, "<|begin_of_text|>"),
    ])
    return tokenizer


def smollm2() -> Tokenizer:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>"]
    tokenizer = _byte_level(
        pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]),
        specials, 600)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def nfkc_lowercase() -> Tokenizer:
    specials = ["<unk>", "<s>", "</s>"]
    normalizer = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Lowercase(), normalizers.Replace(Regex(r"\s+"), " "),
    ])
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{P}"), behavior="contiguous"),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
    ])
    trainee = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainee.normalizer = normalizer
    trainee.pre_tokenizer = pre
    vocab, merges = _with_byte_tokens(_train(trainee, 600, specials, byte_level=False), specials)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    _llama2_specials(tokenizer, specials)
    tokenizer.add_tokens([AddedToken("Straße", normalized=True, special=False)])
    return tokenizer


def nfd_prefix() -> Tokenizer:
    tokenizer = _byte_level(
        pre_tokenizers.Sequence([
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="merged_with_previous", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
        ]),
        ["<|endoftext|>"], 500, normalizer=normalizers.Sequence([normalizers.NFD(), normalizers.Strip()]))
    tokenizer.add_special_tokens([AddedToken("<|sep|>", special=True, normalized=False, lstrip=True, rstrip=True)])
    return tokenizer


FAMILIES: Dict[str, Callable[[], Tokenizer]] = {
    "gemma3": gemma3,
    "qwen2": qwen2,
    "llama3": llama3,
    "smollm2": smollm2,
    "phi3": phi3,
    "mistral": mistral,
    "nfkc_lowercase": nfkc_lowercase,
    "nfd_prefix": nfd_prefix,
}


def expected_for(tokenizer: Tokenizer, texts: Sequence[str], seed: int) -> Dict[str, Any]:
    """What `tokenizers` makes of texts and of seeded random id runs."""
    ids = [tokenizer.encode(t).ids for t in texts]
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    byte_ids = [i for i in (tokenizer.token_to_id("<0x%02X>" % b) for b in range(256)) if i is not None]
    rng = random.Random(seed)
    random_ids: List[List[int]] = []
    for _ in range(60):
        pool = byte_ids if byte_ids and rng.random() < 0.4 else range(size)
        random_ids.append([rng.choice(pool) for _ in range(rng.randint(1, 12))])
    return {
        "texts": list(texts),
        "ids": ids,
        "ids_plain": [tokenizer.encode(t, add_special_tokens=False).ids for t in texts],
        "decoded": [tokenizer.decode(i, skip_special_tokens=True) for i in ids],
        "decoded_special": [tokenizer.decode(i, skip_special_tokens=False) for i in ids],
        "random_ids": random_ids,
        "random_decoded": [tokenizer.decode(i, skip_special_tokens=True) for i in random_ids],
        "random_decoded_special": [tokenizer.decode(i, skip_special_tokens=False) for i in random_ids],
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes the files into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    expected: Dict[str, Any] = {}
    for seed, (name, make) in enumerate(FAMILIES.items()):
        tokenizer = make()
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        tokenizer.save(os.path.join(folder, "tokenizer.json"))
        # What the C++ side reads is the saved file: the expectations come from it, read back.
        saved = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        specials = [t.content for t in saved.get_added_tokens_decoder().values()]
        expected[name] = expected_for(saved, _texts(specials, 300, seed), seed)
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
