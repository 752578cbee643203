"""Python text generation's tokenizer over a SentencePiece tokenizer.model (//testing:sentencepiece_files,
trained offline with the sentencepiece package): an export folder with tokenizer.model and no
tokenizer.json loads it; its ids and text equal what the fixture recorded from sentencepiece (which
the C++ SentencePieceTokenizer equals too) on a multilingual corpus and random id runs; streamed
pieces concatenate to decode(); bad files are one-line TokenizerFileErrors.
"""

import json
import os
import shutil
from typing import Any, Dict

import pytest
from edgeshare.extension.python.text import TextDecoder, Tokenizer, TokenizerFileError

FILES = os.path.dirname(os.environ["SENTENCEPIECE_EXPECTED_JSON"])
MODEL_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


@pytest.fixture(scope="module")
def expected() -> Dict[str, Any]:
    with open(os.path.join(FILES, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    loaded = Tokenizer.from_folder(FILES)
    assert loaded is not None
    return loaded


def _folder(tmp_path: Any, config: Any = None) -> str:
    for name in MODEL_FILES:
        shutil.copy(os.path.join(FILES, name), tmp_path / name)
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_the_folder_loads_its_sentencepiece_model(tokenizer):
    assert not os.path.exists(os.path.join(FILES, "tokenizer.json"))
    assert tokenizer.vocab_size == 560
    assert tokenizer.end_token_ids == [2]
    assert tokenizer.special_tokens["bos_token"] == "<s>"


def test_ids_and_text_equal_sentencepiece_on_the_corpus(tokenizer, expected):
    assert len(expected["corpus"]) >= 25
    for text, ids, plain, decoded in zip(expected["corpus"], expected["ids"], expected["ids_plain"],
                                         expected["decoded"]):
        assert tokenizer.encode(text) == ids, text
        assert tokenizer.encode(text, add_special_tokens=False) == plain, text
        assert tokenizer.decode(ids) == decoded, text
        decoder = TextDecoder(tokenizer)
        pieces = [decoder.add(i) for i in ids] + [decoder.finish()]
        assert "".join(pieces) == decoded, text


def test_decode_equals_sentencepiece_on_random_ids(tokenizer, expected):
    assert len(expected["random_ids"]) >= 400
    for ids, decoded in zip(expected["random_ids"], expected["random_decoded"]):
        assert tokenizer.decode(ids) == decoded, ids
        decoder = TextDecoder(tokenizer)
        assert "".join([decoder.add(i) for i in ids] + [decoder.finish()]) == decoded, ids


def test_special_tokens_kept_when_asked(tokenizer):
    text = "<s>[INST] Hallo, wie geht's? [/INST] Gut! 🙂</s>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids[0] == 1 and ids[-1] == 2
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert tokenizer.decode(ids + [10**6, -1]) == text[3:-4]


def test_tokenizer_config_sets_bos_and_eos(tmp_path, expected):
    loaded = Tokenizer.from_folder(_folder(tmp_path, {"add_bos_token": False, "add_eos_token": True}))
    assert loaded.encode(expected["corpus"][0]) == expected["ids_plain"][0] + [2]


def test_bad_files_are_one_line_errors(tmp_path):
    folder = _folder(tmp_path, {"add_bos_token": "yes"})
    with pytest.raises(TokenizerFileError, match="add_bos_token must be true or false"):
        Tokenizer.from_folder(folder)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    data = (tmp_path / "tokenizer.model").read_bytes()
    (tmp_path / "tokenizer.model").write_bytes(data[: len(data) // 2])
    with pytest.raises(TokenizerFileError) as error:
        Tokenizer.from_folder(folder)
    message = str(error.value)
    assert "tokenizer.model is not a SentencePiece model" in message and "\n" not in message
    os.remove(tmp_path / "tokenizer.model")
    assert Tokenizer.from_folder(folder) is None


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
