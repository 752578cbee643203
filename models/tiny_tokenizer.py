"""A small byte-level BPE tokenizer trained here (Hugging Face `tokenizers`, nothing from the hub) for
the tiny models, with a ChatML chat template and the end token in generation_config.json: what a
model directory has on disk after `save_pretrained` of a model and its tokenizer.

    from edgeshare.models import hf_tiny, tiny_tokenizer
    files = hf_tiny.save_tiny_lora("llama", "/tmp/t", vocab_size=tiny_tokenizer.VOCAB)
    tiny_tokenizer.save_tokenizer(files.model_dir)   # tokenizer.json, tokenizer_config.json, ...
"""

import json
import os
from typing import TYPE_CHECKING, List, Sequence

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "CORPUS",
    "HELD_OUT",
    "SPECIAL_TOKENS",
    "VOCAB",
    "save_tokenizer",
    "train_byte_level_bpe",
]

# 256 bytes, 3 special tokens and 125 merges: a model needs this vocabulary (make_tiny_model(vocab_size=...)).
VOCAB = 384
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CORPUS = [
    "Once upon a time there was a little model that wanted to talk.",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "Grüße aus Köln! Der Bär läuft über die Straße.",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "¿Dónde está la biblioteca? Mañana será otro día.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "東京は日本の首都です。今日はいい天気ですね。",
    "我们一起学习中文，你好世界！",
    "안녕하세요, 만나서 반갑습니다.",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Emoji: 🙂 🚀 👩‍💻 🇩🇪 and tabs\tand  double  spaces\nnew lines.",
    "def add(a, b):\n    return a + b  # code too",
]

# Not seen in training: scripts and sequences the merges do not cover, for the C++ tokenizer's test.
HELD_OUT = [
    "Καλημέρα κόσμε! Ελληνικά γράμματα.",
    "שלום עולם, מה שלומך?",
    "Tiếng Việt có dấu: Xin chào thế giới.",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Family: 👨‍👩‍👧‍👦, flags 🇯🇵🇫🇷, skin tones 👋🏽.",
    "Math ∀x ∈ ℝ: x² ≥ 0; money €5 ¥300 £2; quotes «…» „…“",
    "Mixed    whitespace\r\n\n\t end  ",
    "I'm sure they'll say it's 2024's best, don't you think? I'VE SEEN IT.",
    "<|im_start|>assistant\nok<|im_end|><|endoftext|>trailing",
    "",
]

# ChatML as SmolLM2 and Qwen2 write it: block tags on their own lines (trim_blocks / lstrip_blocks
# matter), a default system message, and the assistant's turn opened by add_generation_prompt.
CHAT_TEMPLATE = """{% for message in messages %}
{% if loop.first and messages[0]['role'] != 'system' %}
{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}
{%- endfor %}
{% if add_generation_prompt %}
{{ '<|im_start|>assistant\\n' }}
{%- endif %}"""


def train_byte_level_bpe(texts: Sequence[str], vocab: int, special_tokens: Sequence[str] = ()) -> "Tokenizer":
    """A GPT-2 style tokenizer (byte-level pre-tokenizer with its regex, BPE merges) trained on texts.

    Args:
      texts: the training text, one string a document.
      vocab: the vocabulary size to reach (the 256 bytes and the special tokens count in it).
      special_tokens: added tokens, given the first ids.

    Returns:
      The tokenizer; it has fewer than `vocab` ids when the texts have too few pairs to merge.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def save_tokenizer(model_dir: str, max_length: int = 256) -> List[str]:
    """Trains the tokenizer (GPT-2 style: byte-level pre-tokenizer with its regex, merges, added
    special tokens; exactly VOCAB tokens) and writes it into model_dir with tokenizer_config.json
    (ChatML template, eos <|im_end|>), special_tokens_map.json and generation_config.json (eos_token_id
    <|im_end|>).

    Args:
      model_dir: an existing model directory.
      max_length: the model's longest sequence (tokenizer_config's model_max_length).

    Returns:
      The files written.
    """
    tokenizer = train_byte_level_bpe(CORPUS * 4, VOCAB, SPECIAL_TOKENS)
    assert tokenizer.get_vocab_size() == VOCAB, tokenizer.get_vocab_size()
    paths = [os.path.join(model_dir, name) for name in (
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")]
    tokenizer.save(paths[0])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
    }
    with open(paths[1], "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    with open(paths[2], "w", encoding="utf-8") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    with open(paths[3], "w", encoding="utf-8") as f:
        end = tokenizer.token_to_id("<|im_end|>")
        json.dump({"eos_token_id": [end], "pad_token_id": tokenizer.token_to_id("<|endoftext|>")}, f)
    return paths
