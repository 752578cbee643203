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
from edgeshare.models import hf_tiny, tiny_tokenizer

MAX_SEQ_LEN = 160
NEW_TOKENS = 24
INIT_STD = 0.2
PROMPT = "Grüße aus Köln, 東京 and 🙂: once upon a time"

MESSAGES = [
    {"role": "user", "content": "Hallo! Wie geht's?"},
    {"role": "assistant", "content": "Gut, danke. 🙂"},
    {"role": "user", "content": "東京について教えて"},
]


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
        files = hf_tiny.save_tiny_lora("llama", tmp, initializer_range=INIT_STD, vocab_size=tiny_tokenizer.VOCAB)
        model_dir = files.model_dir
        tiny_tokenizer.save_tokenizer(model_dir, MAX_SEQ_LEN)
        hf_tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        prompt_ids = hf_tok(PROMPT)["input_ids"]
        # The end tokens: <|im_end|> and a token the bare model makes greedily (see the docstring).
        free = transformers_generate(model_dir, None, prompt_ids, NEW_TOKENS, min_new_tokens=NEW_TOKENS)
        end = next(t for i, t in enumerate(free) if i >= 4 and t not in free[:i])
        end_ids = [hf_tok.convert_tokens_to_ids("<|im_end|>"), end]
        with open(os.path.join(model_dir, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump({"eos_token_id": end_ids, "pad_token_id": hf_tok.convert_tokens_to_ids("<|endoftext|>")}, f)

        adapters = files.adapter_dirs
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
        corpus = tiny_tokenizer.CORPUS + tiny_tokenizer.HELD_OUT + ["<|im_start|>user\nHi<|im_end|>\n" + PROMPT]
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
