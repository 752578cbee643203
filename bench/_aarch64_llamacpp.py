"""llama.cpp's llama-bench for aarch64 Linux, cross-built from the llama.cpp source that the bench's
llama-cpp-python vendors, once per kernel variant, for bench/aarch64 to run under qemu-user.

The source is the llama-cpp-python sdist that the llama.cpp peer venv downloaded
(bench/_llm_peer_llamacpp.py), unpacked under ~/.cache/edgeshare-bench/llama-aarch64-VERSION/; each
variant is configured Release with Debian's aarch64 cross compiler, GGML_NATIVE off and
GGML_CPU_ARM_ARCH set (llama.cpp's own switch for the ARM feature level it compiles for; its Q4_0
repacking for dot product and i8mm follows it), no OpenMP (one thread is measured), static
libraries, nothing fetched; built at the lowest CPU priority. A built binary is reused; a failed build
leaves none and names its log.
"""

import os
import subprocess
from typing import IO, Dict, Sequence

from edgeshare.bench._llm_peer_llamacpp import VERSION
from edgeshare.bench._peer import cache_root
from edgeshare.bench._runner import BenchError
from edgeshare.bench._serve_servers import vendored_llamacpp

__all__ = ["VARIANTS", "llama_bench_aarch64"]

# Variant name -> GGML_CPU_ARM_ARCH: ARMv8.0 NEON only; ARMv8.2 with the dot product (SDOT);
# ARMv8.6 with the dot product and int8 matrix multiply (SMMLA).
VARIANTS: Dict[str, str] = {
    "neon": "armv8-a",
    "dotprod": "armv8.2-a+dotprod",
    "i8mm": "armv8.6-a+dotprod+i8mm",
}

_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DCMAKE_SYSTEM_NAME=Linux",
    "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
    "-DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc",
    "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++",
    "-DGGML_NATIVE=OFF",
    "-DGGML_OPENMP=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)


def _step(args: Sequence[str], log: IO[str], what: str, log_path: str) -> None:
    log.write("$ " + " ".join(args) + "\n")
    log.flush()
    proc = subprocess.run(["nice", "-n", "19", *args], stdout=log, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise BenchError(f"the aarch64 llama-bench {what} failed (status {proc.returncode}); see {log_path}")


def llama_bench_aarch64(variant: str, jobs: int = 2, say=lambda line: None) -> str:
    """The path of llama-bench built for aarch64 at `variant` (a key of VARIANTS), built on first use.

    Raises:
      BenchError: an unknown variant, no cross compiler, the sdist missing (run `bench/llm --peer
        llamacpp` once to make the peer venv) or a failed build.
    """
    if variant not in VARIANTS:
        raise BenchError(f"no llama.cpp aarch64 variant '{variant}' (there are {', '.join(VARIANTS)})")
    root = os.path.join(cache_root(), f"llama-aarch64-{VERSION}")
    build = os.path.join(root, f"build-{variant}")
    binary = os.path.join(build, "bin", "llama-bench")
    if os.path.exists(binary):
        return binary
    if subprocess.run(["which", "aarch64-linux-gnu-g++"], capture_output=True, check=False).returncode:
        raise BenchError("aarch64-linux-gnu-g++ is missing: run ./bazelw build --config=aarch64 once (it installs it)")
    source = vendored_llamacpp(root)
    log_path = os.path.join(root, f"build-{variant}.log")
    say(f"[aarch64] building llama-bench {VERSION} for aarch64 {variant} with cmake (nice, -j {jobs}; log {log_path})")
    flags = [*_CMAKE_FLAGS, f"-DGGML_CPU_ARM_ARCH={VARIANTS[variant]}"]
    with open(log_path, "a", encoding="utf-8") as log:
        _step(["cmake", "-S", source, "-B", build, *flags], log, "configure", log_path)
        _step(["cmake", "--build", build, "--target", "llama-bench", "-j", str(jobs)], log, "build", log_path)
    if not os.path.exists(binary):
        raise BenchError(f"the aarch64 build wrote no {binary}; see {log_path}")
    return binary
