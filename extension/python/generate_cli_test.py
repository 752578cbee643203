"""edgeshare-generate over the text fixture (//testing:text_files, max_seq_len 160): why generation
ended ("stop" at an end token or --stop text, "length" at --max-new-tokens or the method's length,
said on stderr), an unseeded sampled run's fresh seed that --seed repeats (JSON and --verbose), --stop
cutting the text as the C++ tool does, and no traceback on a closed pipe or Ctrl-C (a session ended
by Ctrl-C is chat_session_test's); without the wheel's [text] packages, text is one line saying how
to install them and ids still generate.
"""

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import pytest
from edgeshare.extension.python import generate_cli
from edgeshare.extension.python._cli import run_cli

FILES = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])
MAX_SEQ_LEN = 160


@pytest.fixture(scope="module")
def expected() -> Dict[str, Any]:
    with open(os.path.join(FILES, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def _base(program: str = "a") -> List[str]:
    return ["--program", os.path.join(FILES, f"{program}.pte"), "--data", os.path.join(FILES, "foundation.ptd")]


def _run(tmp_path: Any, capsys: Any, *flags: str, program: str = "a") -> Tuple[Dict[str, Any], str, str]:
    out = str(tmp_path / "out.json")
    assert generate_cli.main(_base(program) + ["--json", out, *flags]) == 0
    captured = capsys.readouterr()
    with open(out, encoding="utf-8") as f:
        return json.load(f), captured.out, captured.err


def test_finish_reasons(tmp_path, capsys, expected):
    result, _, err = _run(tmp_path, capsys, "--prompt", expected["prompt"], "--max-new-tokens", "24",
                          program="foundation")
    assert result["tokens"] == expected["generated"]["foundation"]["tokens"] and result["finish_reason"] == "stop"
    assert err == ""
    result, _, err = _run(tmp_path, capsys, "--prompt", expected["prompt"], "--max-new-tokens", "3")
    assert result["finish_reason"] == "length" and err == ""
    fit = MAX_SEQ_LEN + 1 - len(expected["prompt_ids"])
    result, _, err = _run(tmp_path, capsys, "--prompt", expected["prompt"], "--max-new-tokens", str(fit + 7))
    assert len(result["tokens"]) == fit and result["finish_reason"] == "length"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "finish reason length" in lines[0] and f"the {MAX_SEQ_LEN} tokens" in lines[0]


def test_unseeded_sampling_reports_a_fresh_seed_that_repeats_the_run(tmp_path, capsys, expected):
    sampling = ["--prompt", expected["prompt"], "--max-new-tokens", "16", "--temperature", "1.5"]
    first, _, err = _run(tmp_path, capsys, *sampling, "--verbose")
    second, _, _ = _run(tmp_path, capsys, *sampling)
    assert first["seed"] != second["seed"]
    assert f"seed {first['seed']}" in err
    again, _, _ = _run(tmp_path, capsys, *sampling, "--seed", str(first["seed"]))
    assert again["tokens"] == first["tokens"]
    greedy, _, _ = _run(tmp_path, capsys, "--prompt", expected["prompt"], "--max-new-tokens", "4", "--seed", "3")
    assert "seed" not in greedy and greedy["tokens"] == expected["generated"]["a"]["tokens"][:4]


def test_stop_text_cuts_the_text_as_the_cpp_tool_does(tmp_path, capsys, expected):
    want = expected["generated"]["a"]
    stop = want["text"][6:9]
    cut = want["text"].find(stop)
    flags = ["--prompt", expected["prompt"], "--max-new-tokens", "24", "--stop", "never appears", "--stop", stop]
    result, out, _ = _run(tmp_path, capsys, *flags)
    assert result["text"] == want["text"][:cut] and result["finish_reason"] == "stop"
    assert out.startswith("a:\n" + want["text"][:cut] + "\n")
    ids, out, _ = _run(tmp_path, capsys, *flags, "--ids")
    assert ids["tokens"] == result["tokens"] and out.startswith("a: " + " ".join(map(str, ids["tokens"])))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cpp = subprocess.run([os.path.join(root, "tools", "generate"), *_base(), "--json", str(tmp_path / "c.json"),
                          *flags], capture_output=True, text=True, check=False)
    assert cpp.returncode == 0, cpp.stderr
    with open(tmp_path / "c.json", encoding="utf-8") as f:
        assert json.load(f)["tokens"] == result["tokens"]


def _command(args: Sequence[str]) -> List[str]:
    return [sys.executable, "-c", "import sys; from edgeshare.extension.python.generate_cli import main; "
            "sys.exit(main())", *args]


def test_a_closed_pipe_ends_it_without_a_traceback(expected):
    # As `edgeshare-generate ... | head -1` once head has gone: stdout is a pipe nobody reads.
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run(_command(_base() + ["--prompt", expected["prompt"], "--max-new-tokens", "8"]), stdout=write,
                          stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                          check=False, timeout=120)
    os.close(write)
    assert proc.returncode == 1 and proc.stderr == b"", proc.stderr


def test_ctrl_c_gives_status_130_and_no_traceback(capsys):
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_cli(interrupted) == 130
    assert capsys.readouterr().err == "\n"


@pytest.mark.parametrize("package", ["tokenizers", "jinja2"])
def test_text_without_its_package_is_one_line_naming_it(tmp_path, capsys, monkeypatch, package):
    # As the runtime-only wheel, installed without its [text] extra.
    monkeypatch.setitem(sys.modules, package, None)
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "Hi"}]), encoding="utf-8")
    assert generate_cli.main(_base() + ["--chat", str(chat), "--max-new-tokens", "2"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"text needs the Python package '{package}'" in err and "[text]" in err, err


def test_ids_generate_without_the_text_packages(tmp_path, capsys, monkeypatch, expected):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    ids = tmp_path / "prompt.npy"
    np.save(ids, np.asarray([expected["prompt_ids"]], np.int64))
    result, out, err = _run(tmp_path, capsys, "--prompt-ids", str(ids), "--max-new-tokens", "4")
    assert len(result["tokens"]) == 4 and "text" not in result
    assert out.startswith("a: ") and "warning: text needs the Python package 'tokenizers'" in err


def test_chat_from_a_chat_template_jinja_equals_transformers_over_two_turns(tmp_path, capsys):
    # A model directory as current transformers saves it: the template in chat_template.jinja.
    import peft  # noqa: PLC0415 (only this test exports)
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from edgeshare.models import hf_tiny, tiny_tokenizer  # noqa: PLC0415
    from edgeshare.tools import export_lora  # noqa: PLC0415

    files = hf_tiny.save_tiny_lora("llama", str(tmp_path / "in"), initializer_range=0.2,
                                   vocab_size=tiny_tokenizer.VOCAB)
    tiny_tokenizer.save_tokenizer(files.model_dir, 96)
    transformers.AutoTokenizer.from_pretrained(files.model_dir).save_pretrained(files.model_dir)
    with open(os.path.join(files.model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        assert "chat_template" not in json.load(f)
    out = str(tmp_path / "out")
    assert export_lora.main(["--hf-model", files.model_dir, "--adapter", f"a={files.adapter_dirs['a']}", "--out", out,
                             "--max-seq-len", "96"]) == 0
    assert os.path.isfile(os.path.join(out, "chat_template.jinja"))
    capsys.readouterr()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(files.model_dir)
    model = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(files.model_dir), files.adapter_dirs["a"]).eval()
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi!"}]
    for turn in range(2):
        chat = tmp_path / "chat.json"
        chat.write_text(json.dumps(messages), encoding="utf-8")
        out_json = str(tmp_path / "reply.json")
        argv = ["--program", os.path.join(out, "a.pte"), "--data", os.path.join(out, "foundation.ptd"),
                "--chat", str(chat), "--max-new-tokens", "8", "--json", out_json]
        assert generate_cli.main(argv) == 0
        with open(out_json, encoding="utf-8") as f:
            reply = json.load(f)
        text = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([hf_tokenizer.encode(text, add_special_tokens=False)])
        with torch.no_grad():
            want = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=8)[0, ids.shape[1]:].tolist()
        assert reply["tokens"] == want, turn
        messages += [{"role": "assistant", "content": reply["text"]}, {"role": "user", "content": "And then?"}]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
