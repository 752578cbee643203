"""edgeshare's runtime from Python: open data files, load programs, run methods on numpy arrays.

    from edgeshare.extension.python import DataFile, Program

    foundation = DataFile.open("foundation.ptd")
    program = Program.load("lora_a.pte", [foundation])
    (logits,) = program.method("forward").execute(x)

No torch needed at run time (numpy only). See runtime.py for the details; text in and out (the
model's tokenizer and chat template from the export folder) is text.py, with `tokenizers` and jinja2
(the wheel's [text] extra):

    print(program.method("forward_cached").generate_text("Once upon a time", 32).text)

and a program's perplexity over token ids (perplexity.py; edgeshare-perplexity from the shell):

    print(program_perplexity(program, program.tokenizer.encode(text), ctx=128).perplexity)
"""

from edgeshare.extension.python._errors import EdgeshareError
from edgeshare.extension.python.batch import BatchEngine, BatchStream
from edgeshare.extension.python.npy_file import NpyFileError, load_npy
from edgeshare.extension.python.perplexity import PerplexityError, PerplexityResult, program_perplexity, score
from edgeshare.extension.python.runtime import (
    DataFile,
    GenerationResult,
    Method,
    Program,
    TensorSpec,
    TokenStream,
    set_num_threads,
    set_verify_content,
    set_weight_sharing,
    weights_cache_stats,
)
from edgeshare.extension.python.text import (
    MissingTextPackage,
    TextDecoder,
    TextGenerationResult,
    Tokenizer,
    TokenizerFileError,
)

__all__ = [
    "BatchEngine",
    "BatchStream",
    "DataFile",
    "EdgeshareError",
    "GenerationResult",
    "Method",
    "MissingTextPackage",
    "NpyFileError",
    "PerplexityError",
    "PerplexityResult",
    "Program",
    "TensorSpec",
    "TextDecoder",
    "TextGenerationResult",
    "Tokenizer",
    "TokenStream",
    "TokenizerFileError",
    "load_npy",
    "program_perplexity",
    "score",
    "set_num_threads",
    "set_verify_content",
    "set_weight_sharing",
    "weights_cache_stats",
]
