"""LoRA: applying adapters to a foundation, and the export helper (LoRALinear, the model code, lives
in edgeshare.models.lora and is importable from here too).

export_lora() writes foundation.ptd (the foundation weights under the bare foundation's names, once)
plus either one .pte per adapter or one multi-method .pte whose methods are the adapters (and, if
asked, the bare foundation's own .pte); each program holds only its adapter weights. Which weights
are the foundation's is decided by identity (dtype, shape and bytes equal to a foundation
tensor's; FoundationDataPolicy), not by name, so PEFT models and LoRA modules with any parameter
names share the foundation.
"""

import dataclasses
import os
import re
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from edgeshare.exir._pipeline import (
    Lowerer,
    OutputFiles,
    SharedData,
    check_out_dir,
    export_method,
    structure_signature,
)
from edgeshare.exir._serialize import with_foundation_digest
from edgeshare.exir.data_policy import (
    DATA_KEY_META,
    EXTERNAL_TAG_META,
    DataPolicy,
    FoundationDataPolicy,
    LoraDataPolicy,
    canonical_name,
    foundation_tensors,
)
from edgeshare.exir.errors import AdapterMismatchError, ExportError, UnsupportedModelError
from edgeshare.exir.export import ExecutorchBackendConfig, to_edge
from edgeshare.exir.export_options import AdapterOptions, ExportOptions, OptionError
from edgeshare.exir.foundation_index import FoundationIndex
from edgeshare.exir.graph import lifted_inputs, lifted_tensor
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.tensor_layout import digest_cache
from edgeshare.models.lora import LoRALinear, shared_copy
from torch import nn
from torch.export.graph_signature import InputKind

__all__ = [
    "AdapterNameError",
    "ExtraMethod",
    "FoundationMismatchWarning",
    "LoRALinear",
    "LoraExportResult",
    "adapter_models",
    "apply_lora",
    "check_adapter_name",
    "export_lora",
    "export_method",
    "shared_copy",
]

Adapter = Union[Mapping[str, torch.Tensor], nn.Module]
# export_lora's layout keywords at their defaults (multi_method .. foundation_program).
_DEFAULT_LAYOUT = (False, "lora", "foundation", None)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class FoundationMismatchWarning(UserWarning):
    """An adapter model's weight has a foundation weight's name, dtype and shape but other bytes.

    It is exported as the adapter's own weight (correct, but not shared): expected for a layer the
    adapter fine-tunes in full (PEFT's modules_to_save), a surprise for a LoRA merged into its base
    layer or an adapter built on another checkpoint of the foundation.
    """


class AdapterNameError(ExportError):
    """An adapter name that cannot be a file stem (or is the foundation's own stem)."""


def check_adapter_name(name: Any, foundation_tag: str = "foundation") -> None:
    """Adapter names become file stems (<name>.pte) and method names.

    Raises:
      AdapterNameError: name is not letters, digits, '_', '.', '-' (not starting with '.' or
        '-'), or is foundation_tag.
    """
    if not isinstance(name, str) or not _NAME.match(name) or name == foundation_tag:
        raise AdapterNameError(
            f"adapter name '{name}' must be a file stem (letters, digits, '_', '.', '-') different from "
            f"'{foundation_tag}'"
        )


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
      The adapted model (the foundation is not modified; its weights are shared, not copied).

    Raises:
      AdapterMismatchError: a key names no nn.Linear of the foundation, misses its pair, or has
        a shape that does not fit.
    """
    layers: Dict[str, Dict[str, torch.Tensor]] = {}
    for key, value in adapter.items():
        layer, which = _split_adapter_key(key)
        layers.setdefault(layer, {})[which] = value
    model = shared_copy(foundation)
    modules = dict(model.named_modules())
    for layer, pair in sorted(layers.items()):
        if set(pair) != {"a", "b"}:
            raise AdapterMismatchError(
                f"adapter '{adapter_name}': layer '{layer}' needs both lora_a and lora_b weights"
            )
        base = modules.get(layer)
        if not isinstance(base, nn.Linear):
            raise AdapterMismatchError(f"adapter '{adapter_name}': '{layer}' is not an nn.Linear of the foundation")
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


def _check_fits(name: str, module: nn.Module, foundation: nn.Module, policy: DataPolicy, tag: str) -> None:
    """Name-based policies: the weights a policy sends to the foundation must be the foundation's."""
    base = foundation.state_dict()
    for key, value in module.state_dict().items():
        placement = policy.place(name, key, value)
        if placement is None or placement.external_tag != tag:
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


