"""llamacpp_peer: the llama.cpp side of `bench/llm --peer llamacpp`, one short process per job.

It runs in its own venv (llama-cpp-python==0.3.36 built from source for this CPU, with torch,
transformers and sentencepiece for the converters; made by bench/_llm_peer_llamacpp.py), never
inside the Bazel build: it imports nothing of edgeshare. Three commands, each printing ONE JSON line
(or {"error": "..."} and exit status 1):

    python llamacpp_peer.py convert --converters DIR --model-dir HF_DIR --out DIR
        --outtype f32 [--outtype f16 ...] [--quantize q4_0 ...] [--adapter NAME=PEFT_DIR ...]
      -> {"models": {TYPE: {"path", "bytes", "convert_s"}}, "adapters": {NAME: {...}}}

converts the Hugging Face model with the converters of the same llama.cpp
(DIR/convert_hf_to_gguf.py --outtype TYPE; DIR/convert_lora_to_gguf.py --base for each PEFT
adapter, in F32), and makes each --quantize type from the F32 file with llama_model_quantize (the
package builds no llama-quantize binary). The converter refuses a model without a tokenizer: when
the folder has none, it is given a copy of the folder (links) with a placeholder SentencePiece
tokenizer.model of exactly vocab_size pieces; the bench feeds token ids, so its content never
matters.

    python llamacpp_peer.py generate --model GGUF [--lora GGUF ...] [--active N] --prompt IDS.npy
        --new-tokens K --n-ctx N --threads T --flash-attn off|on|auto [--warmup-tokens W] [--switch-rounds R]
      -> {"tokens": [K ids], "prefill_ms", "decode_tokens_per_s", "first_prefill_ms", "load_ms",
          "rss_before_load_kib", "n_vocab", "flash_attn"}

greedy decoding through the low-level API (llama_decode, llama_get_logits_ith), timed as
edgeshare's generation::Generator times it: prefill is the prompt's llama_decode and the first
token's argmax; decode tokens/s counts the K-1 further one-token calls, each feeding the previous
argmax back. Every --lora is loaded (llama_adapter_lora_init) and the --active one is set on the
context at scale 1 (llama_set_adapters_lora; -1: none). Before the timed run, a warm-up
generation of W tokens (default 2) pages the mapped weights in and builds both graphs;
first_prefill_ms is that warm-up's prefill; the KV cache is cleared between the two. With
--switch-rounds R and two or more --lora, it then times R rounds of switching to each adapter in
turn (llama_set_adapters_lora + llama_memory_clear): "switch_ms", one per switch.

    python llamacpp_peer.py logits --model GGUF [--lora GGUF ...] [--active N] --prompt IDS.npy
        --n-ctx N --threads T --out LOGITS.npy
      -> {"path", "positions", "n_vocab", "decode_s"}

the logits of every prompt position from one llama_decode of the whole prompt (a batch asking for
each position's output), saved as float32 [T, n_vocab]: what the bench compares with the fp32
model, as it does edgeshare's `forward`; decode_s is the llama_decode call and the rows' copy.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _placeholder_tokenizer(path: str, vocab_size: int) -> None:
    """A SentencePiece model of exactly vocab_size pieces: <unk>, <s>, </s>, then one piece per id."""
    from sentencepiece import sentencepiece_model_pb2 as pb  # noqa: PLC0415

    model = pb.ModelProto()
    model.trainer_spec.model_type = pb.TrainerSpec.BPE
    model.trainer_spec.vocab_size = vocab_size
    model.trainer_spec.unk_id, model.trainer_spec.bos_id, model.trainer_spec.eos_id = 0, 1, 2
    model.trainer_spec.pad_id = -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = False
    special = (
        ("<unk>", pb.ModelProto.SentencePiece.UNKNOWN),
        ("<s>", pb.ModelProto.SentencePiece.CONTROL),
        ("</s>", pb.ModelProto.SentencePiece.CONTROL),
    )
    for text, kind in special:
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = text, 0.0, kind
    for i in range(3, vocab_size):
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = f"\u2581t{i}", -float(i), pb.ModelProto.SentencePiece.NORMAL
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def _with_tokenizer(model_dir: str, out_dir: str) -> str:
    """model_dir if it has a tokenizer, else out_dir/hf: links to its files and a placeholder one."""
    names = os.listdir(model_dir)
    if "tokenizer.model" in names or "tokenizer.json" in names:
        return model_dir
    folder = os.path.join(out_dir, "hf")
    os.makedirs(folder, exist_ok=True)
    for name in names:
        link = os.path.join(folder, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(model_dir, name)), link)
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab_size = int(json.load(f)["vocab_size"])
    _placeholder_tokenizer(os.path.join(folder, "tokenizer.model"), vocab_size)
    return folder


def _run_converter(args: List[str], what: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable] + args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{what} failed ({proc.returncode}): {tail}")
    return time.perf_counter() - start


def _entry(path: str, seconds: float) -> Dict[str, Any]:
    return {"path": path, "bytes": os.path.getsize(path), "convert_s": seconds}


def _quantize(source: str, target: str, kind: str, threads: int) -> float:
    import llama_cpp  # noqa: PLC0415

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
    if ftype is None:
        raise RuntimeError(f"llama_cpp has no LLAMA_FTYPE_MOSTLY_{kind.upper()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    start = time.perf_counter()
    if llama_cpp.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize to {kind} failed")
    return time.perf_counter() - start


def convert(args: argparse.Namespace) -> Dict[str, Any]:
    """The convert command (see the module doc)."""
    os.makedirs(args.out, exist_ok=True)
    base = _with_tokenizer(args.model_dir, args.out)
    outtypes = list(dict.fromkeys(args.outtype + (["f32"] if args.quantize else [])))
    models: Dict[str, Any] = {}
    for kind in outtypes:
        path = os.path.join(args.out, f"model-{kind}.gguf")
        script = os.path.join(args.converters, "convert_hf_to_gguf.py")
        seconds = _run_converter([script, base, "--outtype", kind, "--outfile", path], f"convert_hf_to_gguf {kind}")
        models[kind] = _entry(path, seconds)
    for kind in args.quantize:
        path = os.path.join(args.out, f"model-{kind}.gguf")
        models[kind] = _entry(path, _quantize(models["f32"]["path"], path, kind, args.threads))
    adapters: Dict[str, Any] = {}
    for spec in args.adapter:
        name, _, folder = spec.partition("=")
        path = os.path.join(args.out, f"{name}-f32.gguf")
        script = os.path.join(args.converters, "convert_lora_to_gguf.py")
        argv = [script, folder, "--base", base, "--outtype", "f32", "--outfile", path]
        adapters[name] = _entry(path, _run_converter(argv, f"convert_lora_to_gguf {name}"))
    return {"models": models, "adapters": adapters}


class _Generator:
    """A loaded model, its context and adapters: greedy generation through the low-level API."""

    def __init__(self, args: argparse.Namespace) -> None:
        import llama_cpp  # noqa: PLC0415

        self.ll = llama_cpp
        llama_cpp.llama_backend_init()
        self._quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(self._quiet, ctypes.c_void_p())
        self.model = llama_cpp.llama_model_load_from_file(args.model.encode(), llama_cpp.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama_model_load_from_file failed: {args.model}")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = args.n_ctx
        params.n_batch = max(args.n_ctx, 512)
        params.n_threads = args.threads
        params.n_threads_batch = args.threads
        params.flash_attn_type = {
            "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
            "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
        }[args.flash_attn]
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama_init_from_model failed (n_ctx {args.n_ctx})")
        self.adapters = []
        for path in args.lora:
            adapter = llama_cpp.llama_adapter_lora_init(self.model, path.encode())
            if not adapter:
                raise RuntimeError(f"llama_adapter_lora_init failed: {path}")
            self.adapters.append(adapter)
        if args.active >= 0:
            chosen = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self.adapters[args.active])
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(self.ctx, chosen, 1, scales) != 0:
                raise RuntimeError("llama_set_adapters_lora failed")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))

    def switch(self, index: int) -> float:
        """ms to make adapter `index` the active one (scale 1) and clear the KV cache: llama.cpp's
        adapter switch, the counterpart of edgeshare's Method::rebind_data (which resets the state)."""
        chosen = (self.ll.llama_adapter_lora_p_ctypes * 1)(self.adapters[index])
        scales = (ctypes.c_float * 1)(1.0)
        start = time.perf_counter()
        if self.ll.llama_set_adapters_lora(self.ctx, chosen, 1, scales) != 0:
            raise RuntimeError("llama_set_adapters_lora failed")
        self.ll.llama_memory_clear(self.ll.llama_get_memory(self.ctx), True)
        return (time.perf_counter() - start) * 1e3

    def _argmax(self) -> int:
        import numpy as np  # noqa: PLC0415

        logits = self.ll.llama_get_logits_ith(self.ctx, -1)
        return int(np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).argmax())

    def _decode(self, tokens: Sequence[int]) -> None:
        ids = (self.ll.llama_token * len(tokens))(*tokens)
        status = self.ll.llama_decode(self.ctx, self.ll.llama_batch_get_one(ids, len(tokens)))
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")

    def logits(self, prompt: Sequence[int]) -> Any:
        """float32 [T, n_vocab]: every prompt position's logits, from an empty KV cache."""
        import numpy as np  # noqa: PLC0415

        self.ll.llama_memory_clear(self.ll.llama_get_memory(self.ctx), True)
        batch = self.ll.llama_batch_init(len(prompt), 0, 1)
        try:
            for i, token in enumerate(prompt):
                batch.token[i] = token
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = len(prompt)
            status = self.ll.llama_decode(self.ctx, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status}")
            rows = [
                np.ctypeslib.as_array(self.ll.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
                for i in range(len(prompt))
            ]
        finally:
            self.ll.llama_batch_free(batch)
        return np.stack(rows).astype(np.float32)

    def generate(self, prompt: Sequence[int], new_tokens: int) -> Dict[str, Any]:
        """Greedy from an empty KV cache -> tokens, prefill_ms, decode_tokens_per_s."""
        self.ll.llama_memory_clear(self.ll.llama_get_memory(self.ctx), True)
        start = time.perf_counter()
        self._decode(prompt)
        token = self._argmax()
        prefill_ms = (time.perf_counter() - start) * 1e3
        tokens = [token]
        start = time.perf_counter()
        for _ in range(new_tokens - 1):
            self._decode([token])
            token = self._argmax()
            tokens.append(token)
        decode_s = time.perf_counter() - start
        rate = (new_tokens - 1) / decode_s if new_tokens > 1 and decode_s > 0 else 0.0
        return {"tokens": tokens, "prefill_ms": prefill_ms, "decode_tokens_per_s": rate}


def generate(args: argparse.Namespace) -> Dict[str, Any]:
    """The generate command (see the module doc)."""
    import numpy as np  # noqa: PLC0415

    prompt = [int(t) for t in np.load(args.prompt).reshape(-1)]
    rss_before = _rss_kib()
    start = time.perf_counter()
    generator = _Generator(args)
    load_ms = (time.perf_counter() - start) * 1e3
    if max(prompt) >= generator.n_vocab:
        raise RuntimeError(f"prompt id {max(prompt)} is outside the model's {generator.n_vocab} tokens")
    first = generator.generate(prompt, max(1, args.warmup_tokens))
    out = generator.generate(prompt, args.new_tokens)
    if args.switch_rounds > 0 and len(generator.adapters) > 1:
        order = list(range(1, len(generator.adapters))) + [0]
        out["switch_ms"] = [generator.switch(i) for _ in range(args.switch_rounds) for i in order]
    out.update(
        {
            "first_prefill_ms": first["prefill_ms"],
            "load_ms": load_ms,
            "rss_before_load_kib": rss_before,
            "n_vocab": generator.n_vocab,
            "flash_attn": args.flash_attn,
        }
    )
    return out


def logits(args: argparse.Namespace) -> Dict[str, Any]:
    """The logits command (see the module doc)."""
    import numpy as np  # noqa: PLC0415

    prompt = [int(t) for t in np.load(args.prompt).reshape(-1)]
    generator = _Generator(args)
    if max(prompt) >= generator.n_vocab:
        raise RuntimeError(f"prompt id {max(prompt)} is outside the model's {generator.n_vocab} tokens")
    start = time.perf_counter()
    rows = generator.logits(prompt)
    decode_s = time.perf_counter() - start
    np.save(args.out, rows)
    return {"path": args.out, "positions": int(rows.shape[0]), "n_vocab": int(rows.shape[1]), "decode_s": decode_s}


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    """What _Generator reads: the model, its adapters, the context."""
    parser.add_argument("--model", required=True)
    parser.add_argument("--lora", action="append", default=[])
    parser.add_argument("--active", type=int, default=-1)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--n-ctx", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--flash-attn", choices=["off", "on", "auto"], default="off")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llamacpp_peer", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    conv = commands.add_parser("convert")
    conv.add_argument("--converters", required=True)
    conv.add_argument("--model-dir", required=True)
    conv.add_argument("--out", required=True)
    conv.add_argument("--outtype", action="append", default=[], choices=["f32", "f16", "bf16", "q8_0"])
    conv.add_argument("--quantize", action="append", default=[], choices=["q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m"])
    conv.add_argument("--adapter", action="append", default=[], help="NAME=PEFT_DIR")
    conv.add_argument("--threads", type=int, default=1)
    gen = commands.add_parser("generate")
    _model_arguments(gen)
    gen.add_argument("--new-tokens", type=int, required=True)
    gen.add_argument("--warmup-tokens", type=int, default=2)
    gen.add_argument("--switch-rounds", type=int, default=0, help="then time switches, rounds over every --lora")
    out = commands.add_parser("logits")
    _model_arguments(out)
    out.add_argument("--out", required=True)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs one command; prints its JSON line."""
    args = _parser().parse_args(argv)
    try:
        out = {"convert": convert, "generate": generate, "logits": logits}[args.command](args)
    except Exception as e:  # noqa: BLE001 - the bench reads one JSON line either way
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
