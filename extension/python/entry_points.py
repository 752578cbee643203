"""The wheel's console scripts that need the exporter: thin wrappers over the tools' own main().

    edgeshare-export ...      = python -m edgeshare.tools.export_lora ... (//tools:export_lora)
    edgeshare-tiny-lora ...   = //models:save_tiny_lora
    edgeshare-inspect ...     = //tools:inspect

Installed without the [export] extra, the exporter's imports (torch, transformers, peft,
flatbuffers) are missing: each script then says so in one line and exits 1, instead of a traceback.
Ctrl-C and a closed stdout end each one quietly too (_cli.run_cli).
"""

import importlib
import sys
from typing import Callable, Optional, Sequence

from edgeshare.extension.python._cli import run_cli

__all__ = ["export_main", "inspect_main", "tiny_lora_main"]


def _run(script: str, module: str, argv: Optional[Sequence[str]], entry: str = "main") -> int:
    return run_cli(lambda: _import_and_run(script, module, argv, entry))


def _import_and_run(script: str, module: str, argv: Optional[Sequence[str]], entry: str) -> int:
    try:
        main: Callable[[Optional[Sequence[str]]], int] = getattr(importlib.import_module(module), entry)
    except ModuleNotFoundError as e:
        print(
            f"{script}: error: {e.name} is not installed; the exporter comes with the wheel's "
            f"[export] extra (pip install 'edgeshare-<version>-<tags>.whl[export]')",
            file=sys.stderr,
        )
        return 1
    return main(argv)


def export_main(argv: Optional[Sequence[str]] = None) -> int:
    """edgeshare-export: //tools:export_lora's main_and_exit, which ends the process with main's
    exit status once its files are written (no interpreter teardown). Returns 1 only when the
    exporter cannot be imported."""
    return _run("edgeshare-export", "edgeshare.tools.export_lora", argv, "main_and_exit")


def tiny_lora_main(argv: Optional[Sequence[str]] = None) -> int:
    """edgeshare-tiny-lora: //models:save_tiny_lora's main. Returns its exit status."""
    return _run("edgeshare-tiny-lora", "edgeshare.models.save_tiny_lora", argv)


def inspect_main(argv: Optional[Sequence[str]] = None) -> int:
    """edgeshare-inspect: //tools:inspect's main. Returns its exit status."""
    return _run("edgeshare-inspect", "edgeshare.tools.inspect_tool", argv)