def _check_shares(name: str, module: nn.Module, foundation: nn.Module, policy: FoundationDataPolicy) -> None:
    """Identity policy: warns about look-alike weights that are not shared; fails when none is.

    Raises:
      AdapterMismatchError: no weight of the adapter model equals a foundation weight (built on
        another foundation?), naming the adapter.
    """
    base = foundation_tensors(foundation)
    shared = 0
    lookalikes: List[str] = []
    for key, value in foundation_tensors(module).items():
        if policy.foundation_key(value) is not None:
            shared += 1
            continue
        ref = base.get(key, base.get(canonical_name(key)))
        if ref is not None and ref.shape == value.shape and ref.dtype == value.dtype:
            lookalikes.append(key)
    if shared == 0:
        raise AdapterMismatchError(
            f"adapter '{name}': no weight of its model equals a foundation weight (dtype, shape and "
            "bytes); is it built on another foundation?"
        )
    if lookalikes:
        warnings.warn(
            f"adapter '{name}': {len(lookalikes)} weight(s) have a foundation weight's name and shape but "
            f"other bytes, and are stored with the adapter, not shared: {', '.join(lookalikes)} "
            "(a layer the adapter trains in full is expected; a merged LoRA or another checkpoint of "
            "the foundation is not)",
            FoundationMismatchWarning,
            stacklevel=4,  # the caller of export_lora
        )


@dataclasses.dataclass(frozen=True)
class ExtraMethod:
    """A method export_lora writes beside "forward" in every program (e.g. a KV-cache method).

    Each program's methods are lowered together, so weights they share are stored once (foundation
    weights under their .ptd keys; adapter weights by content).

    Attributes:
      name: the method name (not "forward").
      wrap: the model "forward" exports (the foundation or an adapter model) -> the module to export.
      example_inputs: that module's example inputs.
      dynamic_shapes: its torch.export dynamic_shapes (None: static).
    """

    name: str
    wrap: Callable[[nn.Module], nn.Module]
    example_inputs: Tuple[Any, ...]
    dynamic_shapes: Optional[Any] = None


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
      foundation_program: the .pte of the bare foundation (method "forward"), if one was written.
      fallbacks: foundation weight key -> why it is stored in its format's fallback (the
        partitioner's choice; exir/fc_formats.py).
      gathered_formats: token embedding key -> the format option its gather reads.
      foundation_index: the foundation file's identity and entry digests (foundation_index.py):
        of the file written, or the index the export was given.
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
    foundation_program: Optional[str] = None
    fallbacks: Dict[str, str] = dataclasses.field(default_factory=dict)
    gathered_formats: Dict[str, str] = dataclasses.field(default_factory=dict)
    foundation_index: Optional[FoundationIndex] = None


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
    data_policy: Optional[DataPolicy] = None,
    dynamic_shapes: Optional[Any] = None,
    foundation_program: Optional[str] = None,
    progress: Optional[Callable[[str], None]] = None,
    extra_methods: Sequence[ExtraMethod] = (),
    options: Optional[ExportOptions] = None,
    foundation_index: Optional[FoundationIndex] = None,
) -> LoraExportResult:
    """Exports LoRA variants of one foundation: <foundation_tag>.ptd plus their programs.

    The file layout (multi_method, program_name, foundation_tag, foundation_program, alpha) is an
    ExportOptions: given as options (as tools/export_lora builds it), or as those keywords.

    Args:
      foundation: the bare foundation model.
      adapters: adapter name -> a state dict ("<layer>.lora_a.weight", "<layer>.lora_b.weight")
        or a whole adapter model (any module whose foundation weights equal the foundation's,
        e.g. a LoRA-wrapped copy or a PEFT model).
      example_inputs: example inputs of the model.
      out_dir: the folder to write to (created if missing).
      partitioner: the partitioner to delegate with (e.g. XnnpackPartitioner()), or None.
      multi_method: write one <program_name>.pte whose methods are the adapters, instead of one
        <adapter>.pte per adapter.
      program_name: file stem of the multi-method .pte.
      foundation_tag: file stem of the shared data file.
      alpha: LoRA alpha of state-dict adapters (None: alpha = rank).
      config: serialization options.
      data_policy: which weights are the foundation's. None: FoundationDataPolicy(foundation,
        foundation_tag), by identity (dtype, shape, bytes); LoraDataPolicy(foundation_tag) decides
        by name instead, for users who choose it.
      dynamic_shapes: torch.export's dynamic_shapes for every program (None: shapes are fixed at
        the example inputs').
      foundation_program: if set, also writes the bare foundation as <foundation_program>.pte
        (method "forward", every weight in <foundation_tag>.ptd); its entries decide the .ptd.
      progress: called with one line per step (export, lowering, writing).
      extra_methods: more methods of every program, beside "forward" (not with multi_method).
      options: the layout as one ExportOptions (then those keywords keep their defaults); its
        adapters.foundation_by "names" means LoraDataPolicy when data_policy is None.
      foundation_index: if set, <foundation_tag>.ptd was written by an earlier export of this
        foundation (with these options) and this is its index: only the programs are written,
        each recording its identity, and each program's foundation weights must be among its
        entries with equal bytes (not with foundation_program).

    Returns:
      What was written: paths, sizes, shared and per-adapter bytes.

    Raises:
      AdapterMismatchError: a state-dict adapter does not fit the foundation, or an adapter model
        shares no weight with it (by name, for a name-based policy: a base weight that differs).
      AdapterNameError: an adapter name is not a file stem or is foundation_tag or
        foundation_program.
      UnsupportedModelError: the foundation has no parameters, or a model cannot be exported.
      ExportError: programs put different bytes under one foundation key (or a key, or other
        bytes, that foundation_index lacks).
      OptionError: options given with layout keywords, or a layout value it refuses.

    Warns:
      FoundationMismatchWarning: a weight of an adapter model has a foundation weight's name and
        shape but other bytes (it is kept with the adapter).
    """
    layout = (multi_method, program_name, foundation_tag, foundation_program)
    if options is None:
        options = ExportOptions(*layout, adapters=AdapterOptions(alpha))
    elif layout != _DEFAULT_LAYOUT or alpha is not None:
        raise OptionError("export_lora: give the layout as options or as keywords, not both")
    multi_method, program_name = options.multi_method, options.program_name
    foundation_tag, foundation_program = options.foundation_tag, options.foundation_program
    alpha = options.adapters.alpha
    _check_export_args(foundation, adapters, foundation_program)
    _check_extra_methods(extra_methods, multi_method)
    check_out_dir(out_dir)
    say = progress or (lambda line: None)
    if data_policy is None and options.adapters.foundation_by == "names":
        data_policy = LoraDataPolicy(foundation_tag)
    with digest_cache():
        policy = data_policy if data_policy is not None else FoundationDataPolicy(foundation, foundation_tag)
        modules = adapter_models(foundation, adapters, policy, alpha, foundation_tag)
        lowerer = Lowerer(partitioner, config, example_inputs, dynamic_shapes, extra_methods, say, foundation_tag)
        shared = SharedData(foundation_tag, foundation_program, foundation_index)
        outputs: List[_Output] = []

        def add(stem: str, lowered: Tuple[Any, Any], names: List[str]) -> None:
            et, edge = lowered
            outputs.append(_Output(stem, et, _inline_weights(edge), names))
            shared.add(stem, et)

        if foundation_program is not None:
            add(foundation_program, lowerer.lower(foundation.eval(), "the foundation", policy, foundation=True), [])
        if multi_method:
            programs = {}
            for name, module in modules.items():
                say(f"exporting adapter '{name}' (torch.export)")
                programs[name] = export_method(module, tuple(example_inputs), f"adapter '{name}'", dynamic_shapes)
            add(program_name, lowerer.lower_edge(to_edge(programs, data_policy=policy), program_name), list(programs))
        else:
            signatures = {name: structure_signature(module) for name, module in modules.items()}
            lowerer.expect(signatures.values())
            for name, module in modules.items():
                add(name, lowerer.lower(module, f"adapter '{name}'", policy, signatures[name]), [name])
        result = _write(outputs, shared, out_dir, lowerer.config, multi_method, say)
    result.modules = modules
    result.fallbacks = dict(lowerer.fallbacks)
    result.gathered_formats = dict(lowerer.gathered_formats)
    if foundation_program is not None:
        result.foundation_program = os.path.join(out_dir, f"{foundation_program}.pte")
    return result


