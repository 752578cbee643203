"""bench/serve's load client against a real streaming HTTP server in this process (loopback, SSE
over chunked HTTP/1.1, as edgeshare-serve and llama-server answer), its statistics, and the
bench's argument errors. Fast: no model, no export."""

import http.server
import json
import math
import socketserver
import threading
import time
from typing import Dict, Iterator, List

import numpy as np
import pytest
from edgeshare.bench import serve
from edgeshare.bench._serve_client import LoadRequest, Outcome, RunResult, percentile, run_load, summarise

# Seconds the test server waits between two streamed tokens.
GAP_S = 0.01


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Streaming"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.bodies.append(body)
            self.server.in_flight += 1
            self.server.most = max(self.server.most, self.server.in_flight)
        try:
            if body["model"] == "missing":
                data = b'{"error": {"message": "no such model"}}'
                self.send_response(404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = [{"choices": [{"text": f" t{i}"}]} for i in range(body["max_tokens"])]
            events.append({"choices": [], "usage": {"completion_tokens": body["max_tokens"]}})
            for event in events:
                time.sleep(GAP_S)
                self._chunk(f"data: {json.dumps(event)}\n\n".encode())
            if body["model"] != "cut":
                self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Streaming(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.bodies: List[Dict] = []
        self.in_flight = 0
        self.most = 0


@pytest.fixture
def streaming() -> Iterator[_Streaming]:
    server = _Streaming()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _url(server: _Streaming) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_run_load_sends_each_request_once_at_the_concurrency(streaming: _Streaming) -> None:
    requests = [LoadRequest(f"adapter{i % 3}", [5, 6, 7], 4 + i % 2) for i in range(12)]
    result = run_load(_url(streaming), requests, concurrency=3, timeout_s=30)
    assert streaming.most == 3
    assert sorted(b["model"] for b in streaming.bodies) == sorted(r.model for r in requests)
    assert all(b["stream"] and b["ignore_eos"] and b["temperature"] == 0.0 for b in streaming.bodies)
    assert [o.tokens for o in result.outcomes] == [r.max_tokens for r in requests]
    assert [o.text for o in result.outcomes] == ["".join(f" t{i}" for i in range(r.max_tokens)) for r in requests]
    figures = summarise(result)
    assert figures["failures"] == 0
    assert figures["output_tokens"] == sum(r.max_tokens for r in requests)
    assert figures["tokens_per_s"] == pytest.approx(figures["output_tokens"] / result.wall_s)
    # The server sleeps GAP_S before each event: the first token after one gap, the next ones a gap apart.
    assert GAP_S * 1e3 <= figures["ttft_ms_p50"] < 1000
    assert GAP_S * 1e3 * 0.8 <= figures["itl_ms_p50"] < 1000


def test_run_load_sends_llamacpp_lora_field(streaming: _Streaming) -> None:
    run_load(_url(streaming), [LoadRequest("x", [1], 1, [{"id": 3, "scale": 1.0}])], concurrency=1, timeout_s=30)
    assert streaming.bodies[0]["lora"] == [{"id": 3, "scale": 1.0}]
    assert streaming.bodies[0]["prompt"] == [1]


def test_failures_are_counted_not_timed(streaming: _Streaming) -> None:
    requests = [LoadRequest("ok", [1], 3), LoadRequest("missing", [1], 3), LoadRequest("cut", [1], 3)]
    result = run_load(_url(streaming), requests, concurrency=2, timeout_s=30)
    errors = [o.error for o in result.outcomes]
    assert errors[0] == ""
    assert errors[1].startswith("status 404:") and "no such model" in errors[1]
    assert errors[2] == "the stream ended without [DONE]"
    figures = summarise(result)
    assert (figures["requests"], figures["failures"], figures["output_tokens"]) == (3, 2, 3)


def test_an_unreachable_server_is_a_failure_not_a_crash() -> None:
    result = run_load("http://127.0.0.1:9/v1", [LoadRequest("a", [1], 2)], concurrency=1, timeout_s=5)
    assert result.outcomes[0].error
    assert summarise(result)["failures"] == 1


def test_percentile_matches_numpy() -> None:
    values = [5.0, 1.0, 9.0, 3.0, 7.5, 2.25, 100.0]
    for q in (0, 1, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="outside 0..100"):
        percentile(values, 101)


def test_summarise_pools_gaps_over_requests() -> None:
    outcomes = [
        Outcome(sent=0.0, chunks=[0.1, 0.2, 0.4], tokens=3),
        Outcome(sent=1.0, chunks=[1.3, 1.4], tokens=2),
        Outcome(sent=2.0, chunks=[2.5], tokens=1, error="status 500: boom"),
    ]
    figures = summarise(RunResult(outcomes, wall_s=2.0))
    assert figures["requests"] == 3 and figures["failures"] == 1
    assert figures["output_tokens"] == 5 and figures["tokens_per_s"] == pytest.approx(2.5)
    assert figures["ttft_ms_p50"] == pytest.approx(200.0)
    # Gaps 100, 200 (first request) and 100 (second); the failed request's chunk is not a gap.
    assert figures["itl_ms_p50"] == pytest.approx(100.0)
    assert figures["itl_ms_p99"] == pytest.approx(float(np.percentile([100.0, 200.0, 100.0], 99)))


def test_run_load_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="concurrency is 0"):
        run_load("http://127.0.0.1:9/v1", [LoadRequest("a", [1], 1)], concurrency=0)
    with pytest.raises(ValueError, match="no requests"):
        run_load("http://127.0.0.1:9/v1", [], concurrency=1)


def test_requests_round_robin_over_adapters_with_the_same_prompts() -> None:
    ours = serve.make_requests(16, 8, 5, 1000, llamacpp=False)
    theirs = serve.make_requests(16, 8, 5, 1000, llamacpp=True)
    assert [r.model for r in ours[:9]] == [f"adapter{i}" for i in range(1, 9)] + ["adapter1"]
    assert [r.lora for r in theirs[:9]] == [[{"id": i % 8, "scale": 1.0}] for i in range(9)]
    assert all(r.lora is None for r in ours)
    assert [list(r.prompt) for r in ours] == [list(r.prompt) for r in theirs]
    assert len({tuple(r.prompt) for r in ours}) == 16
    assert all(len(r.prompt) == 8 and min(r.prompt) >= 3 and max(r.prompt) < 1000 for r in ours)


def test_agreement_counts_same_texts_and_distinct_ones() -> None:
    ours = [Outcome(0.0, text=t) for t in (" t1 t2 t3", " t4 t5", " t4 t5")]
    theirs = [Outcome(0.0, text=t) for t in (" t1 t2 t9", " t4 t5", " t6")]
    assert serve.agreement(ours, theirs, words=2) == {
        "same_first_token": 2,
        "same_first_tokens": 2,
        "edgeshare_distinct_texts": 2,
        "llamacpp_distinct_texts": 3,
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--formats", "int8,fp8"], "--formats: unknown fp8"),
        (["--concurrency", "1,x"], "--concurrency: '1,x' is not comma-separated integers"),
        (["--concurrency", "16"], "--concurrency: each must be 1..8"),
        (["--requests", "0"], "--requests is 0: it must be >= 1"),
        (["--prompt-len", "100", "--max-tokens", "64"], "exceed the model's 128 positions"),
        (["--model", "llama9"], "invalid choice: 'llama9'"),
        (["--prepare-only"], "--prepare-only needs --work"),
    ],
)
def test_bad_arguments_exit_with_one_line(argv: List[str], message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        serve.parse_options(argv)
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error


def test_good_arguments() -> None:
    options = serve.parse_options(["--formats", "int4", "--concurrency", "8", "--no-load"])
    assert options.formats == ["int4"] and list(options.concurrency) == [8] and not options.load
    assert (options.requests, options.max_tokens, options.threads) == (64, 64, 2)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
