"""//tools:serve: edgeshare-serve from Bazel (`./bazelw run //tools:serve -- OUT --port 8000`); the
flags and the server are extension/python/serve_cli.py's."""

import os
import sys

from edgeshare.extension.python.serve_cli import main

if __name__ == "__main__":
    # `bazel run` starts tools in their runfiles; paths on the command line are the user's.
    os.chdir(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd())
    sys.exit(main())
