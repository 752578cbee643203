"""edgeshare-serve on a tiny Llama (its own tokenizer and ChatML template) exported as a batch of 2
sequences with adapters a and b, started as its users start it (a subprocess on a free loopback
port) and driven with the openai package, raw HTTP and curl.

Greedy text for a, b and the base model over /v1/completions and /v1/chat/completions, streamed
and not, equals what BatchEngine generates in this process for the same tokens, cut where the end
token or a stop string is; llama.cpp's `lora` field picks the same adapter as `model`; an adapter
file is loaded under a new name and answers as its original, then unloaded; one of another
foundation is refused; a client gone mid-stream is cancelled and its slot serves the next request;
every error has OpenAI's error JSON and its status; /health and /metrics. Every wait is bounded
and the server is always stopped.
"""

import http.client
import json
import os
import queue
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import openai
import pytest
from edgeshare.extension.python import BatchEngine, Tokenizer

# Long enough that a request generating to the end outlasts the test's other requests by far.
MAX_SEQ_LEN = 2048
SLOTS = 2
PROMPT = "once upon a time"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hallo! Wie geht's?"}]
NEW_TOKENS = 12
# How long the server may take to start, and to answer one request.
START_S = 120
REQUEST_S = 60


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> str:
    """A batch export (2 sequences, adapters a and b) of a tiny Llama with its tokenizer."""
    from edgeshare.models import hf_tiny, tiny_tokenizer  # noqa: PLC0415 (only this fixture exports)
    from edgeshare.tools import export_lora  # noqa: PLC0415

    root = tmp_path_factory.mktemp("serve")
    files = hf_tiny.save_tiny_lora("llama", str(root / "in"), initializer_range=0.2, vocab_size=tiny_tokenizer.VOCAB)
    tiny_tokenizer.save_tokenizer(files.model_dir, MAX_SEQ_LEN)
    config_path = os.path.join(files.model_dir, "config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config["max_position_embeddings"] = MAX_SEQ_LEN  # rotary positions: any length works
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    out = str(root / "tiny")
    args = ["--hf-model", files.model_dir, "--adapter", f"a={files.adapter_dirs['a']}", "--adapter",
            f"b={files.adapter_dirs['b']}", "--batch-slots", str(SLOTS), "--batch-adapter-slots", "3",
            "--max-seq-len", str(MAX_SEQ_LEN),
            "--out", out]
    assert export_lora.main(args) == 0
    return out


class Server:
    """edgeshare-serve in a subprocess; its stderr is collected by a thread."""

    def __init__(self, folder: str, *flags: str) -> None:
        command = [sys.executable, "-c", "import sys; from edgeshare.extension.python.serve_cli import main; "
                   "sys.exit(main())", folder, "--port", "0", "--threads", "1", *flags]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True)
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.stderr: List[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.first_line = self._first_line()
        match = re.search(r"at http://127\.0\.0\.1:(\d+)/v1$", self.first_line)
        assert match, self.first_line
        self.port = int(match.group(1))
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            self.lines.put(line.rstrip("\n"))

    def _first_line(self) -> str:
        try:
            return self.lines.get(timeout=START_S)
        except queue.Empty:
            self.stop()
            raise AssertionError(f"edgeshare-serve did not start in {START_S} s") from None

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key="none", max_retries=0, timeout=REQUEST_S)

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None) -> Tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_S)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def json(self, path: str, body: Any = None) -> Tuple[int, Any]:
        raw = None if body is None else json.dumps(body).encode()
        status, data = self.request("GET" if body is None else "POST", path, raw,
                                    {"Content-Type": "application/json"})
        return status, json.loads(data)

    def metric(self, name: str) -> float:
        status, data = self.request("GET", "/metrics")
        assert status == 200
        match = re.search(rf"^{re.escape(name)} (\S+)$", data.decode(), re.M)
        assert match, name
        return float(match.group(1))

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return "".join(self.stderr)


@pytest.fixture(scope="module")
def server(export) -> Iterator[Server]:
    running = Server(export, "--max-queue", "0")
    try:
        yield running
    finally:
        stderr = running.stop()
    # uvicorn stops gracefully on SIGTERM, then ends the process by the signal as it came.
    assert running.proc.returncode == -signal.SIGTERM, stderr
    assert "Traceback" not in stderr, stderr


@pytest.fixture(scope="module")
def engine(export) -> BatchEngine:
    return BatchEngine.open(export, threads=1)