def _check_export_args(foundation: Any, adapters: Mapping[str, Any], foundation_program: Optional[str]) -> None:
    if not isinstance(foundation, nn.Module):
        raise TypeError(f"foundation must be an nn.Module, got {type(foundation).__name__}")
    if not any(True for _ in foundation.parameters()):
        raise UnsupportedModelError(f"foundation model {type(foundation).__name__} has no parameters")
    if not adapters and foundation_program is None:
        raise ExportError("export_lora needs at least one adapter, or a foundation program (the bare model)")
    if foundation_program is not None and (not _NAME.match(foundation_program) or foundation_program in adapters):
        raise AdapterNameError(f"foundation program name '{foundation_program}' must be a file stem no adapter has")


def _check_extra_methods(extra_methods: Sequence[ExtraMethod], multi_method: bool) -> None:
    names = [m.name for m in extra_methods]
    if extra_methods and multi_method:
        raise ExportError(f"extra methods ({', '.join(names)}) need one program per adapter, not multi_method")
    for name in names:
        if not isinstance(name, str) or not _NAME.match(name) or name == "forward" or names.count(name) > 1:
            raise ExportError(f"extra method name '{name}' must be an identifier other than 'forward', given once")


@dataclasses.dataclass
class _Output:
    """One program to write: its file stem, what to_executorch made, the weights it keeps outside
    any delegate (method -> key -> bytes), the adapters it holds."""

    stem: str
    program: Any
    inline: Dict[str, Dict[str, int]]
    adapters: List[str]


