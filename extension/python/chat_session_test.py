"""edgeshare-generate --interactive over the text fixture (//testing:text_files: a tiny Llama with a
ChatML template, max_seq_len 160), driven through stdin as a user would: five turns whose replies
equal a fresh --chat run over the whole conversation so far, each prefilling only what the turn adds
to the KV cache (its JSON says so; with this random model, also the part of the last reply whose
text encodes to other tokens, and says that too); /reset starts over, a turn past the length is refused with a pointer to /reset,
/adapter on a program without swappable weights is one line, /adapter NAME on a --swappable export
makes the next reply that adapter's, Ctrl-C in a reply stops it and the session goes on, and Ctrl-C
at the prompt ends the session quietly. Every wait on the subprocess has a deadline.
"""

import fcntl
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Sequence

import pytest
from edgeshare.extension.python import Tokenizer, generate_cli

FILES = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])
TURNS = ["Hi", "a", "ok", "b", "c"]  # short: this tokenizer has few merges
NEW_TOKENS = 3
# How long a session subprocess may take to reach each point it is waited for.
DEADLINE_S = 120


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _base(json_path: str, files: str = FILES, program: str = "a.pte", data: Sequence[str] = ("foundation.ptd",),
          new_tokens: int = NEW_TOKENS) -> List[str]:
    args = ["--program", os.path.join(files, program), "--max-new-tokens", str(new_tokens), "--json", json_path]
    for name in data:
        args += ["--data", os.path.join(files, name)]
    return args


def _command(args: Sequence[str]) -> List[str]:
    return [sys.executable, "-c", "import sys; from edgeshare.extension.python.generate_cli import main; "
            "sys.exit(main())", *args]