@pytest.fixture(scope="module")
def tokenizer(export) -> Tokenizer:
    return Tokenizer.from_folder(export)


def _expected(engine: BatchEngine, tokenizer: Tokenizer, ids: List[int], adapter: Optional[str],
              stop: str = "") -> Tuple[str, int, str]:
    """BatchEngine's greedy text for the ids (cut before `stop`), its token count and finish reason."""
    stream = engine.submit(np.asarray(ids, np.int64), max_new_tokens=NEW_TOKENS, adapter=adapter,
                           stop_ids=tokenizer.end_token_ids)
    tokens = list(stream)
    text = tokenizer.decode(tokens)
    if stop and stop in text:
        # The server stops reading tokens at the first one whose text completes the stop string.
        count = next(n for n in range(1, len(tokens) + 1) if stop in tokenizer.decode(tokens[:n]))
        return text[: text.index(stop)], count, "stop"
    return text, len(tokens), stream.finish_reason


@pytest.mark.parametrize("model", ["tiny", "a", "b"])
def test_completions_equal_the_engine_streamed_and_not(server, engine, tokenizer, model):
    client = server.client()
    adapter = None if model == "tiny" else model
    text, count, finish = _expected(engine, tokenizer, tokenizer.encode(PROMPT), adapter)
    whole = client.completions.create(model=model, prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0)
    assert whole.choices[0].text == text and whole.choices[0].finish_reason == finish
    assert whole.usage.prompt_tokens == len(tokenizer.encode(PROMPT)) and whole.usage.completion_tokens == count
    assert whole.model == model
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == finish


@pytest.mark.parametrize("model", ["tiny", "a", "b"])
def test_chat_equals_the_engine_streamed_and_not(server, engine, tokenizer, model):
    client = server.client()
    ids = tokenizer.apply_chat_template(MESSAGES, tokenize=True)
    text, count, finish = _expected(engine, tokenizer, ids, None if model == "tiny" else model)
    whole = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=NEW_TOKENS, temperature=0)
    message = whole.choices[0].message
    assert message.role == "assistant" and message.content == text
    assert whole.choices[0].finish_reason == finish
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (len(ids), count)
    chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=NEW_TOKENS,
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == finish
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == count


def test_two_adapters_differ_and_lora_field_picks_like_model(server, engine, tokenizer):
    client = server.client()
    texts = {m: client.completions.create(model=m, prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0).choices[0].text
             for m in ("a", "b")}
    assert texts["a"] != texts["b"]
    for slot, name in ((0, "a"), (1, "b")):
        picked = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0,
                                           extra_body={"lora": [{"id": slot, "scale": 1.0}]})
        assert picked.choices[0].text == texts[name]
    by_name = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0,
                                        extra_body={"lora": "b"})
    assert by_name.choices[0].text == texts["b"]


def test_stop_string_cuts_the_text(server, engine, tokenizer):
    client = server.client()
    full, _, _ = _expected(engine, tokenizer, tokenizer.encode(PROMPT), "a")
    stop = full[len(full) // 2: len(full) // 2 + 2]
    assert stop.strip(), full
    text, count, finish = _expected(engine, tokenizer, tokenizer.encode(PROMPT), "a", stop)
    for stream in (False, True):
        reply = client.completions.create(model="a", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0, stop=[stop],
                                          stream=stream)
        if stream:
            chunks = list(reply)
            assert "".join(c.choices[0].text for c in chunks) == text
            assert chunks[-1].choices[0].finish_reason == "stop"
        else:
            assert reply.choices[0].text == text == full[: full.index(stop)]
            assert reply.choices[0].finish_reason == finish == "stop" and reply.usage.completion_tokens == count


def test_sampling_with_a_seed_repeats(server):
    client = server.client()
    texts = [client.completions.create(model="a", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=1.2, seed=7,
                                       extra_body={"top_k": 40}).choices[0].text for _ in range(2)]
    assert texts[0] == texts[1]


def test_models_lists_the_base_and_every_adapter(server):
    assert [m.id for m in server.client().models.list().data] == ["tiny", "a", "b"]
    status, adapters = server.json("/lora-adapters")
    assert status == 200 and [(a["id"], a["name"]) for a in adapters] == [(0, "a"), (1, "b")]


def test_load_and_unload_an_adapter(server, export):
    client = server.client()
    before = client.completions.create(model="b", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0).choices[0].text
    status, _ = server.request("POST", "/v1/load_lora_adapter", json.dumps(
        {"lora_name": "b2", "lora_path": os.path.join(export, "b.ptd")}).encode())
    assert status == 200
    assert [m.id for m in client.models.list().data] == ["tiny", "a", "b", "b2"]
    again = client.completions.create(model="b2", prompt=PROMPT, max_tokens=NEW_TOKENS, temperature=0).choices[0].text
    assert again == before
    status, body = server.json("/v1/load_lora_adapter", {"lora_name": "b2", "lora_path": os.path.join(export, "b.ptd")})
    assert status == 400 and "loaded already" in body["error"]["message"]
    status, _ = server.request("POST", "/v1/unload_lora_adapter", json.dumps({"lora_name": "b2"}).encode())
    assert status == 200
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="b2", prompt=PROMPT, max_tokens=2)
    status, body = server.json("/v1/unload_lora_adapter", {"lora_name": "b2"})
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_an_adapter_of_another_foundation_is_refused(server):
    # The generation fixture's tiny Llama: the same layers, another foundation.
    other = os.path.join(os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"]), "batch", "a.ptd")
    status, body = server.json("/v1/load_lora_adapter", {"lora_name": "stranger", "lora_path": other})
    assert status == 400 and "foundation" in body["error"]["message"], body
    assert "\n" not in body["error"]["message"]
    assert "stranger" not in [m.id for m in server.client().models.list().data]
    status, body = server.json("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/no/such.ptd"})
    assert status == 400 and "no adapter file" in body["error"]["message"]


