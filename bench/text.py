"""What text costs while decoding: tools/generate's decode tokens/s with sampling (temperature, top-k,
top-p, repetition penalty, a seed) and the text streamed to a pipe, against greedy ids only, on the
tiny-LLM case's model (bench/_llm_model.py: vocabulary 32000, so sampling sorts and weighs a real
vocabulary) with the tiny byte-level BPE tokenizer (models/tiny_tokenizer.py; ids past its 384 tokens
decode to nothing), and the same program beside the tiny SentencePiece tokenizer.model instead
(models/tiny_sentencepiece.py; ids past its 560 pieces decode to nothing). Fresh processes,
interleaved, one thread; the JSON end-token file is left out so every run makes every token.

    ./bazelw run -c opt //bench:text -- [--repeats 5] [--new-tokens 64] [--json FILE]
"""

import argparse
import json
import os
import sys
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.bench._llm_model import LlmSpec, save_llm
from edgeshare.bench._runner import BenchError, run_process, tool_path
from edgeshare.bench._stats import median, ratio
from edgeshare.exir.hf import export_hf_lora
from edgeshare.exir.tokenizer_files import read_tokenizer_files, write_tokenizer_files
from edgeshare.models import tiny_sentencepiece, tiny_tokenizer

PROMPT = "Once upon a time there was a little model that wanted to talk about Köln and 東京."
SAMPLING = ["--temperature", "0.8", "--top-k", "50", "--top-p", "0.95", "--repetition-penalty", "1.1"]


def _generate(program: str, data: str, flags: Sequence[str], out_dir: str) -> Dict[str, Any]:
    out = os.path.join(out_dir, "generate.json")
    proc = run_process([tool_path("generate"), "--program", program, "--data", data, "--json", out, *flags])
    if proc.returncode != 0:
        raise BenchError(f"tools/generate failed ({proc.returncode}): {proc.stderr.strip()}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the case and prints the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each, interleaved")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    spec = LlmSpec(adapters=1)
    with tempfile.TemporaryDirectory(prefix="bench_text_") as tmp:
        files = save_llm(spec, tmp)
        tiny_tokenizer.save_tokenizer(files.model_dir)
        os.remove(os.path.join(files.model_dir, "generation_config.json"))
        out = os.path.join(tmp, "out")
        text = read_tokenizer_files(files.model_dir)
        export_hf_lora(files.model_dir, files.adapter_dirs, out, spec.max_seq_len, XnnpackPartitioner())
        write_tokenizer_files(text, out)
        program, data = os.path.join(out, "adapter1.pte"), os.path.join(out, "foundation.ptd")
        # The same program in a folder whose tokenizer is a tokenizer.model (tools/generate takes the
        # tokenizer beside the program).
        out_sp = os.path.join(tmp, "out_sentencepiece")
        os.makedirs(out_sp)
        tiny_sentencepiece.save_tokenizer(out_sp)
        os.remove(os.path.join(out_sp, "generation_config.json"))
        program_sp = os.path.join(out_sp, "adapter1.pte")
        os.symlink(program, program_sp)
        prompt_npy = os.path.join(tmp, "prompt.npy")
        from tokenizers import Tokenizer  # noqa: PLC0415

        ids = Tokenizer.from_file(os.path.join(out, "tokenizer.json")).encode(PROMPT).ids
        np.save(prompt_npy, np.asarray(ids, dtype=np.int64))
        count = ["--max-new-tokens", str(args.new_tokens)]
        cases = {
            "greedy ids": (program, ["--prompt-ids", prompt_npy, "--ids"]),
            "sampled text, streamed": (program, ["--prompt", PROMPT, *SAMPLING]),
            "same, SentencePiece": (program_sp, ["--prompt", PROMPT, *SAMPLING]),
        }
        runs: Dict[str, List[float]] = {name: [] for name in cases}
        for r in range(args.repeats):
            for name, (path, flags) in cases.items():
                seed = [] if name == "greedy ids" else ["--seed", str(r)]
                got = _generate(path, data, [*flags, *count, *seed], tmp)
                if len(got["tokens"]) != args.new_tokens:
                    raise BenchError(f"a run stopped early ({name})")
                runs[name].append(got["decode_tokens_per_s"])
    figures = {name: median(values) for name, values in runs.items()}
    figures["ratio"] = ratio(figures["sampled text, streamed"], figures["greedy ids"])
    figures["ratio_sentencepiece"] = ratio(figures["same, SentencePiece"], figures["greedy ids"])
    print(f"{spec.describe()}; prompt {len(ids)} tokens, {args.new_tokens} new, {args.repeats} interleaved runs")
    for name in runs:
        print(f"  {name:<24} decode {figures[name]:8.1f} tokens/s (median; runs {', '.join(f'{v:.1f}' for v in runs[name])})")
    print(f"  sampled/greedy          {figures['ratio']:.3f} (BPE), {figures['ratio_sentencepiece']:.3f} (SentencePiece)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"figures": figures, "runs": runs}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
