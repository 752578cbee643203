"""What an export folder carries for text generation: the model directory's tokenizer files and its
generation_config.json, copied under their own names beside the programs.

    files = read_tokenizer_files(model_dir)     # checked before the slow export; may be empty
    ...export the programs into out_dir...
    write_tokenizer_files(files, out_dir)       # out_dir/tokenizer.json, generation_config.json, ...

The runtime finds them in the folder of the program it loads (no flags): tokenizer.json (Hugging
Face `tokenizers`), tokenizer_config.json (bos/eos tokens, the chat template of older saves),
special_tokens_map.json, a SentencePiece tokenizer.model where that is what the model has, the chat
template wherever the model keeps it (chat_template.jinja and additional_chat_templates/NAME.jinja as
current transformers saves them, a processor's chat_template.json) and generation_config.json (the
end tokens as eos_token_id, default sampling). A model directory without them exports as before and its
programs take token ids.
"""

import dataclasses
import json
import os
from typing import Dict, List, Optional

from edgeshare.exir._pipeline import OutputFiles, Say
from edgeshare.exir.errors import ExportError

__all__ = [
    "CHAT_TEMPLATE_DIR",
    "GENERATION_CONFIG",
    "TOKENIZER_FILE_NAMES",
    "TokenizerFiles",
    "read_tokenizer_files",
    "write_tokenizer_files",
]

GENERATION_CONFIG = "generation_config.json"
# Named chat templates, one NAME.jinja each, in this subfolder (copied as a subfolder).
CHAT_TEMPLATE_DIR = "additional_chat_templates"

# In the order they are copied; the JSON ones are checked to be JSON objects.
TOKENIZER_FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    GENERATION_CONFIG,
)


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
    """The generation files of a model directory, read into memory.

    Attributes:
      model_dir: where they were read.
      contents: file name -> its bytes, for the names of TOKENIZER_FILE_NAMES present and
        "additional_chat_templates/NAME.jinja" for each named template.
    """

    model_dir: str
    contents: Dict[str, bytes]


def _end_tokens(config: Dict[str, object], path: str) -> None:
    """Refuses an eos_token_id that is neither an id nor a list of ids."""
    eos = config.get("eos_token_id")
    ids = eos if isinstance(eos, list) else [eos]
    if eos is not None and not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ExportError(f"{path}: eos_token_id must be a token id or a list of them, not {eos!r:.60}")


def read_tokenizer_files(model_dir: str) -> TokenizerFiles:
    """Reads and checks the tokenizer files and generation_config.json of a model directory.

    Args:
      model_dir: the model directory (what save_pretrained wrote, tokenizer included or not).

    Returns:
      The files found (none is an empty mapping).

    Raises:
      ExportError: a file cannot be read, a JSON file is not a JSON object, or generation_config's
        eos_token_id is not a token id or list of them; the message names the file.
    """
    contents: Dict[str, bytes] = {}
    named = os.path.join(model_dir, CHAT_TEMPLATE_DIR)
    templates = sorted(n for n in os.listdir(named) if n.endswith(".jinja")) if os.path.isdir(named) else []
    for name in list(TOKENIZER_FILE_NAMES) + [f"{CHAT_TEMPLATE_DIR}/{n}" for n in templates]:
        path = os.path.join(model_dir, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ExportError(f"cannot read {path}: {e.strerror or e}") from e
        if name.endswith(".jinja"):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ExportError(f"{path} is not UTF-8 text: {e}") from e
        if name.endswith(".json"):
            try:
                parsed = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise ExportError(f"{path} is not valid JSON: {e}") from e
            if not isinstance(parsed, dict):
                raise ExportError(f"{path} is not a JSON object")
            if name == GENERATION_CONFIG:
                _end_tokens(parsed, path)
        contents[name] = data
    return TokenizerFiles(model_dir, contents)


def write_tokenizer_files(files: TokenizerFiles, out_dir: str, say: Optional[Say] = None) -> List[str]:
    """Writes the files into out_dir under their own names, all or none.

    Args:
      files: what read_tokenizer_files returned.
      out_dir: the export folder.
      say: called with one line per file.

    Returns:
      The paths written (empty when the model had none).

    Raises:
      ExportError: a file cannot be written, naming it.
    """
    if not files.contents:
        return []
    say = say or (lambda line: None)
    prefix = CHAT_TEMPLATE_DIR + "/"
    with OutputFiles(out_dir, say) as out:
        for name, data in files.contents.items():
            if not name.startswith(prefix):
                out.write_bytes(name, data)
        named = {n[len(prefix):]: d for n, d in files.contents.items() if n.startswith(prefix)}
        if not named:
            return list(out.commit())
        with OutputFiles(os.path.join(out_dir, CHAT_TEMPLATE_DIR), say) as sub:
            for name, data in named.items():
                sub.write_bytes(name, data)
            # Every file is written before any is renamed into place.
            return list(sub.commit()) + list(out.commit())
