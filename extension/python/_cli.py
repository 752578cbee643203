"""How every Python command-line tool of edgeshare ends on Ctrl-C or a closed pipe: quietly.

    def main(argv=None) -> int:
        return run_cli(lambda: _main(argv))

Ctrl-C gives exit status 130 (the shell's 128 + SIGINT) with no traceback; a reader that goes away
(`edgeshare-inspect --json | head -1`) gives status 1 with no traceback, and stdout is pointed at
/dev/null so that the interpreter's last flush does not report the broken pipe again.
"""

import os
import sys
from typing import Callable

__all__ = ["run_cli"]


def run_cli(main: Callable[[], int]) -> int:
    """Runs main() and returns its exit status, or 130 on Ctrl-C, or 1 when stdout was closed."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
