"""Two LoRA adapter programs over one foundation, run from Python in one process.

    ./bazelw run //tools:export_lora
    ./bazelw run //examples/python:two_adapters -- --data edgeshare_out/foundation.ptd \\
        --program edgeshare_out/lora_a.pte --program edgeshare_out/lora_b.pte [--inputs x.npy]

Loads both programs over the one foundation.ptd (opened and mapped once), runs each program's
`--method` (forward) on the inputs (seeded values in [-1, 1) when none are given), prints each
output's shape and sum, and what the weights cache shared: the second program packs none of the
foundation's weights. `--outputs DIR` saves DIR/<program>.<method>.output<i>.npy.
"""

import argparse
import os
import sys
from typing import List, Optional, Sequence

import numpy as np
from edgeshare.extension.python import DataFile, EdgeshareError, Method, NpyFileError, Program, load_npy, weights_cache_stats


def _user_path(path: str) -> str:
    # Under `bazel run` the script starts in its runfiles: relative paths mean the user's directory.
    return os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), path)


def _inputs(method: Method, given: Sequence[str]) -> List[np.ndarray]:
    if given:
        return [load_npy(_user_path(path)) for path in given]
    rng = np.random.default_rng(0)
    arrays = []
    for i, spec in enumerate(method.inputs):
        if spec is None or spec.dtype != "float32":
            raise SystemExit(f"input {i} of {method!r} is not float32: give it with --inputs")
        arrays.append(rng.uniform(-1.0, 1.0, spec.shape).astype(np.float32))
    return arrays


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", required=True, help="a .ptd data file (repeatable)")
    parser.add_argument("--program", action="append", required=True, help="a .pte program (repeatable)")
    parser.add_argument("--method", default="forward")
    parser.add_argument("--inputs", nargs="*", default=[], help=".npy files, one per input")
    parser.add_argument("--outputs", help="write DIR/<program>.<method>.output<i>.npy")
    args = parser.parse_args(argv)
    try:
        data = [DataFile.open(_user_path(path)) for path in args.data]
        programs = [Program.load(_user_path(path), data) for path in args.program]
        for program in programs:
            method = program.method(args.method)
            outputs = method.execute(*_inputs(method, args.inputs))
            name = os.path.splitext(os.path.basename(program.path))[0]
            for i, output in enumerate(outputs):
                print(f"{name}.{method.name} output {i}: {output.dtype} {list(output.shape)} sum={output.sum():.6g}")
                if args.outputs:
                    os.makedirs(_user_path(args.outputs), exist_ok=True)
                    np.save(os.path.join(_user_path(args.outputs), f"{name}.{method.name}.output{i}.npy"), output)
    except (EdgeshareError, NpyFileError) as error:
        print(f"two_adapters: error: {error}", file=sys.stderr)
        return 1
    stats = weights_cache_stats()
    print(
        f"weights cache: {stats['packed_entries']} packed entries, {stats['packs']} packs, "
        f"{stats['cache_hits']} hits, {stats['bytes_fetched']} bytes fetched, "
        f"{stats['data_files_open']} data file(s) open"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