def _error(server: Server, path: str, body: bytes, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict]:
    status, data = server.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
    error = json.loads(data)["error"]
    assert set(error) == {"message", "type", "param", "code"} and "\n" not in error["message"]
    return status, error


def test_errors_are_openai_error_json_with_their_status(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert "nope" in str(unknown.value) and "tiny, a, b" in str(unknown.value)
    with pytest.raises(openai.BadRequestError, match="n = 1"):
        client.completions.create(model="a", prompt=PROMPT, n=2)
    long_prompt = " ".join(["once"] * (MAX_SEQ_LEN * 2))
    with pytest.raises(openai.BadRequestError, match=f"context is {MAX_SEQ_LEN} tokens"):
        client.completions.create(model="a", prompt=long_prompt, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="'temperature' is 5"):
        client.completions.create(model="a", prompt=PROMPT, temperature=5)
    path = "/v1/chat/completions"
    status, error = _error(server, path, b'{"model": "a", "messages": [')
    assert status == 400 and "not JSON" in error["message"]
    status, error = _error(server, path, b'{"model": "a", "messages": [{"role": "user", "content": "\xff\xfe"}]}')
    assert status == 400 and "not UTF-8" in error["message"]
    status, error = _error(server, path, b"[1, 2]")
    assert status == 400 and "JSON object" in error["message"]
    status, error = _error(server, path, b'{"model": "a", "temperature": NaN, "messages": []}')
    assert status == 400 and "NaN is not a JSON value" in error["message"]
    status, error = _error(server, path, b"[" * 100000)
    assert status == 400 and "nested too deeply" in error["message"]
    # Refused from its Content-Length, before the body is sent.
    with socket.create_connection(("127.0.0.1", server.port), timeout=REQUEST_S) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (5 << 20))
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413"), reply
    assert "larger than 4194304 bytes" in json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["message"]
    status, error = _error(server, "/v1/completions", json.dumps({"prompt": [10**6]}).encode())
    assert status == 400 and "vocabulary" in error["message"]
    status, error = _error(server, "/v1/completions", json.dumps({"prompt": [5, 10**30]}).encode())
    assert status == 400 and "ids are >= 0" in error["message"]
    status, error = _error(server, "/v1/completions", json.dumps({"prompt": PROMPT, "lora": [{"id": 5}]}).encode())
    assert status == 400 and "holds no adapter" in error["message"]
    status, data = server.request("GET", "/v1/nothing")
    assert status == 404 and "error" in json.loads(data)


def _open_stream(server: Server, model: str) -> socket.socket:
    """A completion streamed to the end of the context whose first event has arrived."""
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": MAX_SEQ_LEN, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=REQUEST_S)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    seen = b""
    while b"data: " not in seen:
        chunk = sock.recv(65536)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen
    return sock


