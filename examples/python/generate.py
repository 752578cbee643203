"""Greedy generation from Python with two adapters over one foundation, token ids in and out.

    ./bazelw run //examples/python:generate -- --data OUT/foundation.ptd \\
        --program OUT/a.pte --program OUT/b.pte --prompt-ids prompt.npy --max-new-tokens 32

Each program's "forward_cached" (its KV cache) generates from the same prompt; the foundation is
mapped, fetched and packed once for all of them.
"""

import argparse
import os
import sys
from typing import Dict, List, Optional

import numpy as np
from edgeshare.extension.python import DataFile, EdgeshareError, Program, load_npy


def generate_all(data: str, programs: List[str], prompt: np.ndarray, max_new_tokens: int) -> Dict[str, List[int]]:
    """Generates with each program's forward_cached; returns program file stem -> new token ids."""
    foundation = DataFile.open(data)
    out: Dict[str, List[int]] = {}
    for path in programs:
        program = Program.load(path, [foundation])
        result = program.method("forward_cached").generate(prompt, max_new_tokens)
        out[os.path.splitext(os.path.basename(path))[0]] = list(result.tokens)
        print(
            f"{path}: {' '.join(map(str, result.tokens))}\n"
            f"  prefill {result.prefill_ms:.2f} ms, decode {result.decode_tokens_per_s:.1f} tokens/s"
        )
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the foundation .ptd")
    parser.add_argument("--program", action="append", required=True, help="a .pte; repeat")
    parser.add_argument("--prompt-ids", required=True, help="int64 .npy of prompt token ids")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    here = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    try:
        prompt = load_npy(os.path.join(here, args.prompt_ids)).reshape(-1)
        programs = [os.path.join(here, p) for p in args.program]
        generate_all(os.path.join(here, args.data), programs, prompt, args.max_new_tokens)
    except (EdgeshareError, ValueError, TypeError) as e:
        # One line, no traceback: every message names the file or value at fault.
        print(f"generate: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
