"""inspect: what is inside .pte programs and .ptd data files, and which weights they share.

    ./bazelw run //tools:inspect -- edgeshare_out/lora_a.pte edgeshare_out/foundation.ptd [--json]

For a .pte: each method's inputs and outputs, its instructions (kernel calls by operator, delegate
calls by backend with their graphs' ops), planned memory, the program's own named data, and the keys
it expects from data files. For a .ptd: every entry's layout, size and digest. Files are read with the
round-trip readers, so a malformed file gives a one-line error naming it (exit status 1).
"""

import argparse
import collections
import dataclasses
import json
import os
import sys
from typing import Dict, List, Optional, Sequence

from edgeshare.backends.xnnpack import xnnpack_graph_generated as xg
from edgeshare.exir import PtdFile, PteFile, deserialize_ptd, deserialize_pte
from edgeshare.exir.errors import SerializationError
from edgeshare.schema import program_generated as pg

__all__ = ["DataSummary", "MethodSummary", "ProgramSummary", "inspect_file", "main"]

_SCALAR_TYPES = {v: k.lower() for k, v in vars(pg.ScalarType).items() if not k.startswith("_")}
_OP_KINDS = {v: k for k, v in vars(xg.OpKind).items() if not k.startswith("_")}


@dataclasses.dataclass
class MethodSummary:
    """One method of a program."""

    name: str
    inputs: List[str]
    outputs: List[str]
    kernel_calls: Dict[str, int]
    delegate_calls: Dict[str, int]
    delegated_ops: Dict[str, int]
    planned_bytes: int
    external_keys: List[str]


@dataclasses.dataclass
class ProgramSummary:
    """A .pte file."""

    path: str
    size: int
    methods: List[MethodSummary]
    named_data: Dict[str, int]


@dataclasses.dataclass
class DataSummary:
    """A .ptd file: key -> (layout, bytes, digest prefix)."""

    path: str
    size: int
    alignment: int
    entries: Dict[str, Dict[str, object]]


def _layout_text(layout) -> str:
    return f"{_SCALAR_TYPES.get(layout.scalar_type, layout.scalar_type)}{[int(x) for x in _seq(layout.sizes)]}"


def _seq(values: object) -> list:
    """A FlatBuffers object-API vector (None, a list or a numpy array) as a list."""
    return [] if values is None else list(values)


def _tensor_text(tensor: "pg.TensorT") -> str:
    sizes = [int(s) for s in _seq(tensor.sizes)]
    return f"{_SCALAR_TYPES.get(tensor.scalarType, tensor.scalarType)}{sizes}"


def _value_text(plan: "pg.ExecutionPlanT", index: int) -> str:
    value = plan.values[index]
    if value.valType == pg.KernelTypes.Tensor:
        return _tensor_text(value.val)
    return f"value {index}"


def _method(pte: PteFile, plan: "pg.ExecutionPlanT") -> MethodSummary:
    kernels: Dict[str, int] = collections.Counter()
    delegates: Dict[str, int] = collections.Counter()
    delegated_ops: Dict[str, int] = collections.Counter()
    external = set()
    for value in _seq(plan.values):
        if value.valType == pg.KernelTypes.Tensor and value.val.externalKey:
            external.add(
                value.val.externalKey.decode() if isinstance(value.val.externalKey, bytes) else value.val.externalKey
            )
    for instruction in _seq(plan.instructions):
        if instruction.instrArgsType == pg.InstructionArguments.KernelCall:
            op = plan.operators[instruction.instrArgs.opIndex]
            name = op.name.decode() if isinstance(op.name, bytes) else op.name
            overload = (op.overload.decode() if isinstance(op.overload, bytes) else op.overload) or ""
            kernels[name + ("." + overload if overload else "")] += 1
        elif instruction.instrArgsType == pg.InstructionArguments.DelegateCall:
            delegate = plan.delegates[instruction.instrArgs.delegateIndex]
            backend = delegate.id.decode() if isinstance(delegate.id, bytes) else delegate.id
            delegates[backend] += 1
            if backend == "XnnpackBackend":
                blob = pte.segments[delegate.segmentIndex]
                graph = xg.GraphT.InitFromObj(xg.Graph.GetRootAs(blob, 0))
                for node in _seq(graph.nodes):
                    delegated_ops[_OP_KINDS.get(node.op, str(node.op))] += 1
                for value in _seq(graph.values):
                    if value.kind == xg.ValueKind.CONSTANT and value.key:
                        key = value.key.decode() if isinstance(value.key, bytes) else value.key
                        if key not in pte.named_data:
                            external.add(key)
    planned = sum(_seq(plan.nonConstBufferSizes))
    return MethodSummary(
        name=plan.name.decode() if isinstance(plan.name, bytes) else plan.name,
        inputs=[_value_text(plan, i) for i in _seq(plan.inputs)],
        outputs=[_value_text(plan, i) for i in _seq(plan.outputs)],
        kernel_calls=dict(sorted(kernels.items())),
        delegate_calls=dict(sorted(delegates.items())),
        delegated_ops=dict(sorted(delegated_ops.items())),
        planned_bytes=int(planned),
        external_keys=sorted(external),
    )


