"""edgeshare-serve: an OpenAI-compatible HTTP server over a batch export (//tools:serve is the same).

    edgeshare-export --hf-model MODEL_DIR --adapter chat=DIR --adapter code=DIR --batch-slots 8 --out out
    edgeshare-serve out --port 8000 --threads 2
    # edgeshare-serve: serving out (adapters chat, code; 8 at once, 128 tokens each) at http://127.0.0.1:8000/v1

Requests on different adapters generate together in one pass over the foundation per step (the
batch engine, docs/batching.md). The endpoints, the fields read and the errors are docs/serve.md's.
Bad flags or folders end it with one line and status 2 (flags) or 1 (the folder); Ctrl-C or SIGTERM
stops it, cancelling the requests still running.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import List, Optional, Sequence

from edgeshare.extension.python._cli import run_reporting
from edgeshare.extension.python._errors import EdgeshareError
from edgeshare.extension.python.text import MissingTextPackage, TokenizerFileError

__all__ = ["main"]

PROG = "edgeshare-serve"


class UsageError(ValueError):
    """A flag's value is out of range."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("folder", help="a folder export_lora --batch-slots wrote, with the model's tokenizer")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    parser.add_argument("--slots", type=int, help="requests generating at once (default: the export's --batch-slots)")
    parser.add_argument("--threads", type=int, help="threads each engine step uses (default: the runtime's default)")
    parser.add_argument("--max-queue", type=int, default=64,
                        help="requests that may wait for a slot; past that, 429 (default 64)")
    parser.add_argument("--served-model-name", metavar="NAME",
                        help="the base model's name in the API (default: the folder's name)")
    parser.add_argument("--max-body-bytes", type=int, default=4 << 20, metavar="N",
                        help="the largest request body; past it, 413 (default 4 MiB)")
    parser.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level (info: one line per request)")
    return parser


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (bound before uvicorn starts, so port 0 gets a real port)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/v1"


def _main(argv: Optional[Sequence[str]]) -> int:
    args = _parser().parse_args(argv)
    for flag, value, low in (("--port", args.port, 0), ("--slots", args.slots, 1), ("--threads", args.threads, 1),
                             ("--max-queue", args.max_queue, 0), ("--max-body-bytes", args.max_body_bytes, 1)):
        if value is not None and value < low:
            raise UsageError(f"{flag} is {value}: it must be >= {low}")
    if args.port > 65535:
        raise UsageError(f"--port is {args.port}: it must be <= 65535")
    try:
        import uvicorn  # noqa: PLC0415 (the [serve] extra)
        from edgeshare.extension.python.serve_app import ServedModel, make_app  # noqa: PLC0415
    except ImportError as e:
        raise MissingTextPackage(
            f"{PROG} needs the package '{e.name}': pip install 'edgeshare-...whl[serve,text]'") from None
    try:
        model = ServedModel.open(args.folder, threads=args.threads, slots=args.slots, max_queue=args.max_queue,
                                 name=args.served_model_name)
    except ValueError as e:
        if isinstance(e, TokenizerFileError):
            raise
        raise UsageError(str(e)) from None
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    adapters = ", ".join(sorted(model.adapters)) or "none"
    print(f"{PROG}: serving {model.name} (adapters {adapters}; {model.slots} at once, {model.engine.max_seq_len} "
          f"tokens each) at {_url(args.host, port)}", file=sys.stderr, flush=True)
    config = uvicorn.Config(make_app(model, args.max_body_bytes), log_level=args.log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="on")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        model.close()
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """The console script: returns the exit status."""
    return run_reporting(PROG, lambda: _main(argv), (EdgeshareError, TokenizerFileError, MissingTextPackage),
                         usage_errors=(UsageError,))
