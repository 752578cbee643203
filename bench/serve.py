"""./bazelw run -c opt //bench:serve: edgeshare-serve against llama.cpp's llama-server under the same
loopback load, 8 adapters, per-request adapters.

bench/batch's models (bench/_llm_model.py, seeded weights: "bench", Llama 4 layers, hidden 1024,
vocab 32000, 8 PEFT LoRA r16 on q,k,v,o; or --model smollm2, the SmolLM2-135M shape) are written
once; llama.cpp's converters make the GGUF model (Q8_0; Q4_0 quantized from F32) and the 8 adapters
(F32 GGUF LoRA), and edgeshare exports a batch (export_hf_batch: 8 slots, 9 adapter slots, fp16
adapter tables) per format: int8 beside Q8_0, int4 in groups of 32 beside Q4_0. Both servers get
the same tokenizer: the placeholder SentencePiece model the conversion made (one piece per id), as
the prompts are token ids. Then both servers run at once on free loopback ports, 2 threads each:
`tools/serve FOLDER --slots 8 --threads 2` and `llama-server -m GGUF --lora A1,...,A8
--lora-init-without-apply -np 8 -t 2 -tb 2 -c 8*max_seq_len` (built by bench/_serve_servers.py).

The same client (bench/_serve_client.py) sends each the same requests: --requests streamed
/v1/completions, greedy, ignore_eos, a seeded random prompt of --prompt-len ids each, --max-tokens
each, round-robin over the 8 adapters (edgeshare: `model` = the adapter's name; llama.cpp:
`lora: [{"id": i, "scale": 1}]`), at concurrency 1, 2, 4 and 8, the two servers interleaved, every
concurrency --repeats times. At concurrency 8 edgeshare also runs once more per repeat with an
adapter loaded while it runs (POST /v1/load_lora_adapter when a quarter of the requests are sent;
unloaded after; the last run of the first repeat, the first of the second, and so on): its p99
inter-token latency against the run without. The table gives medians over
the repeats; failures are summed.

    ./bazelw run -c opt //bench:serve -- [--model bench|smollm2] [--formats int8,int4] [--threads 2]
        [--requests 64] [--repeats 3] [--prompt-len 32] [--max-tokens 64] [--work DIR] [--json F]

--work keeps the model, the conversions and the exports between runs (reused when present);
--prepare-only writes them there and stops, so that the timed run can wait for a quiet machine.
"""

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from edgeshare.bench._serve_client import LoadRequest, run_load, summarise
from edgeshare.bench.batch import MODELS

SEQUENCES = (1, 2, 4, 8)
ADAPTERS = 8
FORMATS = {"int8": "Q8_0", "int4": "Q4_0"}


@dataclasses.dataclass(frozen=True)
class Options:
    """What one run measures (see the module doc)."""

    model: str
    formats: Sequence[str]
    threads: int
    requests: int
    repeats: int
    prompt_len: int
    max_tokens: int
    concurrency: Sequence[int]
    load: bool
    work: Optional[str] = None
    json: Optional[str] = None
    prepare_only: bool = False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="bench")
    parser.add_argument("--formats", default="int8,int4", help="comma-separated: int8 (vs Q8_0), int4 (vs Q4_0)")
    parser.add_argument("--threads", type=int, default=2, help="each server's threads")
    parser.add_argument("--requests", type=int, default=64, help="requests per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per concurrency and server, interleaved")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per request")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated requests in flight")
    parser.add_argument("--no-load", action="store_true", help="skip the run with an adapter loaded mid-run")
    parser.add_argument("--work", help="keep the model, conversions and exports here (reused)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="write the model, GGUF files and exports into --work and stop (time later)")
    parser.add_argument("--json", help="write the rows here")
    return parser


def parse_options(argv: Optional[Sequence[str]]) -> Options:
    """The command line -> Options; a bad value exits with one line and status 2 (argparse)."""
    parser = _parser()
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(FORMATS))
    if not formats or unknown:
        parser.error(f"--formats: unknown {', '.join(unknown) or '(none given)'} ({', '.join(FORMATS)})")
    try:
        concurrency = [int(c) for c in args.concurrency.split(",") if c]
    except ValueError:
        parser.error(f"--concurrency: {args.concurrency!r} is not comma-separated integers")
    for flag, value in (("--threads", args.threads), ("--requests", args.requests), ("--repeats", args.repeats),
                        ("--prompt-len", args.prompt_len), ("--max-tokens", args.max_tokens)):
        if value < 1:
            parser.error(f"{flag} is {value}: it must be >= 1")
    if not concurrency or min(concurrency) < 1 or max(concurrency) > ADAPTERS:
        parser.error(f"--concurrency: each must be 1..{ADAPTERS} (the servers' slots)")
    if args.prepare_only and not args.work:
        parser.error("--prepare-only needs --work (where the files are kept)")
    bound = MODELS[args.model].max_seq_len
    if args.prompt_len + args.max_tokens > bound:
        parser.error(
            f"--prompt-len {args.prompt_len} + --max-tokens {args.max_tokens} exceed the model's {bound} positions"
        )
    return Options(args.model, formats, args.threads, args.requests, args.repeats, args.prompt_len,
                   args.max_tokens, concurrency, not args.no_load, args.work, args.json,
                   args.prepare_only)


