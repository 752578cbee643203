"""Writes the text fixture: a tiny Llama whose model directory has a byte-level BPE tokenizer trained
here (tokenizers, on a small multilingual corpus; nothing from the hub), a ChatML chat template and a
generation_config.json naming its end tokens, exported with PEFT adapters a and b, plus what
transformers makes of it.

    export_text_files --out DIR
    # DIR/{a,b,foundation}.pte over DIR/foundation.ptd, and beside them the model's tokenizer.json,
    # tokenizer_config.json, special_tokens_map.json and generation_config.json (as export_lora copies them)
    # DIR/expected.json: {"prompt": str, "prompt_ids": [...], "new_tokens": N, "end_token_ids": [...],
    #   "generated": {"a" | "b" | "foundation": {"tokens": [...], "text": str}},
    #   "chat": {"messages": [...], "text": str, "ids": [...]}, "corpus": [str, ...],
    #   "corpus_ids": [[...], ...], "corpus_decoded": [str, ...] (decode skipping special tokens)}

The weights are random (std 0.2), so the model never picks <|im_end|>: generation_config.json's
eos_token_id lists <|im_end|> and the fifth token the bare model generates greedily for the prompt, so
that transformers' generate (which reads generation_config.json from the model directory) stops at it.
"""

import argparse
import copy
import json
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Sequence

import peft
import torch
import transformers
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.hf import export_hf_lora
from edgeshare.exir.tokenizer_files import read_tokenizer_files, write_tokenizer_files
from edgeshare.models import hf_tiny
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 384
MAX_SEQ_LEN = 160
NEW_TOKENS = 24
INIT_STD = 0.2
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PROMPT = "Grüße aus Köln, 東京 and 🙂: once upon a time"

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

MESSAGES = [
    {"role": "user", "content": "Hallo! Wie geht's?"},
    {"role": "assistant", "content": "Gut, danke. 🙂"},
    {"role": "user", "content": "東京について教えて"},
]


def train_tokenizer(model_dir: str) -> Tokenizer:
    """A byte-level BPE (GPT-2 style: byte-level pre-tokenizer with its regex, merges, added
    special tokens) of exactly VOCAB tokens, written to model_dir with its config files."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    assert tokenizer.get_vocab_size() == VOCAB, tokenizer.get_vocab_size()
    tokenizer.save(os.path.join(model_dir, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_SEQ_LEN,
    }
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    with open(os.path.join(model_dir, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    return tokenizer


def save_model(out_dir: str) -> Dict[str, str]:
    """The tiny Llama at VOCAB tokens and its adapters a and b (hf_tiny's specs); returns the dirs."""
    config = hf_tiny.tiny_config("llama")
    config.vocab_size = VOCAB
    config.initializer_range = INIT_STD
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    g = torch.Generator().manual_seed(1000)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=g) * 0.05)
    dirs = {"model": os.path.join(out_dir, "model")}
    model.save_pretrained(dirs["model"])
    for i, (name, spec) in enumerate(sorted(hf_tiny.FAMILIES["llama"].adapters.items())):
        dirs[name] = os.path.join(out_dir, name)
        hf_tiny.save_peft_adapter(copy.deepcopy(model), dirs[name], spec.target_modules, spec.rank, spec.alpha, 1 + i)
    return dirs


def transformers_generate(model_dir: str, adapter_dir: Optional[str], ids: List[int], n: int, **kwargs: Any) -> List[int]:
    """transformers' generate(do_sample=False) from the saved directories (generation_config.json read)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    if adapter_dir is not None:
        model = peft.PeftModel.from_pretrained(model, adapter_dir).eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n, **kwargs)
    return out[0, x.shape[1]:].tolist()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes the files into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = save_model(tmp)
        model_dir = dirs["model"]
        tokenizer = train_tokenizer(model_dir)
        hf_tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        prompt_ids = hf_tok(PROMPT)["input_ids"]
        # The end tokens: <|im_end|> and a token the bare model makes greedily (see the docstring).
        free = transformers_generate(model_dir, None, prompt_ids, NEW_TOKENS, min_new_tokens=NEW_TOKENS)
        end = next(t for i, t in enumerate(free) if i >= 4 and t not in free[:i])
        end_ids = [tokenizer.token_to_id("<|im_end|>"), end]
        with open(os.path.join(model_dir, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump({"eos_token_id": end_ids, "pad_token_id": tokenizer.token_to_id("<|endoftext|>")}, f)

        adapters = {name: path for name, path in dirs.items() if name != "model"}
        text_files = read_tokenizer_files(model_dir)
        export_hf_lora(model_dir, adapters, args.out, MAX_SEQ_LEN, XnnpackPartitioner())
        write_tokenizer_files(text_files, args.out)

        generated: Dict[str, Dict[str, Any]] = {}
        for name, adapter_dir in [("foundation", None)] + sorted(adapters.items()):
            tokens = transformers_generate(model_dir, adapter_dir, prompt_ids, NEW_TOKENS)
            generated[name] = {"tokens": tokens, "text": hf_tok.decode(tokens, skip_special_tokens=True)}
        chat_text = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
        chat_ids = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
        if isinstance(chat_ids, Dict) or hasattr(chat_ids, "keys"):
            chat_ids = chat_ids["input_ids"]
        corpus = CORPUS + HELD_OUT + ["<|im_start|>user\nHi<|im_end|>\n" + PROMPT]
        expected = {
            "prompt": PROMPT,
            "prompt_ids": prompt_ids,
            "new_tokens": NEW_TOKENS,
            "end_token_ids": end_ids,
            "generated": generated,
            "chat": {"messages": MESSAGES, "text": chat_text, "ids": list(chat_ids)},
            "corpus": corpus,
            "corpus_ids": [hf_tok(text)["input_ids"] for text in corpus],
            "corpus_decoded": [hf_tok.decode(hf_tok(text)["input_ids"], skip_special_tokens=True) for text in corpus],
        }
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
