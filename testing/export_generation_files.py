"""Writes the generation fixture: the tiny Llama with PEFT adapters a and b exported with --hf-model
(a.pte, b.pte, foundation.pte over foundation.ptd, each with "forward_cached"), adapters a and c (a's
structure) exported for swapping (swap/lora.pte over swap/foundation.ptd with swap/a.ptd or
swap/c.ptd), a prompt, and the tokens transformers' generate(do_sample=False) gives for it with each
adapter and the bare model.

The model's weights have std 0.2 (hf_tiny.make_tiny_model): greedy decoding then depends on its
history and on the adapter, so equal tokens mean something.

    export_generation_files --out DIR
    # DIR/a.pte, DIR/b.pte, DIR/foundation.pte, DIR/foundation.ptd, DIR/prompt.npy, DIR/expected.json,
    # DIR/expected.txt (the prompt and the tokens, one "<name> <ids...>" line each, for C++ tests),
    # DIR/swap/{lora.pte,foundation.pte,foundation.ptd,a.ptd,c.ptd}
    # DIR/long/{a,b,foundation}.pte over DIR/long/foundation.ptd (max_seq_len 256)
    # DIR/kv16/{a,foundation}.pte over DIR/kv16/foundation.ptd (a float16 KV cache)
    # DIR/full/{a,foundation}.pte over DIR/full/foundation.ptd (forward_cached returns every position's logits)
    # DIR/batch/{batch.pte,batch.json,batch_tables.ptd,foundation.pte,foundation.ptd}: forward_batch of
    #   4 sequences, a and b in adapter slots 0 and 1, at most 16 rows a step
    # expected.json: {"max_seq_len": 48, "new_tokens": 32, "tokens": {"a": [...], "b": [...],
    #                 "c": [...], "foundation": [...]}}
"""

import argparse
import json
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import peft
import torch
import transformers
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.hf import export_hf_batch, export_hf_lora, export_hf_swappable
from edgeshare.models import hf_tiny

MAX_SEQ_LEN = 48
LONG_SEQ_LEN = 256  # the tiny models' max_position_embeddings
NEW_TOKENS = 32
INIT_STD = 0.2
PROMPT_LEN = 6
BATCH_SLOTS = 4
BATCH_ROWS = 16


def transformers_tokens(model_dir: str, adapter_dir: Optional[str], prompt: np.ndarray, n: int) -> List[int]:
    """Greedy tokens of transformers (+ PEFT) from the saved directories, as a user runs them."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    if adapter_dir is not None:
        model = peft.PeftModel.from_pretrained(model, adapter_dir).eval()
    ids = torch.from_numpy(prompt).view(1, -1)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, min_new_tokens=n
        )
    return out[0, ids.shape[1] :].tolist()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes the files into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        files = hf_tiny.save_tiny_lora("llama", tmp, initializer_range=INIT_STD)
        export_hf_lora(files.model_dir, files.adapter_dirs, args.out, MAX_SEQ_LEN, XnnpackPartitioner())
        # The same programs at the longest bound the model allows, and a's with a half-precision cache
        # and with every position's logits.
        export_hf_lora(
            files.model_dir, files.adapter_dirs, os.path.join(args.out, "long"), LONG_SEQ_LEN, XnnpackPartitioner()
        )
        variants: Dict[str, Dict[str, Any]] = {"kv16": {"kv_dtype": torch.float16}, "full": {"full_logits": True}}
        for folder, options in variants.items():
            export_hf_lora(
                files.model_dir,
                {"a": files.adapter_dirs["a"]},
                os.path.join(args.out, folder),
                MAX_SEQ_LEN,
                XnnpackPartitioner(),
                **options,
            )
        files.adapter_dirs["c"] = hf_tiny.save_twin_adapter("llama", tmp, "c", initializer_range=INIT_STD)
        swappable = {name: files.adapter_dirs[name] for name in ("a", "c")}
        export_hf_swappable(
            files.model_dir, swappable, os.path.join(args.out, "swap"), MAX_SEQ_LEN, XnnpackPartitioner()
        )
        # a and b in adapter slots 0 and 1 of a batch of 4 sequences.
        export_hf_batch(
            files.model_dir,
            {name: files.adapter_dirs[name] for name in ("a", "b")},
            os.path.join(args.out, "batch"),
            slots=BATCH_SLOTS,
            max_seq_len=MAX_SEQ_LEN,
            max_rows=BATCH_ROWS,
            partitioner=XnnpackPartitioner(),
        )
        prompt = np.random.default_rng(1).integers(0, hf_tiny.VOCAB, size=(PROMPT_LEN,), dtype=np.int64)
        np.save(os.path.join(args.out, "prompt.npy"), prompt)
        tokens: Dict[str, List[int]] = {"foundation": transformers_tokens(files.model_dir, None, prompt, NEW_TOKENS)}
        for name, path in sorted(files.adapter_dirs.items()):
            tokens[name] = transformers_tokens(files.model_dir, path, prompt, NEW_TOKENS)
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump({"max_seq_len": MAX_SEQ_LEN, "new_tokens": NEW_TOKENS, "tokens": tokens}, f)
    # The same for C++ tests, one "<name> <ids...>" line each: prompt, a, b, c, foundation.
    with open(os.path.join(args.out, "expected.txt"), "w") as f:
        for name, ids in [("prompt", prompt.tolist())] + sorted(tokens.items()):
            f.write(" ".join([name] + [str(i) for i in ids]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
