"""executorch_peer: the ExecuTorch side of `bench/lora --peer executorch`, a long-lived process.

It runs in its own venv (torch + executorch from PyPI, made by bench/_peer.py), never inside the
Bazel build: it imports nothing of edgeshare. Started as

    python executorch_peer.py MANIFEST.json

where the manifest is {"out_dir": DIR, "programs": {NAME: {"pt2": FILE, "inputs": FILE,
"separate": BOOL}}}: each FILE.pt2 is a torch.export.save'd ExportedProgram of the SAME eager
module the edgeshare side measured (same weights) and inputs a torch.save'd tuple of tensors.
Each program is lowered with ExecuTorch's XNNPACK flow (to_edge_transform_and_lower +
XnnpackPartitioner); with "separate", every weight except the LoRA A/B matrices is tagged for the
program-data separation of 1.5.1 (delegate_external_constants_pass_unlifted), so the foundation's
weights land in foundation.ptd and the adapter stays in the .pte, as edgeshare's export does.

Each lowered program runs once against its exported module in torch ("max_abs_error").
It prints ONE JSON line when ready ({"ready": true, "programs": {NAME: {...sizes, export_s...}}}),
then answers JSON lines on stdin, one line each:

    {"program": NAME, "threads": N, "iterations": K, "warmup": W}  -> {"latency_ms": [K samples]}
    {"quit": true}                                                 -> exits

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
    """foundation.ptd for every weight but the adapter's (LoRA A and B stay in the .pte)."""
    name = str(node.target).lower()  # PEFT spells them lora_A / lora_B
    return None if (".lora_a." in name or ".lora_b." in name) else PTD_NAME


def _lower(pt2: str, inputs_path: str, separate: bool) -> Any:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted

    inputs = tuple(torch.load(inputs_path))
    module = torch.export.load(pt2).module()
    if separate:
        delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=_foundation_tag)
    program = torch.export.export(module, inputs, strict=True)
    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch()


def export_program(name: str, spec: Dict[str, Any], out_dir: str) -> Dict[str, Any]:
    """Lowers one program into out_dir/name/ -> its paths, sizes and export time."""
    start = time.perf_counter()
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    manager = _lower(spec["pt2"], spec["inputs"], bool(spec.get("separate")))
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


def check_outputs(peer: Peer, specs: Dict[str, Dict[str, Any]]) -> None:
    """Runs each program once (1 thread) against its exported module in torch; records the largest
    absolute difference as "max_abs_error", so the bench never times a program that computes
    something else."""
    for name, spec in specs.items():
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
        programs = {name: export_program(name, spec, manifest["out_dir"]) for name, spec in specs.items()}
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