def inspect_file(path: str) -> object:
    """Reads one .pte or .ptd file and summarises it.

    Args:
      path: the file; its kind is told by its magic, not its name.

    Returns:
      A ProgramSummary or a DataSummary.

    Raises:
      SerializationError: the file is malformed (naming it).
      OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(path)
    if data[:4] == b"ESTD":
        ptd: PtdFile = deserialize_ptd(data, name)
        entries = {}
        for key, blob in ptd.named_data.items():
            layout = blob.tensor_layout
            entries[key] = {
                "layout": None if layout is None else _layout_text(layout),
                "bytes": len(blob.data),
                "sha256": blob.digest.hex()[:16],
            }
        return DataSummary(path, len(data), int(ptd.flat_tensor.tensorAlignment), entries)
    pte = deserialize_pte(data, name)
    methods = [_method(pte, plan) for plan in _seq(pte.program.executionPlans)]
    named = {key: len(blob.data) for key, blob in pte.named_data.items()}
    return ProgramSummary(path, len(data), methods, named)


def _print(summary: object) -> None:
    if isinstance(summary, DataSummary):
        total = sum(int(e["bytes"]) for e in summary.entries.values())
        print(
            f"{summary.path}: data file, {summary.size} bytes, {len(summary.entries)} entries "
            f"({total} bytes), segments aligned to {summary.alignment}"
        )
        for key, entry in summary.entries.items():
            print(f"  {key:40s} {str(entry['layout']):24s} {entry['bytes']:>10} B  sha256 {entry['sha256']}")
        return
    assert isinstance(summary, ProgramSummary)
    own = sum(summary.named_data.values())
    print(
        f"{summary.path}: program, {summary.size} bytes, {len(summary.methods)} method(s), "
        f"{len(summary.named_data)} named data entries of its own ({own} bytes)"
    )
    for m in summary.methods:
        print(
            f"  method '{m.name}': inputs {', '.join(m.inputs)} -> outputs {', '.join(m.outputs)}; "
            f"planned memory {m.planned_bytes} B"
        )
        for backend, n in m.delegate_calls.items():
            ops = ", ".join(f"{op} x{c}" for op, c in m.delegated_ops.items())
            print(f"    delegate {backend} x{n}: {ops}")
        for op, n in m.kernel_calls.items():
            print(f"    kernel {op} x{n}")
        if m.external_keys:
            print(f"    from data files: {', '.join(m.external_keys)}")
    for key, size in summary.named_data.items():
        print(f"  own {key:40s} {size:>10} B")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="inspect", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help=".pte and .ptd files")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    base = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    summaries = []
    for path in args.files:
        full = path if os.path.isabs(path) or not base else os.path.join(base, path)
        try:
            summaries.append(inspect_file(full))
        except (SerializationError, OSError) as e:
            print(f"inspect: error: {path}: {e}".replace("\n", " "), file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps({s.path: dataclasses.asdict(s) for s in summaries}, indent=2))
    else:
        for s in summaries:
            _print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
