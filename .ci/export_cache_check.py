#!/usr/bin/env python3
"""The caching promise of tools/defs.bzl's export rules, checked with real Bazel builds.

In a scratch workspace that embeds edgeshare (as examples/embed does) with the tiny Llama's model
and adapters a and b as source folders:

1. a build into a fresh output base and disk cache runs the three export actions (the foundation,
   a, b);
2. after a's weights change, the next build runs exactly one export action: a's;
3. a clean build into a second output base with the same disk cache runs none (every export is a
   cache hit).

Actions are read from --execution_log_json_file. Run from the repository root:

    python3 .ci/export_cache_check.py

Needs the network nowhere but where bazelw does; takes a few minutes (two output bases make the
Python environment twice).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAZELW = os.path.join(ROOT, "bazelw")

WORKSPACE = """workspace(name = "export_cache_check")

local_repository(
    name = "edgeshare",
    path = "{root}",
)

load("@edgeshare//:repositories.bzl", "edgeshare_dependencies")

edgeshare_dependencies()

register_toolchains("@edgeshare_python//:python_toolchain")
"""

BUILD = """load("@edgeshare//tools:defs.bzl", "edgeshare_adapters", "edgeshare_foundation")

edgeshare_foundation(
    name = "foundation",
    hf_model = glob(["model/*"]),
    max_seq_len = 16,
)

edgeshare_adapters(
    name = "programs",
    adapters = {
        "a": glob(["a/*"]),
        "b": glob(["b/*"]),
    },
    foundation = ":foundation",
)
"""


def _bazel(workspace: str, output_base: str, *args: str) -> None:
    subprocess.run([BAZELW, f"--output_base={output_base}", *args], cwd=workspace, check=True)


def _spawns(log: str) -> List[Dict]:
    """The spawns of an execution log: JSON objects one after another."""
    with open(log, encoding="utf-8") as f:
        text = f.read()
    decoder, spawns, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return spawns
        spawn, at = decoder.raw_decode(text, at)
        spawns.append(spawn)


def _exports(log: str) -> Dict[str, List[str]]:
    """The export actions of a build: "ran" and "cached" (disk cache hits), each by what it exported."""
    found: Dict[str, List[str]] = {"ran": [], "cached": []}
    for spawn in _spawns(log):
        args = spawn.get("commandArgs", [])
        if "--foundation-index" in args:
            what = "foundation"
        elif "--over-foundation" in args:
            what = args[args.index("--adapter") + 1].split("=")[0]
        else:
            continue
        found["cached" if spawn.get("remoteCacheHit") else "ran"].append(what)
    return found


def _check(label: str, got: Dict[str, List[str]], ran: List[str], cached: List[str]) -> None:
    ok = sorted(got["ran"]) == sorted(ran) and sorted(got["cached"]) == sorted(cached)
    print(f"export_cache_check: {label}: ran {sorted(got['ran'])}, from the disk cache {sorted(got['cached'])}")
    if not ok:
        print(f"export_cache_check: FAILED: expected ran {sorted(ran)}, from the disk cache {sorted(cached)}")
        sys.exit(1)


def main() -> int:
    scratch = tempfile.mkdtemp(prefix="export_cache_check.")
    workspace, cache = os.path.join(scratch, "ws"), os.path.join(scratch, "disk_cache")
    bases = [os.path.join(scratch, "base1"), os.path.join(scratch, "base2")]
    try:
        os.makedirs(workspace)
        with open(os.path.join(workspace, "WORKSPACE"), "w", encoding="utf-8") as f:
            f.write(WORKSPACE.format(root=ROOT))
        with open(os.path.join(workspace, "BUILD.bazel"), "w", encoding="utf-8") as f:
            f.write(BUILD)
        shutil.copy(os.path.join(ROOT, "examples", "embed", ".bazelrc"), workspace)
        cache_flags = [f"--disk_cache={cache}"]

        # The model and adapters as source folders of this workspace (edgeshare's tiny Llama).
        _bazel(workspace, bases[0], "build", *cache_flags, "@edgeshare//models:tiny_llama_lora_files")
        made = os.path.join(workspace, "bazel-bin", "external", "edgeshare", "models", "tiny_llama")
        for name in ("model", "a", "b", "c"):
            shutil.copytree(os.path.join(made, name), os.path.join(workspace, name), copy_function=shutil.copyfile)

        def build(base: str, log_name: str) -> Dict[str, List[str]]:
            log = os.path.join(scratch, log_name)
            _bazel(workspace, base, "build", *cache_flags, f"--execution_log_json_file={log}", "//:all")
            return _exports(log)

        _check("first build", build(bases[0], "first.json"), ["a", "b", "foundation"], [])
        # c has a's structure and other weights: a changes, b and the foundation do not.
        shutil.copyfile(
            os.path.join(workspace, "c", "adapter_model.safetensors"),
            os.path.join(workspace, "a", "adapter_model.safetensors"),
        )
        _check("adapter a changed", build(bases[0], "changed.json"), ["a"], [])
        _check("second output base", build(bases[1], "clean.json"), [], ["a", "b", "foundation"])
        print("export_cache_check: passed")
        return 0
    finally:
        for base in bases:
            if os.path.isdir(base):
                subprocess.run([BAZELW, f"--output_base={base}", "shutdown"], cwd=workspace, check=False)
        subprocess.run(["chmod", "-R", "u+w", scratch], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
