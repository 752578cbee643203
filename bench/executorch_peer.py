"""executorch_peer: the ExecuTorch side of `bench/lora --peer executorch`, a long-lived process.

It runs in its own venv (torch + executorch from PyPI, made by bench/_peer.py), never inside the
Bazel build: it imports nothing of edgeshare. Started as

    python executorch_peer.py MANIFEST.json

where the manifest is {"out_dir": DIR, "programs": {NAME: {"pt2": FILE, "inputs": FILE,
"separate": BOOL, "dynamic_t_max": N?, "optional": BOOL?}}}: each FILE.pt2 is a torch.export.save'd
ExportedProgram of the SAME eager module the edgeshare side measured (same weights) and inputs a
torch.save'd tuple of tensors. Each program is lowered with ExecuTorch's XNNPACK flow
(to_edge_transform_and_lower + XnnpackPartitioner); with "separate", every weight except the LoRA
A/B matrices (and the KV cache's buffers) is tagged for the program-data separation of 1.5.1
(delegate_external_constants_pass_unlifted), so the foundation's weights land in foundation.ptd and
the adapter stays in the .pte, as edgeshare's export does. With "dynamic_t_max", dim 1 of the first
input (the tokens) is re-exported dynamic in 1..N: the KV-cache wrapper (edgeshare's
"forward_cached": input_ids [1, T], start_pos -> logits, the cache as buffers mutated in place),
which ExecuTorch keeps as mutable buffers in the method's planned memory across execute() calls,
so one method serves the prompt (T=32) and each decoded token (T=1). An "optional" program that
fails to lower is reported as {"error": "..."} in the ready line instead of failing the peer.

Each lowered program runs once against its exported module in torch ("max_abs_error").
It prints ONE JSON line when ready ({"ready": true, "programs": {NAME: {...sizes, export_s...}}}),
then answers JSON lines on stdin, one line each:

    {"program": NAME, "threads": N, "iterations": K, "warmup": W}  -> {"latency_ms": [K samples]}
    {"generate": NAME, "threads": N, "new_tokens": K, "warmup": W, "reload": BOOL}
        -> {"tokens": [K ids], "prefill_ms": ..., "decode_tokens_per_s": ...}
    {"quit": true}                                                 -> exits

"generate" is greedy decoding timed as edgeshare's generation::Generator times it: prefill is the
prompt's execute() (start_pos 0) and the first token's argmax; decode tokens/s counts the K-1
further T=1 calls (each feeding the previous argmax back at the next position). With "reload" the
program is loaded again (untimed) first, so the prefill is a new method's first execute(), as
tools/generate's is in its fresh process; without, the method has run before (warm). The Python binding
cannot reset a method's mutable buffers; it needs not: a new prompt at position 0 overwrites the
cache from the start and the causal mask hides whatever a previous generation left beyond it.

Each sample is the wall time of Method.execute() alone (the Python binding's call, XNNPACK's run and
the copy of the outputs into new tensors). Changing the thread count resets ExecuTorch's global
threadpool (_unsafe_reset_threadpool) and then reloads every method, because XNNPACK runtimes keep
the threadpool they were created with. Errors are one JSON line {"error": "..."}.
"""

import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

import torch

PTD_NAME = "foundation"


def _foundation_tag(node: torch.fx.Node) -> Optional[str]:
    """foundation.ptd for every weight but the adapter's (LoRA A and B stay in the .pte) and the KV
    cache's buffers (state, not constants)."""
    name = str(node.target).lower()  # PEFT spells them lora_A / lora_B
    if ".lora_a." in name or ".lora_b." in name or name.startswith(("key_cache_", "value_cache_")):
        return None
    return PTD_NAME


def _lower(pt2: str, inputs_path: str, separate: bool, dynamic_t_max: Optional[int]) -> Any:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted

    inputs = tuple(torch.load(inputs_path))
    module = torch.export.load(pt2).module()
    if separate:
        delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=_foundation_tag)
    dynamic_shapes = None
    if dynamic_t_max is not None:
        tokens = torch.export.Dim("T", min=1, max=dynamic_t_max)
        dynamic_shapes = ({1: tokens},) + (None,) * (len(inputs) - 1)
    program = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=True)
    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch()