def make_requests(count: int, prompt_len: int, max_tokens: int, vocab: int, llamacpp: bool) -> List[LoadRequest]:
    """The run's requests: request i has a prompt of seeded ids in [3, vocab) (seed i, the same on
    both sides) and adapter i % 8, named for edgeshare or given as llama.cpp's lora id."""
    requests = []
    for i in range(count):
        prompt = np.random.default_rng(i).integers(3, vocab, size=prompt_len).tolist()
        adapter = i % ADAPTERS
        lora = [{"id": adapter, "scale": 1.0}] if llamacpp else None
        requests.append(LoadRequest(f"adapter{adapter + 1}", prompt, max_tokens, lora))
    return requests


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _prepare(options: Options, work: str) -> Dict[str, Any]:
    """The model, its GGUF files and the batch exports under `work` (reused when there)."""
    # The exporter and the peers' modules only when a run happens.
    from edgeshare.backends.xnnpack import XnnpackPartitioner  # noqa: PLC0415
    from edgeshare.bench._llm_model import LlmFiles, save_llm  # noqa: PLC0415
    from edgeshare.bench._llm_peer_llamacpp import FORMATS as GGUF_FORMATS  # noqa: PLC0415
    from edgeshare.bench._llm_peer_llamacpp import convert_once  # noqa: PLC0415
    from edgeshare.exir import export_hf_batch  # noqa: PLC0415
    from edgeshare.exir.hf_batch import TABLE_DTYPES  # noqa: PLC0415

    spec = MODELS[options.model]
    model_root = os.path.join(work, "model")
    names = [f"adapter{i}" for i in range(1, ADAPTERS + 1)]
    if os.path.exists(os.path.join(model_root, "model", "config.json")):
        files = LlmFiles(os.path.join(model_root, "model"), {n: os.path.join(model_root, n) for n in names})
    else:
        _say(f"[serve] writing {options.model} and {ADAPTERS} adapters")
        files = save_llm(spec, model_root)
    gguf_dir = os.path.join(work, "gguf")
    wanted = [f for f in GGUF_FORMATS if f.name in {FORMATS[x] for x in FORMATS}]
    converted = convert_once(files, gguf_dir, wanted, _say)
    tokenizer = os.path.join(gguf_dir, "hf", "tokenizer.model")
    exports: Dict[str, str] = {}
    for fmt in options.formats:
        out = os.path.join(work, f"batch-{fmt}")
        if not os.path.exists(os.path.join(out, "batch.json")):
            _say(f"[serve] exporting {options.model} {fmt} as a batch")
            shutil.rmtree(out, ignore_errors=True)
            options_ = {"quantize": fmt, **({"group_size": 32} if fmt == "int4" else {})}
            export_hf_batch(
                files.model_dir,
                files.adapter_dirs,
                out,
                slots=ADAPTERS,
                max_seq_len=spec.max_seq_len,
                adapter_slots=ADAPTERS + 1,
                max_rows=64,
                partitioner=XnnpackPartitioner(**options_),
                table_dtype=TABLE_DTYPES["fp16"],
            )
            shutil.copy(tokenizer, os.path.join(out, "tokenizer.model"))
        exports[fmt] = out
    ggufs = {fmt: converted["models"][FORMATS[fmt].lower()]["path"] for fmt in options.formats}
    adapters = [converted["adapters"][n]["path"] for n in names]
    return {"spec": spec, "exports": exports, "ggufs": ggufs, "adapters": adapters}


