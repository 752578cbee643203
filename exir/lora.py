"""LoRA: the LoRALinear wrapper, applying adapters to a foundation, and the export helper.

export_lora() writes foundation.ptd (the foundation weights under canonical names, once) plus either
one .pte per adapter or one multi-method .pte whose methods are the adapters; each program holds
only its adapter weights.
"""

import copy
import dataclasses
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from edgeshare.exir._serialize import deserialize_ptd, deserialize_pte
from edgeshare.exir.data_policy import LoraDataPolicy, canonical_name
from edgeshare.exir.errors import AdapterMismatchError, ExportError, UnsupportedModelError
from edgeshare.exir.export import ExecutorchBackendConfig, to_edge
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.tensor_layout import tensor_bytes

__all__ = [
    "LoRALinear",
    "LoraExportResult",
    "apply_lora",
    "export_lora",
    "export_method",
]

Adapter = Union[Mapping[str, torch.Tensor], nn.Module]
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class LoRALinear(nn.Module):
    """y = base(x) + lora_b(lora_a(x)) * (alpha / rank).

    Args:
      base: the wrapped nn.Linear (its weights are the foundation's).
      rank: the adapter rank r.
      alpha: the LoRA alpha; the update is scaled by alpha / rank.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        if rank <= 0:
            raise ValueError(f"LoRA rank must be positive, got {rank}")
        self.base = base
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)
        self.rank = rank
        self.alpha = float(alpha)
        self.scale = float(alpha) / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scale


def _split_adapter_key(key: str) -> Tuple[str, str]:
    for suffix in (".lora_a.weight", ".lora_A.weight", ".lora_b.weight", ".lora_B.weight"):
        if key.endswith(suffix):
            return key[: -len(suffix)], suffix[6].lower()
    raise AdapterMismatchError(f"adapter key '{key}' is not '<layer>.lora_a.weight' or '<layer>.lora_b.weight'")


def apply_lora(
    foundation: nn.Module,
    adapter: Mapping[str, torch.Tensor],
    alpha: Optional[float] = None,
    adapter_name: str = "adapter",
) -> nn.Module:
    """Returns a copy of foundation whose adapted nn.Linear layers are wrapped in LoRALinear.

    Args:
      foundation: the bare model.
      adapter: "<layer>.lora_a.weight" [r, in] and "<layer>.lora_b.weight" [out, r] per layer.
      alpha: LoRA alpha (None: alpha = rank, i.e. scale 1).
      adapter_name: names the adapter in errors.

    Returns:
      The adapted model (the foundation is not modified).

    Raises:
      AdapterMismatchError: a key names no nn.Linear of the foundation, misses its pair, or has
        a shape that does not fit.
    """
    layers: Dict[str, Dict[str, torch.Tensor]] = {}
    for key, value in adapter.items():
        layer, which = _split_adapter_key(key)
        layers.setdefault(layer, {})[which] = value
    model = copy.deepcopy(foundation)
    modules = dict(model.named_modules())
    for layer, pair in sorted(layers.items()):
        if set(pair) != {"a", "b"}:
            raise AdapterMismatchError(f"adapter '{adapter_name}': layer '{layer}' needs both lora_a and lora_b weights")
        base = modules.get(layer)
        if not isinstance(base, nn.Linear):
            raise AdapterMismatchError(
                f"adapter '{adapter_name}': '{layer}' is not an nn.Linear of the foundation"
            )
        a, b = pair["a"], pair["b"]
        rank = a.shape[0] if a.dim() == 2 else -1
        if a.shape != (rank, base.in_features) or b.shape != (base.out_features, rank):
            raise AdapterMismatchError(
                f"adapter '{adapter_name}': layer '{layer}' is Linear({base.in_features}, "
                f"{base.out_features}) but lora_a is {tuple(a.shape)} and lora_b is {tuple(b.shape)}"
            )
        wrapped = LoRALinear(base, rank, rank if alpha is None else alpha)
        with torch.no_grad():
            wrapped.lora_a.weight.copy_(a)
            wrapped.lora_b.weight.copy_(b)
        parent_name, _, child = layer.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, wrapped)
    return model


def _check_fits(name: str, module: nn.Module, foundation: nn.Module, policy: LoraDataPolicy) -> None:
    """Checks that an adapter module's base weights are the foundation's (names, shapes, values)."""
    base = foundation.state_dict()
    for key, value in module.state_dict().items():
        placement = policy.place(name, key, value)
        if placement is None or placement.external_tag is None:
            continue
        ref = base.get(placement.key)
        if ref is None:
            raise AdapterMismatchError(
                f"adapter '{name}': weight '{key}' (canonical '{placement.key}') is not in the foundation"
            )
        if ref.shape != value.shape or ref.dtype != value.dtype:
            raise AdapterMismatchError(
                f"adapter '{name}': weight '{key}' is {tuple(value.shape)} {value.dtype} but the "
                f"foundation's '{placement.key}' is {tuple(ref.shape)} {ref.dtype}"
            )
        if not torch.equal(ref, value):
            raise AdapterMismatchError(
                f"adapter '{name}': weight '{key}' differs from the foundation's '{placement.key}'"
            )


def export_method(module: nn.Module, example_inputs: Tuple[Any, ...], what: str) -> torch.export.ExportedProgram:
    """torch.export with an error that names what failed.

    Args:
      module: the model.
      example_inputs: its example inputs.
      what: names the model in errors (e.g. "adapter 'lora_a'").

    Returns:
      The exported program.

    Raises:
      UnsupportedModelError: torch.export could not trace the model (its error is chained).
    """
    module = module.eval()
    try:
        return torch.export.export(module, tuple(example_inputs), strict=False)
    except Exception as e:  # torch.export raises many types; keep its message.
        raise UnsupportedModelError(f"{what} could not be exported by torch.export: {type(e).__name__}: {e}") from e


@dataclasses.dataclass
class LoraExportResult:
    """What export_lora wrote.

    Attributes:
      files: path -> size in bytes of every file written.
      foundation_path: the .ptd shared by every program.
      program_paths: adapter name -> the .pte holding it.
      methods: adapter name -> its method name in that .pte.
      shared_keys: the foundation weights' keys (in foundation.ptd).
      shared_bytes: bytes of foundation weights, stored once.
      adapter_bytes: adapter name -> bytes of its own weights.
      adapter_keys: adapter name -> keys of its own weights in its .pte.
      modules: adapter name -> the eager model that was exported (for reference outputs).
    """

    files: Dict[str, int]
    foundation_path: str
    program_paths: Dict[str, str]
    methods: Dict[str, str]
    shared_keys: List[str]
    shared_bytes: int
    adapter_bytes: Dict[str, int]
    adapter_keys: Dict[str, List[str]]
    modules: Dict[str, nn.Module]


def export_lora(
    foundation: nn.Module,
    adapters: Mapping[str, Adapter],
    example_inputs: Sequence[Any],
    out_dir: str,
    partitioner: Optional[Partitioner],
    multi_method: bool = False,
    program_name: str = "lora",
    foundation_tag: str = "foundation",
    alpha: Optional[float] = None,
    config: Optional[ExecutorchBackendConfig] = None,
) -> LoraExportResult:
    """Exports LoRA variants of one foundation: <foundation_tag>.ptd plus their programs.

    Args:
      foundation: the bare foundation model.
      adapters: adapter name -> a state dict ("<layer>.lora_a.weight", "<layer>.lora_b.weight")
        or a whole LoRA-wrapped module whose base weights are the foundation's.
      example_inputs: example inputs of the model (shapes are fixed at export).
      out_dir: the folder to write to (created if missing).
      partitioner: the partitioner to delegate with (e.g. XnnpackPartitioner()), or None.
      multi_method: write one <program_name>.pte whose methods are the adapters, instead of one
        <adapter>.pte per adapter.
      program_name: file stem of the multi-method .pte.
      foundation_tag: file stem of the shared data file.
      alpha: LoRA alpha of state-dict adapters (None: alpha = rank).
      config: serialization options.

    Returns:
      What was written: paths, sizes, shared and per-adapter bytes.

    Raises:
      AdapterMismatchError: an adapter's names or shapes do not fit the foundation.
      UnsupportedModelError: the foundation has no parameters, or a model cannot be exported.
      ExportError: an adapter name is unusable, or programs disagree on the foundation file.
    """
    if not isinstance(foundation, nn.Module):
        raise TypeError(f"foundation must be an nn.Module, got {type(foundation).__name__}")
    if not any(True for _ in foundation.parameters()):
        raise UnsupportedModelError(f"foundation model {type(foundation).__name__} has no parameters")
    if not adapters:
        raise ExportError("export_lora needs at least one adapter")
    inputs = tuple(example_inputs)
    policy = LoraDataPolicy(foundation_tag)
    modules: Dict[str, nn.Module] = {}
    for name, adapter in adapters.items():
        if not isinstance(name, str) or not _NAME.match(name) or name == foundation_tag:
            raise ExportError(f"adapter name '{name}' must be a file stem different from '{foundation_tag}'")
        if isinstance(adapter, nn.Module):
            _check_fits(name, adapter, foundation, policy)
            modules[name] = adapter.eval()
        elif isinstance(adapter, Mapping):
            modules[name] = apply_lora(foundation, adapter, alpha, name).eval()
        else:
            raise TypeError(f"adapter '{name}' must be a state dict or nn.Module, got {type(adapter).__name__}")
    programs = {name: export_method(m, inputs, f"adapter '{name}'") for name, m in modules.items()}

    def lower(eps: Dict[str, torch.export.ExportedProgram]):
        edge = to_edge(eps, data_policy=policy)
        if partitioner is not None:
            edge = edge.to_backend(partitioner)
        return edge.to_executorch(config)

    files: Dict[str, int] = {}
    program_paths: Dict[str, str] = {}
    methods: Dict[str, str] = {}
    foundation_bytes: Optional[bytes] = None
    outputs = []
    if multi_method:
        et = lower(programs)
        outputs.append((program_name, et, list(programs)))
    else:
        for name, ep in programs.items():
            outputs.append((name, lower({"forward": ep}), [name]))
    os.makedirs(out_dir, exist_ok=True)
    for stem, et, names in outputs:
        ptd = et.data_files.get(foundation_tag)
        if ptd is None:
            raise ExportError(f"program '{stem}' put no weight in {foundation_tag}.ptd")
        if foundation_bytes is None:
            foundation_bytes = ptd
        elif ptd != foundation_bytes:
            raise ExportError(
                f"program '{stem}' yields a different {foundation_tag}.ptd than '{outputs[0][0]}': its "
                "base weights differ from the foundation's"
            )
        path = os.path.join(out_dir, f"{stem}.pte")
        with open(path, "wb") as f:
            f.write(et.buffer)
        files[path] = len(et.buffer)
        for name in names:
            program_paths[name] = path
            methods[name] = name if multi_method else "forward"
    foundation_path = os.path.join(out_dir, f"{foundation_tag}.ptd")
    with open(foundation_path, "wb") as f:
        f.write(foundation_bytes)
    files[foundation_path] = len(foundation_bytes)
    ptd_file = deserialize_ptd(foundation_bytes, foundation_path)
    shared_keys = list(ptd_file.named_data)
    shared_bytes = sum(len(b.data) for b in ptd_file.named_data.values())
    adapter_bytes: Dict[str, int] = {}
    adapter_keys: Dict[str, List[str]] = {}
    for stem, et, names in outputs:
        pte = deserialize_pte(et.buffer, f"{stem}.pte")
        for name in names:
            prefix = f"{methods[name]}/"
            keys = [k for k in pte.named_data if k.startswith(prefix)]
            adapter_keys[name] = keys
            adapter_bytes[name] = sum(len(pte.named_data[k].data) for k in keys)
    return LoraExportResult(
        files, foundation_path, program_paths, methods, shared_keys, shared_bytes,
        adapter_bytes, adapter_keys, modules,
    )