def export_program(name: str, spec: Dict[str, Any], out_dir: str) -> Dict[str, Any]:
    """Lowers one program into out_dir/name/ -> its paths, sizes and export time."""
    start = time.perf_counter()
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    manager = _lower(spec["pt2"], spec["inputs"], bool(spec.get("separate")), spec.get("dynamic_t_max"))
    pte = os.path.join(folder, f"{name}.pte")
    with open(pte, "wb") as f:
        manager.write_to_file(f)
    manager.write_tensor_data_to_file(folder)
    ptd = os.path.join(folder, f"{PTD_NAME}.ptd")
    has_ptd = os.path.exists(ptd)
    if spec.get("separate") and not has_ptd:
        raise RuntimeError(f"program '{name}': data separation asked but no {ptd} was written")
    return {
        "pte": pte,
        "ptd": ptd if has_ptd else None,
        "pte_bytes": os.path.getsize(pte),
        "ptd_bytes": os.path.getsize(ptd) if has_ptd else 0,
        "export_s": time.perf_counter() - start,
    }


def _export_or_report(name: str, spec: Dict[str, Any], out_dir: str) -> Dict[str, Any]:
    """export_program; an "optional" program's failure becomes {"error": ...} (its traceback in the log)."""
    if not spec.get("optional"):
        return export_program(name, spec, out_dir)
    try:
        return export_program(name, spec, out_dir)
    except Exception as e:  # noqa: BLE001 - reported to the bench, which keeps the other programs' figures.
        traceback.print_exc(file=sys.stderr)
        return {"error": f"lowering '{name}' failed: {type(e).__name__}: {e}"}


class Peer:
    """The lowered programs, their loaded methods and inputs, for one thread count at a time."""

    def __init__(self, programs: Dict[str, Dict[str, Any]], specs: Dict[str, Dict[str, Any]]) -> None:
        from executorch.runtime import Runtime

        self.runtime = Runtime.get()
        self.programs = programs
        self.inputs = {name: list(torch.load(spec["inputs"])) for name, spec in specs.items()}
        self.threads = 0
        self.methods: Dict[str, Any] = {}
        self.loaded: Dict[str, Any] = {}

    def _use_threads(self, threads: int) -> None:
        from executorch.extension.pybindings import portable_lib

        if threads == self.threads:
            return
        self.methods.clear()
        self.loaded.clear()
        portable_lib._unsafe_reset_threadpool(threads)
        seen = portable_lib._threadpool_get_thread_count()
        if seen != threads:
            raise RuntimeError(f"asked ExecuTorch's threadpool for {threads} threads, it has {seen}")
        self.threads = threads

    def _method(self, name: str) -> Any:
        if name not in self.methods:
            if name not in self.programs:
                raise KeyError(f"unknown program '{name}'; have {', '.join(self.programs)}")
            paths = self.programs[name]
            program = self.runtime.load_program(paths["pte"], data_path=paths["ptd"])
            self.loaded[name] = program  # The method borrows from its program.
            method = program.load_method("forward")
            if method is None:
                raise RuntimeError(f"{paths['pte']} has no method 'forward'")
            self.methods[name] = method
        return self.methods[name]

    def time(self, name: str, threads: int, iterations: int, warmup: int) -> List[float]:
        """`iterations` execute() times in ms of program `name`, after `warmup` untimed calls."""
        self._use_threads(threads)
        method = self._method(name)
        inputs = self.inputs[name]
        for _ in range(warmup):
            method.execute(inputs)
        samples = []
        for _ in range(iterations):
            start = time.perf_counter()
            method.execute(inputs)
            samples.append((time.perf_counter() - start) * 1e3)
        return samples

    def generate(self, name: str, threads: int, new_tokens: int, warmup: int, reload: bool) -> Dict[str, Any]:
        """Greedy decoding of `new_tokens` from program `name`'s prompt (its first input), after
        `warmup` untimed two-token generations -> tokens, prefill_ms, decode_tokens_per_s. With
        `reload`, the program is loaded again first (untimed), so the prefill is a fresh method's
        first execute(), as in a fresh tools/generate process."""
        self._use_threads(threads)
        if reload:
            self.methods.pop(name, None)
            self.loaded.pop(name, None)  # The old program goes before the new one maps its files.
        method = self._method(name)
        prompt = self.inputs[name][0]
        for _ in range(warmup):
            _greedy(method, prompt, 2)
        return _greedy(method, prompt, new_tokens)


