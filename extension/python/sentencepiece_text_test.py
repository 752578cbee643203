"""Python text generation's tokenizer over a SentencePiece tokenizer.model (//testing:sentencepiece_files,
trained offline with the sentencepiece package, with Llama 2's tokenizer_config.json, with a chat
model's (legacy false, added tokens), and trained with sentencepiece's default options): an export folder with tokenizer.model and no tokenizer.json
loads it; its ids and text equal what transformers' LlamaTokenizer gives for the same folder (which
the C++ SentencePieceTokenizer equals too) on a multilingual corpus and random id runs, special
tokens kept or skipped; streamed pieces concatenate to decode(); bad files are one-line
TokenizerFileErrors.
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


CONFIGS = {"llama2": FILES, "chat": os.path.join(FILES, "chat"), "plain": os.path.join(FILES, "plain")}


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


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_ids_and_text_equal_transformers_on_the_corpus(expected, config):
    want = expected[config]
    tokenizer = Tokenizer.from_folder(CONFIGS[config])
    assert tokenizer.vocab_size == want["vocab_size"]
    assert len(want["corpus"]) >= 29
    for i, text in enumerate(want["corpus"]):
        ids = want["ids"][i]
        assert tokenizer.encode(text) == ids, text
        assert tokenizer.encode(text, add_special_tokens=False) == want["ids_plain"][i], text
        for skip, key in ((True, "decoded"), (False, "decoded_special")):
            assert tokenizer.decode(ids, skip_special_tokens=skip) == want[key][i], text
            decoder = TextDecoder(tokenizer, skip_special_tokens=skip)
            pieces = [decoder.add(t) for t in ids] + [decoder.finish()]
            assert "".join(pieces) == want[key][i], text


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_decode_equals_transformers_on_random_ids(expected, config):
    want = expected[config]
    tokenizer = Tokenizer.from_folder(CONFIGS[config])
    assert len(want["random_ids"]) >= 400
    for i, ids in enumerate(want["random_ids"]):
        for skip, key in ((True, "random_decoded"), (False, "random_decoded_special")):
            assert tokenizer.decode(ids, skip_special_tokens=skip) == want[key][i], ids
            decoder = TextDecoder(tokenizer, skip_special_tokens=skip)
            assert "".join([decoder.add(t) for t in ids] + [decoder.finish()]) == want[key][i], ids


def test_special_and_added_tokens(expected):
    chat = Tokenizer.from_folder(CONFIGS["chat"])
    assert chat.encode("<|im_start|>hi [[image]]<|im_end|>", add_special_tokens=False)[0] == 560
    ids = chat.encode("<|im_start|>hi [[image]]<|im_end|>", add_special_tokens=False)
    assert ids[-2:] == [562, 561]
    # The special ones are left out, the other added one is not; ids outside the vocabulary skipped.
    assert chat.decode(ids + [10**6, -1]) == "hi [[image]]"
    assert chat.decode(ids, skip_special_tokens=False) == "<|im_start|>hi [[image]]<|im_end|>"


def test_tokenizer_config_sets_bos_eos_and_prefix(tmp_path, expected):
    want = expected["llama2"]
    loaded = Tokenizer.from_folder(_folder(tmp_path, {"add_bos_token": False, "add_eos_token": True, "legacy": True}))
    assert loaded.encode(want["corpus"][0]) == want["ids_plain"][0] + [2]
    # add_prefix_space false: no "▁" in front of the text, none dropped when decoding.
    no_prefix = Tokenizer.from_folder(_folder(tmp_path, {"add_prefix_space": False}))
    ids = no_prefix.encode(" hi", add_special_tokens=False)
    assert ids == loaded.encode("hi", add_special_tokens=False)
    assert no_prefix.decode(ids) == " hi"


def test_bad_files_are_one_line_errors(tmp_path):
    folder = _folder(tmp_path, {"add_bos_token": "yes"})
    with pytest.raises(TokenizerFileError, match="add_bos_token must be true or false"):
        Tokenizer.from_folder(folder)
    for config in ({"legacy": 1}, {"added_tokens_decoder": []}, {"added_tokens_decoder": {"x": {"content": "<a>"}}},
                   {"added_tokens_decoder": {"600": {"special": True}}},
                   {"added_tokens_decoder": {"600": {"content": "<a>", "special": "no"}}},
                   {"added_tokens_decoder": {str(1 << 30): {"content": "<a>", "special": True}}}):
        with pytest.raises(TokenizerFileError) as error:
            Tokenizer.from_folder(_folder(tmp_path, config))
        assert "tokenizer_config.json" in str(error.value) or "tokenizer.model" in str(error.value)
        assert "\n" not in str(error.value)
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
