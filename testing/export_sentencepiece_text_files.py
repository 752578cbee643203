"""Writes the SentencePiece text fixture: a tiny Llama whose model directory has tiny_sentencepiece's
tokenizer.model (trained here; no tokenizer.json) and Llama 2's tokenizer_config.json, exported with
PEFT adapters a and b, and the text transformers' greedy generate gives for a prompt.

    export_sentencepiece_text_files --out DIR
    # DIR/{a,b,foundation}.pte over DIR/foundation.ptd, beside them tokenizer.model,
    # tokenizer_config.json, special_tokens_map.json and generation_config.json (as export_lora copies them)
    # DIR/expected.json: {"prompt": str, "prompt_ids": [...], "new_tokens": N, "end_token_ids": [...],
    #   "generated": {"a" | "b" | "foundation": {"tokens": [...], "text": str}}}

The prompt (leading whitespace, where Hugging Face and the sentencepiece package disagree) is
encoded by transformers' LlamaTokenizer made from the folder (the `tokenizers` pipeline it converts a
tokenizer.model to), and the text is its decode of transformers' greedy tokens (special tokens
skipped): what a transformers user sees. As in the BPE fixture, the random weights never pick </s>,
so generation_config.json's eos_token_id lists </s> and the fifth new token the bare model
generates, that transformers' generate stops at.
"""

import argparse
import json
import os
import tempfile
import warnings
from typing import Any, Dict, Optional, Sequence

import transformers
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.hf import export_hf_lora
from edgeshare.exir.tokenizer_files import read_tokenizer_files, write_tokenizer_files
from edgeshare.models import hf_tiny, tiny_sentencepiece
from edgeshare.testing.export_text_files import INIT_STD, MAX_SEQ_LEN, NEW_TOKENS, PROMPT, transformers_generate

# Two leading spaces: transformers gives "▁▁" (its Metaspace adds no "▁" in front of a space),
# the sentencepiece package "▁▁▁" (its dummy prefix always does).
SP_PROMPT = "  " + PROMPT


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes the files into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        files = hf_tiny.save_tiny_lora("llama", tmp, initializer_range=INIT_STD, vocab_size=tiny_sentencepiece.VOCAB)
        model_dir = files.model_dir
        tiny_sentencepiece.save_tokenizer(model_dir)
        hf_tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        prompt_ids = list(hf_tok(SP_PROMPT)["input_ids"])
        free = transformers_generate(model_dir, None, prompt_ids, NEW_TOKENS, min_new_tokens=NEW_TOKENS)
        end = next(t for i, t in enumerate(free) if i >= 4 and t not in free[:i])
        end_ids = [hf_tok.eos_token_id, end]
        with open(os.path.join(model_dir, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token_id": hf_tok.bos_token_id, "eos_token_id": end_ids}, f)

        text_files = read_tokenizer_files(model_dir)
        export_hf_lora(model_dir, files.adapter_dirs, args.out, MAX_SEQ_LEN, XnnpackPartitioner())
        write_tokenizer_files(text_files, args.out)
        generated: Dict[str, Dict[str, Any]] = {}
        for name, adapter_dir in [("foundation", None)] + sorted(files.adapter_dirs.items()):
            tokens = transformers_generate(model_dir, adapter_dir, prompt_ids, NEW_TOKENS)
            generated[name] = {"tokens": tokens, "text": hf_tok.decode(tokens, skip_special_tokens=True)}
    expected = {
        "prompt": SP_PROMPT,
        "prompt_ids": prompt_ids,
        "new_tokens": NEW_TOKENS,
        "end_token_ids": end_ids,
        "generated": generated,
    }
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