def _next_token(method: Any, ids: torch.Tensor, position: int) -> int:
    logits = method.execute([ids, torch.tensor(position, dtype=torch.long)])[0]
    return int(logits[0, -1].argmax())


def _greedy(method: Any, prompt: torch.Tensor, new_tokens: int) -> Dict[str, Any]:
    start = time.perf_counter()
    tokens = [_next_token(method, prompt, 0)]
    prefill_ms = (time.perf_counter() - start) * 1e3
    position = int(prompt.shape[1])
    start = time.perf_counter()
    while len(tokens) < new_tokens:
        tokens.append(_next_token(method, torch.tensor([[tokens[-1]]], dtype=torch.long), position))
        position += 1
    decode_s = time.perf_counter() - start
    rate = (len(tokens) - 1) / decode_s if len(tokens) > 1 and decode_s > 0 else 0.0
    return {"tokens": tokens, "prefill_ms": prefill_ms, "decode_tokens_per_s": rate}


def check_outputs(peer: Peer, specs: Dict[str, Dict[str, Any]]) -> None:
    """Runs each program once (1 thread) against its exported module in torch; records the largest
    absolute difference as "max_abs_error", so the bench never times a program that computes
    something else."""
    for name, spec in specs.items():
        if "error" in peer.programs[name]:
            continue
        expected = torch.export.load(spec["pt2"]).module()(*peer.inputs[name])
        peer._use_threads(1)
        got = peer._method(name).execute(peer.inputs[name])[0]
        if tuple(got.shape) != tuple(expected.shape):
            raise RuntimeError(f"program '{name}': output shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
        peer.programs[name]["max_abs_error"] = float((got - expected).abs().max())


def _reply(message: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _serve(peer: Peer) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if request.get("quit"):
                return
            if "generate" in request:
                _reply(
                    peer.generate(
                        request["generate"],
                        int(request["threads"]),
                        int(request["new_tokens"]),
                        int(request["warmup"]),
                        bool(request.get("reload")),
                    )
                )
                continue
            samples = peer.time(
                request["program"], int(request["threads"]), int(request["iterations"]), int(request["warmup"])
            )
            _reply({"latency_ms": samples})
        except Exception as e:  # noqa: BLE001 - every failure goes back to the bench as one line.
            _reply({"error": f"{type(e).__name__}: {e}"})


def main(argv: List[str]) -> int:
    """Exports the manifest's programs, prints the ready line, then answers timing requests."""
    if len(argv) != 2:
        sys.stderr.write("usage: executorch_peer.py MANIFEST.json\n")
        return 2
    try:
        with open(argv[1]) as f:
            manifest = json.load(f)
        torch.set_num_threads(1)  # Export only; execution uses ExecuTorch's own threadpool.
        specs = manifest["programs"]
        programs = {name: _export_or_report(name, spec, manifest["out_dir"]) for name, spec in specs.items()}
        peer = Peer(programs, specs)
        with torch.no_grad():
            check_outputs(peer, specs)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        _reply({"error": f"executorch_peer: setup failed: {type(e).__name__}: {e}"})
        return 1
    import executorch.version

    _reply(
        {"ready": True, "programs": programs, "executorch": executorch.version.__version__, "torch": torch.__version__}
    )
    _serve(peer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
