"""export_lora: exports LoRA variants of one foundation as .pte programs plus a shared foundation.ptd.

    bazel run //tools:export_lora                         # the built-in demo -> ./edgeshare_out/
    bazel run //tools:export_lora -- --out DIR --reference
    bazel run //tools:export_lora -- --model my_model.py:make --methods

--model names a function (path/to/file.py:function or package.module:function; relative paths
resolve against the directory the command was run from) returning
(foundation nn.Module, {adapter name: state dict or module}, example inputs).

A weight of an adapter model is the foundation's when its dtype, shape and bytes equal a foundation
tensor's, whatever it is called (--foundation-by bytes, the default); --foundation-by names decides
by name instead (names containing "lora" are the adapter's; LoRA wrapper components are dropped).
"""

import argparse
import importlib
import importlib.util
import os
import sys
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.data_policy import LoraDataPolicy
from edgeshare.exir.errors import ExportError
from edgeshare.exir.lora import LoraExportResult, export_lora

DEMO = "edgeshare.models:demo_lora"


def _user_dir() -> str:
    return os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()


def load_model_function(spec: str) -> Callable[[], Any]:
    """Resolves "path/to/file.py:function" or "package.module:function".

    Args:
      spec: the function's location.

    Returns:
      The function.

    Raises:
      ExportError: the file, module or function cannot be found.
    """
    location, sep, function = spec.rpartition(":")
    if not sep or not location or not function:
        raise ExportError(f"--model '{spec}' must be path/to/file.py:function or package.module:function")
    if location.endswith(".py") or os.sep in location:
        path = location if os.path.isabs(location) else os.path.join(_user_dir(), location)
        if not os.path.isfile(path):
            raise ExportError(f"--model: file '{path}' does not exist")
        module_name = "_edgeshare_user_model_" + os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(path))
        try:
            module_spec.loader.exec_module(module)
        finally:
            sys.path.pop(0)
    else:
        if _user_dir() not in sys.path:
            sys.path.append(_user_dir())
        try:
            module = importlib.import_module(location)
        except ImportError as e:
            raise ExportError(f"--model: cannot import module '{location}': {e}") from e
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ExportError(f"--model: '{location}' has no function '{function}'")
    return fn


def _unpack(result: Any, spec: str) -> Tuple[torch.nn.Module, Any, Tuple[Any, ...]]:
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise ExportError(
            f"--model {spec} must return (foundation module, {{adapter: state dict or module}}, example inputs)"
        )
    foundation, adapters, inputs = result
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    return foundation, adapters, tuple(inputs)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def write_reference(result: LoraExportResult, inputs: Tuple[Any, ...], out_dir: str) -> List[str]:
    """Writes each program's example inputs and eager outputs as .npy files.

    Floating-point tensors are written as float32; integer ones (token ids) keep their dtype, as
    the runtime takes them. Files: <program>.<method>.input<i>.npy and
    <program>.<method>.output<i>.npy.
    """
    written = []
    for adapter, module in result.modules.items():
        program = os.path.splitext(os.path.basename(result.program_paths[adapter]))[0]
        method = result.methods[adapter]
        with torch.no_grad():
            outputs = module(*inputs)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        for kind, tensors in (("input", inputs), ("output", outputs)):
            for i, t in enumerate(tensors):
                path = os.path.join(out_dir, f"{program}.{method}.{kind}{i}.npy")
                t = t.detach()
                np.save(path, (t.to(torch.float32) if t.is_floating_point() else t).numpy())
                written.append(path)
    return written


def report(result: LoraExportResult, extra: Sequence[str]) -> str:
    """A human-readable summary of what was written."""
    lines = ["wrote:"]
    for path, size in result.files.items():
        lines.append(f"  {path}  {size} bytes ({_human(size)})")
    for path in extra:
        lines.append(f"  {path}  {os.path.getsize(path)} bytes")
    lines.append(
        f"shared foundation weights ({len(result.shared_keys)}, {result.shared_bytes} bytes, stored once in "
        f"{result.foundation_path}): {', '.join(result.shared_keys)}"
    )
    for adapter, size in result.adapter_bytes.items():
        lines.append(
            f"adapter '{adapter}' (method '{result.methods[adapter]}' of {result.program_paths[adapter]}): "
            f"{size} bytes of its own weights ({len(result.adapter_keys[adapter])} tensors)"
        )
    total_adapter = sum(result.adapter_bytes.values())
    lines.append(
        f"bytes shared: {result.shared_bytes}; bytes per adapter: {total_adapter // max(len(result.adapter_bytes), 1)}; "
        f"without sharing the weights would take {result.shared_bytes * len(result.adapter_bytes) + total_adapter} bytes"
    )
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the tool; returns the exit status."""
    parser = argparse.ArgumentParser(prog="export_lora", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="output folder (default: ./edgeshare_out)")
    parser.add_argument("--model", default=DEMO, help="path/to/file.py:function or package.module:function")
    parser.add_argument("--methods", action="store_true", help="one multi-method .pte instead of one per adapter")
    parser.add_argument("--name", default="lora", help="file stem of the multi-method .pte (with --methods)")
    parser.add_argument("--reference", action="store_true", help="also write example inputs and eager outputs (.npy)")
    parser.add_argument(
        "--fc-weight-dtype",
        choices=("fp32", "fp16"),
        default="fp32",
        help="dtype of stored fully connected weights (fp16: half the bytes, within a documented "
        "tolerance; see backends/xnnpack/partitioner.py)",
    )
    parser.add_argument(
        "--foundation-by",
        choices=("bytes", "names"),
        default="bytes",
        help="how foundation weights are recognised: equal dtype, shape and bytes (default), or by "
        "name ('lora' in a name marks an adapter weight)",
    )
    args = parser.parse_args(argv)
    # torch's own deprecation noise from deep-copying graphs; not actionable by users of this tool.
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    out_dir = args.out or "edgeshare_out"
    if not os.path.isabs(out_dir):
        out_dir = os.path.join(_user_dir(), out_dir)
    try:
        foundation, adapters, inputs = _unpack(load_model_function(args.model)(), args.model)
        result = export_lora(
            foundation,
            adapters,
            inputs,
            out_dir,
            XnnpackPartitioner(fc_weight_dtype=args.fc_weight_dtype),
            multi_method=args.methods,
            program_name=args.name,
            data_policy=LoraDataPolicy() if args.foundation_by == "names" else None,
        )
        extra = write_reference(result, inputs, out_dir) if args.reference else []
    except (ValueError, TypeError) as e:
        print(f"export_lora: error: {e}", file=sys.stderr)
        return 1
    print(report(result, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