def _env() -> Dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _session(tmp_path: Any, lines: Sequence[str], *flags: str, **base: Any) -> Dict[str, Any]:
    json_path = str(tmp_path / "session.json")
    proc = subprocess.run(_command(_base(json_path, **base) + ["--interactive", *flags]), input="\n".join(lines) + "\n",
                          capture_output=True, text=True, env=_env(), check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    with open(json_path, encoding="utf-8") as f:
        result = json.load(f)
    result["stderr"] = proc.stderr
    result["stdout"] = proc.stdout
    return result


def _fresh(tmp_path: Any, messages: List[Dict[str, str]], *flags: str, **base: Any) -> Dict[str, Any]:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    out = str(tmp_path / "fresh.json")
    assert generate_cli.main(_base(out, **base) + ["--chat", str(chat), *flags]) == 0
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


@pytest.fixture(scope="module")
def swappable(tmp_path_factory) -> str:
    """A --swappable export of a tiny Llama with a tokenizer and chat template: lora.pte over
    foundation.ptd, and adapters a.ptd and c.ptd of one structure."""
    from edgeshare.models import hf_tiny, tiny_tokenizer  # noqa: PLC0415 (only this fixture exports)
    from edgeshare.tools import export_lora  # noqa: PLC0415

    root = tmp_path_factory.mktemp("swappable")
    shape = {"initializer_range": 0.2, "vocab_size": tiny_tokenizer.VOCAB}
    files = hf_tiny.save_tiny_lora("llama", str(root / "in"), **shape)
    twin = hf_tiny.save_twin_adapter("llama", str(root / "in"), **shape)
    tiny_tokenizer.save_tokenizer(files.model_dir, 96)
    out = str(root / "out")
    assert export_lora.main(["--hf-model", files.model_dir, "--adapter", f"a={files.adapter_dirs['a']}",
                             "--adapter", f"c={twin}", "--swappable", "--max-seq-len", "96", "--out", out]) == 0
    return out


def test_adapter_swaps_to_a_swappable_adapter_whose_reply_equals_a_fresh_run_with_it(tmp_path, swappable):
    base = {"files": swappable, "program": "lora.pte", "new_tokens": 8}
    result = _session(tmp_path, ["Hi", "/adapter c", "ok"], **base, data=("foundation.ptd", "a.ptd"))
    first, second = result["turns"]
    assert "adapter c bound" in result["stderr"], result["stderr"]
    # Binding resets the KV cache: the turn after it prefills the whole conversation.
    assert second["prefilled_tokens"] == second["prompt_tokens"]
    with_a = _fresh(tmp_path, result["messages"][:1], **base, data=("foundation.ptd", "a.ptd"))
    assert first["tokens"] == with_a["tokens"]
    with_c = _fresh(tmp_path, result["messages"][:3], **base, data=("foundation.ptd", "c.ptd"))
    assert second["tokens"] == with_c["tokens"]
    # The swap matters: adapter a would have answered otherwise.
    still_a = _fresh(tmp_path, result["messages"][:3], **base, data=("foundation.ptd", "a.ptd"))
    assert second["tokens"] != still_a["tokens"]


class _Session:
    """edgeshare-generate --interactive --verbose in a subprocess that gets SIGINT as from a
    terminal, with its stderr read line by line on a thread, so that every wait has a deadline."""

    def __init__(self, args: Sequence[str], stdout: Any) -> None:
        # SIGINT as a terminal sends it, whatever the test runner's own disposition.
        self.proc = subprocess.Popen(_command([*args, "--interactive", "--verbose"]), stdin=subprocess.PIPE,
                                     stdout=stdout, stderr=subprocess.PIPE, text=True, env=_env(),
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.stderr: List[str] = []
        self._lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self._lines.put(line)

    def say(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, text: str) -> str:
        """The next stderr line holding text (the lines before it are kept in self.stderr)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"no stderr line with {text!r} within {DEADLINE_S} s: {self.stderr}") from None
            self.stderr.append(line)
            if text in line:
                return line

    def end(self) -> int:
        try:
            self.proc.wait(timeout=DEADLINE_S)
        finally:
            self.proc.kill()
        deadline = time.monotonic() + DEADLINE_S
        while not self._lines.empty() and time.monotonic() < deadline:
            self.stderr.append(self._lines.get())
        return self.proc.returncode


def _blocked_writing_stdout(pid: int) -> bool:
    # /proc/PID/syscall: the number of the system call the main thread is blocked in, then its
    # arguments (x86-64: write is 1, and its first argument the descriptor, 0x1 for stdout).
    try:
        with open(f"/proc/{pid}/syscall", encoding="ascii") as f:
            return f.read().split()[:2] == ["1", "0x1"]
    except OSError:
        return False


def _full_pipe() -> Any:
    """A pipe of one page whose buffer is already full: whoever writes to it next blocks until the
    reader drains it. Returns (read end, write end)."""
    read, write = os.pipe()
    fcntl.fcntl(write, 1031, 4096)  # F_SETPIPE_SZ: the smallest buffer, one page
    flags = fcntl.fcntl(write, fcntl.F_GETFL)
    fcntl.fcntl(write, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        while True:
            os.write(write, b"-" * 512)
    except BlockingIOError:
        pass
    fcntl.fcntl(write, fcntl.F_SETFL, flags)
    return read, write


def test_ctrl_c_in_a_reply_stops_it_and_the_session_goes_on_until_a_second_one(tmp_path):
    new_tokens = 100
    json_path = str(tmp_path / "session.json")
    # The reply's first piece of text blocks on a full stdout, so the signal lands while it streams.
    read, write = _full_pipe()
    session = _Session(_base(json_path, new_tokens=new_tokens), stdout=write)
    os.close(write)
    session.say(TURNS[0])
    deadline = time.monotonic() + DEADLINE_S
    while not _blocked_writing_stdout(session.proc.pid):
        assert session.proc.poll() is None and time.monotonic() < deadline, "the reply never reached stdout"
        time.sleep(0.01)
    session.proc.send_signal(signal.SIGINT)
    stdout: List[bytes] = []
    drain = threading.Thread(target=lambda: stdout.extend(iter(lambda: os.read(read, 65536), b"")), daemon=True)
    drain.start()
    session.wait_for("reply stopped (Ctrl-C again ends the session)")
    session.wait_for("finish reason interrupted")
    session.say(TURNS[1])
    session.wait_for("finish reason")
    session.proc.send_signal(signal.SIGINT)
    status = session.end()
    drain.join(timeout=DEADLINE_S)
    os.close(read)
    stderr = "".join(session.stderr)
    assert status == 130 and "Traceback" not in stderr, stderr
    with open(json_path, encoding="utf-8") as f:
        result = json.load(f)
    stopped, after = result["turns"]
    assert stopped["finish_reason"] == "interrupted" and len(stopped["tokens"]) < new_tokens
    assert after["finish_reason"] in ("stop", "length")
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"] * 2
    # What the stopped reply printed stays in the conversation.
    assert result["messages"][1]["content"] == stopped["text"]


def test_ctrl_c_at_the_prompt_ends_the_session_without_a_traceback(tmp_path):
    json_path = str(tmp_path / "session.json")
    session = _Session(_base(json_path), stdout=subprocess.PIPE)
    session.say(TURNS[0])
    session.wait_for("finish reason")  # the turn's line: it now waits for the next
    session.proc.send_signal(signal.SIGINT)
    status = session.end()
    assert status == 130 and "Traceback" not in "".join(session.stderr), session.stderr
    with open(json_path, encoding="utf-8") as f:
        assert len(json.load(f)["turns"]) == 1


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
