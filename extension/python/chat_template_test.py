"""Chat templates wherever a model keeps them: rendering equals transformers' apply_chat_template.

testdata/chat_templates/ holds the chat templates of Llama 3 (Meta-Llama-3-8B-Instruct), Qwen2.5
(Qwen2.5-*-Instruct), SmolLM2 (SmolLM2-*-Instruct), Gemma 2 (gemma-2-*-it), Phi-3
(Phi-3-mini-4k-instruct) and Mistral (Mistral-7B-Instruct-v0.1/v0.2), written as their
tokenizer_config.json files publish them. Each model directory here is made with a small byte-level
BPE tokenizer trained on the spot (with that model's special tokens) and the template in one of the
places a model keeps it: chat_template.jinja (current transformers), tokenizer_config.json's
chat_template as a string or as a list of named templates, or a processor's chat_template.json. The
directory goes through the exporter's tokenizer_files into an export folder, and edgeshare's
Tokenizer over that folder renders 50 generated conversations (system/user/assistant mixes, both
add_generation_prompt settings) exactly as transformers' AutoTokenizer over the model directory does,
text and ids, and raises where transformers' template raises.
"""

import json
import os
import random
import sys
from typing import Any, Dict, List

import pytest
import transformers
from edgeshare.exir.tokenizer_files import read_tokenizer_files, write_tokenizer_files
from edgeshare.extension.python.text import Tokenizer, TokenizerFileError
from edgeshare.models import tiny_tokenizer

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "chat_templates")

# The special tokens each model's tokenizer_config.json names, and its added tokens.
MODELS: Dict[str, Dict[str, Any]] = {
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
               "added": ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]},
    "qwen2_5": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "added": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                "added": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]},
    "gemma2": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
               "added": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
             "added": ["<unk>", "<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "added": ["<unk>", "<s>", "</s>"]},
}
PLACES = ("chat_template.jinja", "tokenizer_config.json", "tokenizer_config.json list", "chat_template.json")
CONVERSATIONS = 50

WORDS = ["Hello", "how are you?", "Grüße aus Köln", "東京について教えて", "🙂", "  padded  ", "two\nlines", "",
         "a = b + c", "Tell me a story.", "<not a token>", "Ünïcödé", "{{ not jinja }}", "\tTab"]


def _conversations(seed: int) -> List[List[Dict[str, str]]]:
    """Conversations of 1-7 messages: mostly alternating user/assistant turns after an optional
    system message, some with roles out of order (which some templates refuse)."""
    rng = random.Random(seed)
    out = []
    for _ in range(CONVERSATIONS):
        messages = []
        if rng.random() < 0.4:
            messages.append({"role": "system", "content": rng.choice(WORDS) + " You are terse."})
        turns = rng.randint(1, 6)
        for i in range(turns):
            role = "user" if i % 2 == 0 else "assistant"
            if rng.random() < 0.08:
                role = rng.choice(["user", "assistant", "system"])
            messages.append({"role": role, "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))})
        out.append(messages)
    return out


def _model_dir(root: str, model: str, place: str) -> str:
    """A model directory with the model's special tokens and its chat template in `place`."""
    spec = MODELS[model]
    with open(os.path.join(TEMPLATES, f"{model}.jinja"), encoding="utf-8") as f:
        template = f.read()
    folder = os.path.join(root, place.replace(" ", "_"))
    os.makedirs(folder)
    tokenizer = tiny_tokenizer.train_byte_level_bpe(tiny_tokenizer.CORPUS * 4, 384, spec["added"])
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    config: Dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    config.update({k: v for k, v in spec.items() if k != "added"})
    if place == "tokenizer_config.json":
        config["chat_template"] = template
    elif place == "tokenizer_config.json list":
        config["chat_template"] = [{"name": "default", "template": template},
                                   {"name": "tool_use", "template": "{{ 'tools: ' + tools | length | string }}"}]
    elif place == "chat_template.jinja":
        with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template)
    else:
        with open(os.path.join(folder, "chat_template.json"), "w", encoding="utf-8") as f:
            json.dump({"chat_template": template}, f)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return folder


def _exported(model_dir: str) -> str:
    out = model_dir + "_export"
    write_tokenizer_files(read_tokenizer_files(model_dir), out)
    return out


def _render(render: Any, messages: List[Dict[str, str]], generation: bool) -> Any:
    """render(messages, add_generation_prompt), or the exception type's family when it raises."""
    try:
        return render(messages, generation)
    except Exception as e:  # noqa: BLE001 (both sides raise their own types; compared below)
        return ("raised", type(e).__name__, str(e))


@pytest.mark.parametrize("model", sorted(MODELS))
def test_rendering_equals_transformers_wherever_the_template_is_kept(tmp_path, model):
    transformers.logging.set_verbosity_error()
    # transformers reads the template from chat_template.jinja or tokenizer_config.json (its
    # tokenizer does not read a processor's chat_template.json), so it renders from the first.
    reference_dir = _model_dir(str(tmp_path / "reference"), model, "chat_template.jinja")
    hf = transformers.AutoTokenizer.from_pretrained(reference_dir, local_files_only=True)
    conversations = _conversations(seed=sorted(MODELS).index(model))
    raised = 0
    for place in PLACES:
        ours = Tokenizer.from_folder(_exported(_model_dir(str(tmp_path / model), model, place)))
        assert ours is not None
        for messages in conversations:
            for generation in (True, False):
                want = _render(lambda m, g: hf.apply_chat_template(m, add_generation_prompt=g, tokenize=False),
                               messages, generation)
                got = _render(lambda m, g: ours.apply_chat_template(m, add_generation_prompt=g), messages, generation)
                if isinstance(want, tuple):
                    raised += 1
                    assert isinstance(got, tuple) and got[1] == TokenizerFileError.__name__, (place, messages)
                    assert want[2] in got[2] and "\n" not in got[2]
                    continue
                assert got == want, (place, messages, generation)
                ids = ours.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True)
                assert ids == hf.encode(want, add_special_tokens=False), (place, messages)
    if model in ("gemma2", "mistral"):
        assert raised > 0  # their templates refuse a system message or roles out of turn