def _wait_for(condition: Any, what: str, timeout: float = REQUEST_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_client_gone_mid_stream_is_cancelled_and_frees_its_slot(server):
    cancelled = server.metric("edgeshare:requests_cancelled_total")
    predicted = server.metric("llamacpp:tokens_predicted_total")
    _open_stream(server, "a").close()  # ~2000 tokens to go
    _wait_for(lambda: server.metric("edgeshare:requests_cancelled_total") == cancelled + 1, "the request cancelled")
    _wait_for(lambda: server.metric("llamacpp:requests_processing") == 0, "its slot freed")
    assert server.metric("llamacpp:tokens_predicted_total") - predicted < MAX_SEQ_LEN - 100
    reply = server.client().completions.create(model="a", prompt=PROMPT, max_tokens=2, temperature=0)
    assert reply.usage.completion_tokens >= 1


def test_requests_past_the_slots_and_the_queue_are_429(export):
    """One slot and no queue: of requests sent at once, each generating to the end of the context,
    the first runs and those arriving while it runs are refused with 429; nothing else fails."""
    one = Server(export, "--slots", "1", "--max-queue", "0")
    try:
        statuses: List[int] = []

        def send() -> None:
            body = {"model": "b", "prompt": PROMPT, "max_tokens": MAX_SEQ_LEN, "temperature": 0, "ignore_eos": True}
            status, data = one.request("POST", "/v1/completions", json.dumps(body).encode(),
                                       {"Content-Type": "application/json"})
            if status == 429:
                assert "busy" in json.loads(data)["error"]["message"]
            statuses.append(status)

        threads = [threading.Thread(target=send) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=REQUEST_S)
        assert len(statuses) == 8 and set(statuses) == {200, 429}, statuses
        assert one.metric("edgeshare:requests_rejected_total") == statuses.count(429)
        with pytest.raises(openai.RateLimitError):
            with one.client().completions.create(model="a", prompt=PROMPT, max_tokens=MAX_SEQ_LEN, temperature=0,
                                                 stream=True, extra_body={"ignore_eos": True}) as held:
                next(iter(held))
                one.client().completions.create(model="a", prompt=PROMPT, max_tokens=2)
    finally:
        stderr = one.stop(signal.SIGINT)
    # Ctrl-C: a quiet stop (the start line, the shell's newline) with the shell's status.
    assert one.proc.returncode == 130 and stderr == one.first_line + "\n\n", stderr


def test_a_thousand_idle_connections_do_not_stop_a_request(server):
    limit, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limit < 2048 and (hard == resource.RLIM_INFINITY or hard >= 2048):
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    idle: List[socket.socket] = []
    try:
        for _ in range(1000):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=REQUEST_S))
        for _ in range(50):  # and some that stop halfway through a request's body
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=REQUEST_S)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            idle.append(sock)
        reply = server.client().chat.completions.create(model="a", messages=MESSAGES, max_tokens=4, temperature=0)
        assert reply.choices[0].message.content is not None
    finally:
        for sock in idle:
            sock.close()


def test_health_and_metrics(server):
    assert server.json("/health") == (200, {"status": "ok"})
    status, data = server.request("GET", "/metrics")
    text = data.decode()
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:requests_processing",
                 "llamacpp:requests_deferred", "llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds"):
        assert re.search(rf"^# TYPE {name} (counter|gauge)$", text, re.M), name


def test_curl_streams_events_ending_in_done(server):
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl on this machine")
    body = json.dumps({"model": "a", "messages": MESSAGES, "max_tokens": 4, "temperature": 0, "stream": True})
    proc = subprocess.run([curl, "-sS", "-N", "--max-time", str(REQUEST_S), f"{server.base_url}/chat/completions",
                           "-H", "Content-Type: application/json", "-d", body], capture_output=True, text=True,
                          timeout=REQUEST_S + 10, check=False)
    assert proc.returncode == 0, proc.stderr
    events = [line for line in proc.stdout.split("\n\n") if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: {") for e in events[:-1])
    assert json.loads(events[0][6:])["object"] == "chat.completion.chunk"


def test_bad_flags_and_folders_are_one_line(export, tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", "import sys; from edgeshare.extension.python.serve_cli import main; "
                   "sys.exit(main())", *args]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=START_S, check=False)

    for args, status, words in [
        ((str(tmp_path),), 1, "no batch.json"),
        ((export, "--slots", "9"), 2, "1..2 sequences"),
        ((export, "--port", "-1"), 2, "--port is -1"),
        ((export, "--max-queue", "-3"), 2, "--max-queue is -3"),
    ]:
        proc = run(*args, "--port", "0") if "--port" not in args else run(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == status and len(lines) == 1 and words in lines[0], proc.stderr


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
