"""//tools:perplexity: edgeshare-perplexity from Bazel (`./bazelw run //tools:perplexity -- --help`);
the flags and the output are extension/python/perplexity_cli.py's."""

import sys

from edgeshare.extension.python.perplexity_cli import main

if __name__ == "__main__":
    sys.exit(main())