def test_named_templates_are_picked_as_transformers_picks_them(tmp_path):
    folder = _exported(_model_dir(str(tmp_path), "smollm2", "tokenizer_config.json list"))
    tokenizer = Tokenizer.from_folder(folder)
    assert sorted(tokenizer.chat_templates) == ["default", "tool_use"]
    messages = [{"role": "user", "content": "Hi"}]
    assert tokenizer.apply_chat_template(messages).startswith("<|im_start|>system\n")
    assert tokenizer.apply_chat_template(messages, tools=[{"name": "f"}]) == "tools: 1"
    assert tokenizer.apply_chat_template(messages, chat_template="tool_use", tools=[]) == "tools: 0"


def test_additional_chat_templates_travel_with_the_export(tmp_path):
    model_dir = _model_dir(str(tmp_path), "phi3", "chat_template.jinja")
    os.makedirs(os.path.join(model_dir, "additional_chat_templates"))
    with open(os.path.join(model_dir, "additional_chat_templates", "rag.jinja"), "w", encoding="utf-8") as f:
        f.write("{{ documents | length }} documents")
    tokenizer = Tokenizer.from_folder(_exported(model_dir))
    assert sorted(tokenizer.chat_templates) == ["default", "rag"]
    hf = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    messages = [{"role": "user", "content": "Hi"}]
    want = hf.apply_chat_template(messages, chat_template="rag", documents=[{"text": "x"}], tokenize=False)
    assert tokenizer.apply_chat_template(messages, chat_template="rag", documents=[{"text": "x"}]) == want
    assert tokenizer.apply_chat_template(messages) == hf.apply_chat_template(messages, tokenize=False,
                                                                             add_generation_prompt=True)


def test_the_jinja_file_wins_over_tokenizer_config(tmp_path):
    folder = _model_dir(str(tmp_path), "llama3", "tokenizer_config.json")
    with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write("from the jinja file")
    hf = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    want = hf.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    assert want == "from the jinja file"
    assert Tokenizer.from_folder(_exported(folder)).apply_chat_template([{"role": "user", "content": "x"}]) == want


def test_no_template_names_every_place_looked_in(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    tiny_tokenizer.train_byte_level_bpe(tiny_tokenizer.CORPUS, 300).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text("{}")
    tokenizer = Tokenizer.from_folder(str(folder))
    with pytest.raises(TokenizerFileError) as e:
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}])
    message = str(e.value)
    for place in ("chat_template.jinja", "additional_chat_templates/*.jinja", "tokenizer_config.json's chat_template",
                  "chat_template.json"):
        assert place in message
    assert "\n" not in message


@pytest.mark.parametrize("name, data, words", [
    ("chat_template.json", "[1]", "chat_template.json is not a JSON object"),
    ("chat_template.json", "{}", "chat_template.json has no chat_template"),
    ("tokenizer_config.json", '{"chat_template": 3}', "chat_template must be a string or a list"),
])
def test_a_malformed_template_file_is_named(tmp_path, name, data, words):
    folder = tmp_path / "bad"
    folder.mkdir()
    tiny_tokenizer.train_byte_level_bpe(tiny_tokenizer.CORPUS, 300).save(str(folder / "tokenizer.json"))
    (folder / name).write_text(data)
    with pytest.raises(TokenizerFileError, match=words):
        Tokenizer.from_folder(str(folder))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