def _post(url: str, body: Dict[str, Any]) -> Dict[str, Any]:
    """POSTs a JSON body -> its status, the milliseconds it took and the start of its text. Plain
    blocking urllib: an httpx client made on the load's event loop held that loop for 20-50 ms
    (its TLS context), stalling every stream the run was reading: the client's pause, not the
    server's, in the run's inter-token latency."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            status, text = reply.status, reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode("utf-8", "replace")
    return {"status": status, "ms": (time.perf_counter() - start) * 1e3, "text": text[:200]}


def _timed(server: Any, requests: List[LoadRequest], concurrency: int, live: Optional[Dict[str, str]] = None,
           loads: Optional[List[Dict[str, Any]]] = None) -> Dict[str, float]:
    """One run -> summarise()'s figures; with `live`, that adapter is loaded when a quarter of the
    requests are sent (its reply appended to `loads`) and unloaded after the run."""
    during = None
    if live is not None:
        at = len(requests) // 4
        root = server.base_url.rsplit("/v1", 1)[0]

        async def load() -> None:
            # On a thread of its own, as an operator's request from another process would be.
            reply = await asyncio.get_running_loop().run_in_executor(
                None, _post, f"{root}/v1/load_lora_adapter", live)
            if loads is not None:
                loads.append(reply)

        def during(index: int):  # noqa: ANN202
            return load() if index == at else None

    figures = summarise(run_load(server.base_url, requests, concurrency, during=during))
    if live is not None:
        root = server.base_url.rsplit("/v1", 1)[0]
        reply = _post(f"{root}/v1/unload_lora_adapter", {"lora_name": live["lora_name"]})
        if reply["status"] != 200:
            raise RuntimeError(f"unloading {live['lora_name']}: {reply}")
    return figures


def measure(options: Options, work: str) -> List[Dict[str, Any]]:
    """Every format's servers, runs and rows (see the module doc)."""
    from edgeshare.bench._batch_llamacpp import cpu_has_amx  # noqa: PLC0415
    from edgeshare.bench._runner import tool_path  # noqa: PLC0415
    from edgeshare.bench._serve_servers import Server, free_port, llama_server_binary  # noqa: PLC0415

    prepared = _prepare(options, work)
    spec = prepared["spec"]
    binary = llama_server_binary(say=_say)
    ours = make_requests(options.requests, options.prompt_len, options.max_tokens, spec.vocab, llamacpp=False)
    theirs = make_requests(options.requests, options.prompt_len, options.max_tokens, spec.vocab, llamacpp=True)
    rows: List[Dict[str, Any]] = []
    for fmt in options.formats:
        folder = prepared["exports"][fmt]
        es_port, lc_port = free_port(), free_port()
        es_cmd = [tool_path("serve"), folder, "--port", str(es_port), "--threads", str(options.threads),
                  "--slots", str(ADAPTERS), "--max-queue", str(options.requests)]
        lc_cmd = [binary, "-m", prepared["ggufs"][fmt], "--host", "127.0.0.1", "--port", str(lc_port),
                  "-np", str(ADAPTERS), "-t", str(options.threads), "-tb", str(options.threads),
                  "-c", str(ADAPTERS * spec.max_seq_len), "--lora-init-without-apply",
                  "--lora", ",".join(prepared["adapters"])]
        if cpu_has_amx():
            # This llama.cpp's AMX path dies at start on this bench's Q8_0 and Q4_0 models (Illegal
            # instruction, Intel Xeon with amx_int8); -nr turns off its extra weight buffers, AMX's
            # and the repacked layouts with it (as bench/batch does for llama-batched-bench).
            lc_cmd.append("-nr")
            _say("[serve] this CPU has AMX: llama-server runs with -nr (no AMX, no repacked weights)")
        with Server("edgeshare-serve", es_cmd, es_port, os.path.join(work, f"edgeshare-{fmt}.log")) as es, \
                Server("llama-server", lc_cmd, lc_port, os.path.join(work, f"llama-server-{fmt}.log")) as lc:
            _say(f"[serve] {options.model} {fmt}: edgeshare on {es.port}, llama-server on {lc.port}; warming up")
            es_warm = run_load(es.base_url, ours[:ADAPTERS], ADAPTERS).outcomes
            lc_warm = run_load(lc.base_url, theirs[:ADAPTERS], ADAPTERS).outcomes
            check = agreement(es_warm, lc_warm)
            _say(f"[serve] {options.model} {fmt}: warm-up texts {check}")
            samples: Dict[Any, List[Dict[str, float]]] = {}
            loads: List[Dict[str, Any]] = []
            for r in range(options.repeats):
                for c in options.concurrency:
                    _say(f"[serve] {options.model} {fmt}: repeat {r + 1} of {options.repeats}, concurrency {c}")
                    runs = [("edgeshare", es, ours, None), ("llama.cpp", lc, theirs, None)]
                    if options.load and c == max(options.concurrency):
                        live = {"lora_name": f"live{r}", "lora_path": os.path.join(folder, "adapter1.ptd")}
                        # Every other repeat the load run goes first: "p99 / no load" compares two
                        # runs, and with one order only it would carry whatever the order does.
                        runs.insert(0 if r % 2 else len(runs), ("edgeshare", es, ours, live))
                    for side, server, requests, loaded in runs:
                        # A run starts with both servers idle, so it never shares the cores with
                        # the other's threads still winding down from the run before.
                        for idle in (es, lc):
                            idle.wait_idle()
                        figures = _timed(server, requests, c, loaded, loads if loaded else None)
                        samples.setdefault((side, c, loaded is not None), []).append(figures)
            failed_loads = [reply for reply in loads if reply["status"] != 200]
            if failed_loads:
                raise RuntimeError(f"a mid-run adapter load failed: {failed_loads[0]}")
        for row in _rows(options, fmt, samples, loads):
            rows.append({**row, **check})
    return rows


