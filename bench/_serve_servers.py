"""bench/serve's two servers as processes: edgeshare-serve (//tools:serve) on a batch export, and
llama.cpp's own llama-server built from the llama.cpp source that the bench's llama-cpp-python
comes from.

llama-server (and bench/batch's llama-batched-bench, any llama.cpp tool target) is built once, on
first use, with cmake from the llama-cpp-python sdist that the llama.cpp peer venv downloaded
(bench/_llm_peer_llamacpp.py): its vendor/llama.cpp unpacked under
~/.cache/edgeshare-bench/llama-server-VERSION/, configured Release for this CPU (GGML_NATIVE, as
the peer venv's build) with the server and nothing else that downloads (no web UI, no curl, no
OpenSSL), built at the lowest CPU priority; every target shares that one build folder. A binary is
reused while it exists; a failed build leaves no binary, and its log is named in the error.

Server owns one running process: started on a free loopback port, ready when GET /health answers
200, stopped (SIGTERM, then SIGKILL) when the `with` block ends, whatever happened in it.
"""

import os
import signal
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from typing import IO, Callable, List, Optional, Sequence

from edgeshare.bench._llm_peer_llamacpp import LLAMACPP_BUILDS, SDIST, VENV, VERSION
from edgeshare.bench._peer import cache_root
from edgeshare.bench._runner import BenchError

__all__ = ["Server", "free_port", "llamacpp_binary", "llama_server_binary", "vendored_llamacpp"]

# cmake's configuration: the peer venv's native build, the HTTP server, nothing fetched at build time.
_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    LLAMACPP_BUILDS["native"],
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 free now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _step(args: Sequence[str], log: IO[str], what: str, log_path: str) -> None:
    """One build command at the lowest CPU priority, its output appended to `log`; BenchError
    naming `what` (the target and the step) and the log when it fails."""
    log.write("$ " + " ".join(args) + "\n")
    log.flush()
    proc = subprocess.run(["nice", "-n", "19", *args], stdout=log, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise BenchError(f"{what} failed (status {proc.returncode}); see {log_path}")


def vendored_llamacpp(root: str) -> str:
    """The llama.cpp source that the peer's llama-cpp-python sdist vendors, unpacked under `root`
    (once); its path.

    Raises:
      BenchError: the sdist is missing (run `bench/llm --peer llamacpp` once to make the peer venv).
    """
    sdist = os.path.join(cache_root(), VENV.folder, "sdist", SDIST)
    if not os.path.exists(sdist):
        raise BenchError(f"{sdist} is missing: make the llama.cpp peer venv first (bench/llm --peer llamacpp)")
    os.makedirs(root, exist_ok=True)
    source = os.path.join(root, f"llama_cpp_python-{VERSION}", "vendor", "llama.cpp")
    if not os.path.isdir(source):
        with tarfile.open(sdist) as archive:
            prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
            archive.extractall(root, members=members, filter="data")
    return source


def llamacpp_binary(target: str, jobs: int = 1, say: Callable[[str], None] = lambda line: None) -> str:
    """The peer's llama.cpp tool `target` (a cmake target that writes build/bin/<target>, e.g.
    "llama-server", "llama-batched-bench"), built on first use (see the module doc).

    Args:
      target: the cmake target, also the binary's name.
      jobs: cmake --build's -j.
      say: where the one line announcing a build goes.

    Returns:
      The binary's path.

    Raises:
      BenchError: the sdist is missing (run `bench/llm --peer llamacpp` once to make the peer
        venv) or the build failed.
    """
    root = os.path.join(cache_root(), f"llama-server-{VERSION}")
    build = os.path.join(root, "build")
    binary = os.path.join(build, "bin", target)
    if os.path.exists(binary):
        return binary
    source = vendored_llamacpp(root)
    log_path = os.path.join(root, "build.log")
    say(f"[llama.cpp] building {target} {VERSION} with cmake (nice, -j {jobs}; log {log_path})")
    with open(log_path, "a", encoding="utf-8") as log:
        flags: List[str] = []
        for flag in _CMAKE_FLAGS:
            flags += flag.split()
        _step(["cmake", "-S", source, "-B", build, *flags], log, f"{target}: cmake configure", log_path)
        _step(["cmake", "--build", build, "--target", target, "-j", str(jobs)], log, f"{target}: build", log_path)
    if not os.path.exists(binary):
        raise BenchError(f"the {target} build wrote no {binary}; see {log_path}")
    return binary


def llama_server_binary(jobs: int = 1, say: Callable[[str], None] = lambda line: None) -> str:
    """llamacpp_binary("llama-server", jobs, say)."""
    return llamacpp_binary("llama-server", jobs, say)


class Server:
    """A server process on 127.0.0.1:port, ready once /health answers 200; stopped on exit."""

    def __init__(self, name: str, command: Sequence[str], port: int, log_path: str, start_s: float = 300.0) -> None:
        self.name = name
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._command = list(command)
        self._log_path = log_path
        self._start_s = start_s
        self._log: Optional[IO[str]] = None
        self._proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Server":
        self._log = open(self._log_path, "w", encoding="utf-8")
        self._proc = subprocess.Popen(self._command, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self._start_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BenchError(f"{self.name} exited with status {self._proc.returncode}; see {self._log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise BenchError(f"{self.name} was not ready in {self._start_s:.0f} s; see {self._log_path}")

    def cpu_seconds(self) -> float:
        """The process's CPU time so far (user + system, every thread), from /proc."""
        assert self._proc is not None
        with open(f"/proc/{self._proc.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_idle(self, window_s: float = 0.25, busy: float = 0.05, timeout_s: float = 10.0) -> float:
        """Waits until the process uses less than `busy` of a core over a `window_s` window (its
        threads done with the last run: llama.cpp's spin a while after a batch), at most
        timeout_s; returns the seconds waited."""
        start = time.monotonic()
        before = self.cpu_seconds()
        while time.monotonic() - start < timeout_s:
            time.sleep(window_s)
            now = self.cpu_seconds()
            if now - before < busy * window_s:
                break
            before = now
        return time.monotonic() - start

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None