def _inline_weights(edge: Any) -> Dict[str, Dict[str, int]]:
    """Per method, the parameters and buffers the program keeps that no delegate took (the emitter
    writes them as program constants, not named data): key -> bytes."""
    kept: Dict[str, Dict[str, int]] = {}
    for method in edge.methods:
        ep = edge.exported_program(method)
        kinds = {s.arg.name: s.kind for s in ep.graph_signature.input_specs}
        lifted = lifted_inputs(ep)
        weights: Dict[str, int] = {}
        for node in ep.graph.nodes:
            if node.op != "placeholder" or node.name not in lifted or kinds[node.name] == InputKind.CONSTANT_TENSOR:
                continue
            if node.meta.get(EXTERNAL_TAG_META) is None and DATA_KEY_META in node.meta:
                tensor = lifted_tensor(ep, lifted[node.name].fqn)
                weights[node.meta[DATA_KEY_META]] = tensor.numel() * tensor.element_size()
        kept[method] = weights
    return kept


def _write(
    outputs: Sequence[_Output],
    shared: SharedData,
    out_dir: str,
    config: ExecutorchBackendConfig,
    multi_method: bool,
    say: Callable[[str], None],
) -> LoraExportResult:
    """Writes the programs and the shared data file, all or none; returns what was written (modules empty)."""
    program_paths: Dict[str, str] = {}
    methods: Dict[str, str] = {}
    identity = shared.identity()
    with OutputFiles(out_dir, say) as files:
        for out in outputs:
            pte = with_foundation_digest(out.program.buffer, identity, f"{out.stem}.pte")
            path = files.write_bytes(f"{out.stem}.pte", pte)
            for name in out.adapters:
                program_paths[name] = path
                methods[name] = name if multi_method else "forward"
        if shared.index is None:
            foundation_path = shared.write(files, config.tensor_alignment)
        else:
            foundation_path = os.path.join(out_dir, f"{shared.tag}.ptd")  # beside the programs, not written here
        sizes = files.commit()
    adapter_bytes: Dict[str, int] = {}
    adapter_keys: Dict[str, List[str]] = {}
    for out in outputs:
        for name in out.adapters:
            # Delegated weights are the .pte's named data; the others, program constants.
            prefix = f"{methods[name]}/"
            own = {k: size for k, size in out.program.named_data.items() if k.startswith(prefix)}
            for key, size in out.inline.get(methods[name], {}).items():
                own.setdefault(key, size)
            adapter_keys[name] = list(own)
            adapter_bytes[name] = sum(own.values())
    keys = sorted(shared.entries, key=lambda k: k.encode("utf-8"))  # the file's order
    return LoraExportResult(
        sizes,
        foundation_path,
        program_paths,
        methods,
        keys,
        sum(len(shared.entries[k].data) for k in keys),
        adapter_bytes,
        adapter_keys,
        {},
        foundation_index=shared.foundation_index(),
    )


def adapter_models(
    foundation: nn.Module,
    adapters: Mapping[str, Adapter],
    policy: DataPolicy,
    alpha: Optional[float],
    foundation_tag: str,
) -> Dict[str, nn.Module]:
    """Adapter name -> its model in eval mode (state dicts applied), each checked against policy.

    Args:
      foundation: the bare foundation model.
      adapters: adapter name -> a state dict or a whole adapter model (as export_lora takes them).
      policy: which weights are the foundation's.
      alpha: LoRA alpha of state-dict adapters (None: alpha = rank).
      foundation_tag: the foundation data file's stem, which no adapter may be named.

    Returns:
      The models, in the order given.

    Raises:
      AdapterNameError: an adapter name is not a file stem or is foundation_tag.
      AdapterMismatchError: as export_lora.
      TypeError: an adapter is neither a state dict nor a module.
    """
    modules: Dict[str, nn.Module] = {}
    for name, adapter in adapters.items():
        check_adapter_name(name, foundation_tag)
        if isinstance(adapter, nn.Module):
            module = adapter
        elif isinstance(adapter, Mapping):
            module = apply_lora(foundation, adapter, alpha, name)
        else:
            raise TypeError(f"adapter '{name}' must be a state dict or nn.Module, got {type(adapter).__name__}")
        if isinstance(policy, FoundationDataPolicy):
            _check_shares(name, module, foundation, policy)
        else:
            _check_fits(name, module, foundation, policy, foundation_tag)
        modules[name] = module.eval()
    return modules
