"""Writes a tiny Hugging Face causal LM and two PEFT LoRA adapters, as save_pretrained does.

    ./bazelw run //models:save_tiny_lora -- --family llama --out hf_demo
    # hf_demo/model (config.json + safetensors); PEFT adapter dirs hf_demo/a and hf_demo/b (other
    # target modules and ranks) and hf_demo/c (a's structure, other weights: swappable with a)
    ./bazelw run //models:save_tiny_lora -- --family llama --tokenizer --out hf_demo
    # the same with a byte-level BPE tokenizer trained here, a chat template and an end token in
    # hf_demo/model (tokenizer.json, tokenizer_config.json, generation_config.json); vocabulary 384

For trying `export_lora --hf-model` without downloading anything: random seeded weights, from a config.
"""

import argparse
import os
import sys
from typing import List, Optional

from edgeshare.models import tiny_tokenizer
from edgeshare.models.hf_tiny import FAMILIES, save_tiny_lora, save_twin_adapter


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="llama", choices=sorted(FAMILIES))
    parser.add_argument("--out", required=True, help="directory for model/, a/ and b/")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", action="store_true", help="add a tokenizer trained here (vocabulary 384)")
    args = parser.parse_args(argv)
    out = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.out)
    vocab = tiny_tokenizer.VOCAB if args.tokenizer else None
    # A wider init than transformers' default, so greedy text is not one repeated token.
    files = save_tiny_lora(args.family, out, seed=args.seed, initializer_range=0.2, vocab_size=vocab)
    files.adapter_dirs["c"] = save_twin_adapter(args.family, out, "c", args.seed, initializer_range=0.2, vocab_size=vocab)
    if args.tokenizer:
        tiny_tokenizer.save_tokenizer(files.model_dir)
    print(f"model: {files.model_dir}")
    for name, path in sorted(files.adapter_dirs.items()):
        print(f"adapter {name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
