"""edgeshare-generate --interactive over the text fixture (//testing:text_files: a tiny Llama with a
ChatML template, max_seq_len 160), driven through stdin as a user would: five turns whose replies
equal a fresh --chat run over the whole conversation so far, each prefilling only what the turn adds
to the KV cache (its JSON says so; with this random model, also the part of the last reply whose
text encodes to other tokens, and says that too); /reset starts over, a turn past the length is refused with a pointer to /reset,
/adapter on a program without swappable weights is one line, and Ctrl-C ends the session quietly.
"""

import json
import os
import signal
import subprocess
import sys
from typing import Any, Dict, List, Sequence

import pytest
from edgeshare.extension.python import Tokenizer, generate_cli

FILES = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])
TURNS = ["Hi", "a", "ok", "b", "c"]  # short: this tokenizer has few merges
NEW_TOKENS = 3


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _base(json_path: str) -> List[str]:
    return ["--program", os.path.join(FILES, "a.pte"), "--data", os.path.join(FILES, "foundation.ptd"),
            "--max-new-tokens", str(NEW_TOKENS), "--json", json_path]


def _command(args: Sequence[str]) -> List[str]:
    return [sys.executable, "-c", "import sys; from edgeshare.extension.python.generate_cli import main; "
            "sys.exit(main())", *args]


def _env() -> Dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _session(tmp_path: Any, lines: Sequence[str], *flags: str) -> Dict[str, Any]:
    json_path = str(tmp_path / "session.json")
    proc = subprocess.run(_command(_base(json_path) + ["--interactive", *flags]), input="\n".join(lines) + "\n",
                          capture_output=True, text=True, env=_env(), check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    with open(json_path, encoding="utf-8") as f:
        result = json.load(f)
    result["stderr"] = proc.stderr
    result["stdout"] = proc.stdout
    return result


def _fresh(tmp_path: Any, messages: List[Dict[str, str]], *flags: str) -> Dict[str, Any]:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    out = str(tmp_path / "fresh.json")
    assert generate_cli.main(_base(out) + ["--chat", str(chat), *flags]) == 0
    with open(out, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("flags", [(), ("--temperature", "0.9", "--top-k", "40", "--seed", "5")])
def test_five_turns_prefill_only_what_each_adds_and_equal_fresh_runs(tmp_path, flags):
    result = _session(tmp_path, TURNS, "--system", "x", *flags)
    turns, messages = result["turns"], result["messages"]
    assert len(turns) == 5 and [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 5
    tokenizer = Tokenizer.from_folder(FILES)
    in_cache: List[int] = []
    for i, turn in enumerate(turns):
        fresh = _fresh(tmp_path, messages[: 2 + 2 * i], *flags)
        assert turn["tokens"] == fresh["tokens"], i
        assert turn["text"] == messages[2 + 2 * i]["content"] == fresh["text"]
        ids = tokenizer.apply_chat_template(messages[: 2 + 2 * i], tokenize=True)
        assert turn["prompt_tokens"] == len(ids)
        # The cache holds the earlier prompts and every reply token but the last. All of it is used
        # up to where the rendered conversation differs: at most within the last reply, whose text
        # (this random model's bytes, often not UTF-8) may encode to other tokens than it generated.
        common = _common_prefix(in_cache, ids)
        assert common >= (turns[i - 1]["prompt_tokens"] if i else 0), i
        assert turn["prefilled_tokens"] == len(ids) - common, i
        assert turn["reprefilled_tokens"] == len(in_cache) - common, i
        in_cache = ids + turn["tokens"][:-1]
    assert turns[-1]["prefilled_tokens"] < turns[-1]["prompt_tokens"] // 3


def test_reset_starts_a_new_conversation(tmp_path):
    result = _session(tmp_path, [TURNS[0], "/reset", TURNS[1]])
    first, second = result["turns"]
    assert second["prefilled_tokens"] == second["prompt_tokens"]
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"]
    assert second["tokens"] == _fresh(tmp_path, result["messages"][:1])["tokens"]
    assert "a new conversation" in result["stderr"]


def test_a_turn_past_the_length_is_refused_and_the_session_goes_on(tmp_path):
    long_turn = " ".join(["once upon a time"] * 60)
    result = _session(tmp_path, [TURNS[0], long_turn, TURNS[1]])
    assert len(result["turns"]) == 2
    assert "/reset starts over" in result["stderr"] and "(--max-seq-len)" in result["stderr"]
    assert [m["content"] for m in result["messages"] if m["role"] == "user"] == [TURNS[0], TURNS[1]]


def test_adapter_on_a_program_without_swappable_weights_is_one_line(tmp_path):
    result = _session(tmp_path, ["/adapter b", TURNS[0]])
    lines = [line for line in result["stderr"].splitlines() if "/adapter b" in line]
    assert len(lines) == 1 and len(result["turns"]) == 1


def test_ctrl_c_at_the_prompt_ends_the_session_without_a_traceback(tmp_path):
    json_path = str(tmp_path / "session.json")
    # SIGINT as a terminal sends it, whatever the test runner's own disposition.
    proc = subprocess.Popen(_command(_base(json_path) + ["--interactive", "--verbose"]), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    proc.stdin.write(TURNS[0] + "\n")
    proc.stdin.flush()
    while "finish reason" not in proc.stderr.readline():  # the turn's line: it now waits for the next
        pass
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    with open(json_path, encoding="utf-8") as f:
        assert len(json.load(f)["turns"]) == 1


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
