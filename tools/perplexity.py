"""//tools:perplexity: edgeshare-perplexity from Bazel (`./bazelw run //tools:perplexity -- --help`);
the flags and the output are extension/python/perplexity_cli.py's."""

import os
import sys

from edgeshare.extension.python.perplexity_cli import main

if __name__ == "__main__":
    # `bazel run` starts tools in their runfiles; paths on the command line are the user's.
    os.chdir(os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd())
    sys.exit(main())