def agreement(ours: Sequence[Any], theirs: Sequence[Any], words: int = 8) -> Dict[str, int]:
    """How the two servers' warm-up texts (one request per adapter, same prompts) compare: on how
    many adapters their first token and their first `words` tokens are the same, and how many
    different texts each made (8 when every adapter changes the answer)."""
    same = sum(a.text.split()[:words] == b.text.split()[:words] for a, b in zip(ours, theirs))
    first = sum(a.text.split()[:1] == b.text.split()[:1] for a, b in zip(ours, theirs))
    return {
        "same_first_token": first,
        "same_first_tokens": same,
        "edgeshare_distinct_texts": len({o.text for o in ours}),
        "llamacpp_distinct_texts": len({o.text for o in theirs}),
    }


def _median(runs: Sequence[Dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _rows(options: Options, fmt: str, samples: Dict[Any, List[Dict[str, float]]],
          loads: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    rows = []
    for (side, c, live), runs in samples.items():
        row = {
            "model": options.model,
            "format": fmt if side == "edgeshare" else FORMATS[fmt],
            "server": side + (" + load mid-run" if live else ""),
            "concurrency": c,
            "runs": len(runs),
            "failures": sum(run["failures"] for run in runs),
            "tokens_per_request": _median(runs, "output_tokens") / options.requests,
        }
        for key in ("tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99"):
            row[key] = _median(runs, key)
        peer = samples.get(("llama.cpp", c, False))
        if side == "edgeshare" and peer:
            row["tokens_per_s_over_llamacpp"] = row["tokens_per_s"] / _median(peer, "tokens_per_s")
            row["ttft_p99_over_llamacpp"] = row["ttft_ms_p99"] / _median(peer, "ttft_ms_p99")
        if live:
            plain = samples[("edgeshare", c, False)]
            row["itl_p99_over_no_load"] = row["itl_ms_p99"] / _median(plain, "itl_ms_p99")
            row["load_ms"] = statistics.median(reply["ms"] for reply in loads)
        rows.append(row)
    return rows


def markdown(rows: List[Dict[str, Any]]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| model | format | server | conc. | output tok/s | x llama.cpp | TTFT p50 ms | TTFT p99 ms | p99 / llama.cpp "
        "| ITL p50 ms | ITL p99 ms | p99 / no load | tokens/request | failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def cell(row: Dict[str, Any], key: str, digits: int = 2) -> str:
        value = row.get(key)
        return "" if value is None else f"{value:.{digits}f}"

    for r in rows:
        lines.append(
            f"| {r['model']} | {r['format']} | {r['server']} | {r['concurrency']} | {cell(r, 'tokens_per_s', 1)} "
            f"| {cell(r, 'tokens_per_s_over_llamacpp')} | {cell(r, 'ttft_ms_p50', 1)} | {cell(r, 'ttft_ms_p99', 1)} "
            f"| {cell(r, 'ttft_p99_over_llamacpp')} | {cell(r, 'itl_ms_p50', 1)} | {cell(r, 'itl_ms_p99', 1)} "
            f"| {cell(r, 'itl_p99_over_no_load')} | {cell(r, 'tokens_per_request', 1)} | {int(r['failures'])} |"
        )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = parse_options(argv)
    warnings.filterwarnings("ignore")
    if options.work:
        os.makedirs(options.work, exist_ok=True)
        if options.prepare_only:
            _prepare(options, options.work)
            _say(f"[serve] prepared {options.model} ({', '.join(options.formats)}) in {options.work}")
            return 0
        rows = measure(options, options.work)
    else:
        with tempfile.TemporaryDirectory() as work:
            rows = measure(options, work)
    print(markdown(rows))
    if options.json:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
