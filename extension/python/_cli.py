"""How every Python command-line tool of edgeshare ends on Ctrl-C or a closed pipe: quietly.

    def main(argv=None) -> int:
        return run_cli(lambda: _main(argv))

Ctrl-C gives exit status 130 (the shell's 128 + SIGINT) with no traceback; a reader that goes away
(`edgeshare-inspect --json | head -1`) gives status 1 with no traceback, and stdout is pointed at
/dev/null so that the interpreter's last flush does not report the broken pipe again.
"""

import os
import sys
from typing import Callable, Tuple, Type

__all__ = ["run_cli", "run_reporting"]


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


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def run_reporting(
    prog: str,
    main: Callable[[], int],
    errors: Tuple[Type[BaseException], ...],
    usage_errors: Tuple[Type[BaseException], ...] = (),
) -> int:
    """run_cli(main), where each of `errors` (and an OSError other than a closed stdout) ends the
    tool with one "PROG: error: ..." line on stderr and status 1, and each of usage_errors with such
    a line and status 2 (a flag's wrong value, as argparse's own errors)."""

    def reporting() -> int:
        try:
            return main()
        except usage_errors as e:
            print(f"{prog}: error: {_first_line(e)}", file=sys.stderr)
            return 2
        except errors as e:
            print(f"{prog}: error: {_first_line(e)}", file=sys.stderr)
            return 1
        except OSError as e:
            if isinstance(e, BrokenPipeError):
                raise
            print(f"{prog}: error: {_first_line(e)}", file=sys.stderr)
            return 1

    return run_cli(reporting)
