"""An adapter model's edge programs derived from the foundation's instead of traced again.

A LoRA adapter changes a model's graph at its targeted linear layers only: PEFT's lora.Linear (and
edgeshare's LoRALinear) computes, in eval, y = linear(x, W[, b]) + linear(linear(x, A), B) * scaling.
torch.export + run_decompositions of the adapter model yields the foundation's graph with exactly
those four nodes after each targeted linear node, and placeholders for A and B after the layer's
own. FoundationGraphs builds that graph from a copy of the foundation's edge programs: the same
ops, dtypes and fake values (made under the graph's fake mode, so token dims stay symbolic), every
weight renamed to the adapter model's name, the data policy applied as to_edge applies it.

What it cannot reproduce exactly is traced as before, decided up front from the adapter model's
modules: any PEFT layer other than a plain single-adapter LoRA Linear (DoRA, lora_bias, merged or
disabled adapters, embeddings, modules_to_save wrappers), edgeshare's folded DoRA and bias-delta
layers, a weight that is neither a LoRA weight nor a foundation tensor (a trained bias, a saved
module), and a targeted weight the foundation's graph does not read in exactly one linear node.

    graphs = FoundationGraphs(foundation_edge, {"forward": foundation, ...})
    sites = graphs.sites(modules)                      # modules: {"forward": adapter_model, ...}
    edge = graphs.derive(modules, sites, policy) if sites else None     # None: trace it
"""

import copy
import dataclasses
import re
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

import torch
from edgeshare.exir._weights import module_weights, placeholder_name
from edgeshare.exir.data_policy import DataPolicy
from edgeshare.exir.export import EdgeProgramManager, _apply_data_policy
from edgeshare.exir.tensor_layout import StorageKey, storage_key
from edgeshare.models.lora import LoRALinear
from torch import nn
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument
from torch.fx.passes.shape_prop import _extract_tensor_metadata

__all__ = ["FoundationGraphs", "LoraSite", "lora_sites"]

_LINEAR = torch.ops.aten.linear.default


@dataclasses.dataclass(frozen=True)
class LoraSite:
    """One linear layer an adapter adds a low-rank product to.

    Attributes:
      weight: the wrapped layer's weight (a foundation tensor).
      a_path: the path of lora A's weight under the adapter model ("...q_proj.lora_A.default.weight").
      b_path: the path of lora B's weight.
      scaling: what the product is multiplied by, as the layer holds it.
    """

    weight: torch.Tensor
    a_path: str
    b_path: str
    scaling: float


def _lora_paths(sites: List[LoraSite]) -> Set[str]:
    return {p for s in sites for p in (s.a_path, s.b_path)}


def _peft_site(path: str, module: nn.Module) -> Optional[LoraSite]:
    """A PEFT lora.Linear computing exactly base(x) + lora_B(lora_A(dropout(x))) * scaling, or None."""
    active = list(getattr(module, "active_adapters", []))
    if len(active) != 1 or getattr(module, "disable_adapters", True) or getattr(module, "merged", True):
        return None
    name = active[0]
    if set(module.lora_A.keys()) != {name} or set(module.lora_B.keys()) != {name}:
        return None
    if (
        module.use_dora.get(name)
        or module.lora_bias.get(name)
        or getattr(module, "lora_variant", {})
        or getattr(module, "fan_in_fan_out", False)
        or len(getattr(module, "lora_embedding_A", {}))
        or len(getattr(module, "lora_magnitude_vector", {}))
    ):
        return None
    base, lora_a, lora_b = module.base_layer, module.lora_A[name], module.lora_B[name]
    dropout = module.lora_dropout[name]
    if type(base) is not nn.Linear or type(lora_a) is not nn.Linear or type(lora_b) is not nn.Linear:
        return None
    if type(dropout) not in (nn.Identity, nn.Dropout) or lora_a.bias is not None or lora_b.bias is not None:
        return None
    if not base.weight.dtype == lora_a.weight.dtype == lora_b.weight.dtype:
        return None  # PEFT casts x to A's dtype and the result back: not derived
    prefix = f"{path}." if path else ""
    return LoraSite(
        base.weight, f"{prefix}lora_A.{name}.weight", f"{prefix}lora_B.{name}.weight", module.scaling[name]
    )


def _edgeshare_site(path: str, module: LoRALinear) -> Optional[LoraSite]:
    """edgeshare's LoRALinear: base(x) + lora_b(lora_a(x)) * scale."""
    if type(module.base) is not nn.Linear or module.lora_a.bias is not None or module.lora_b.bias is not None:
        return None
    if not module.base.weight.dtype == module.lora_a.weight.dtype == module.lora_b.weight.dtype:
        return None
    prefix = f"{path}." if path else ""
    return LoraSite(module.base.weight, f"{prefix}lora_a.weight", f"{prefix}lora_b.weight", module.scale)


def _peft_container_types() -> Tuple[type, ...]:
    """PEFT's classes that only hold a model (their forward passes through), and its LoRA Linear."""
    try:
        import peft  # noqa: PLC0415 (only PEFT adapter models need it)
        from peft.tuners.lora import LoraModel  # noqa: PLC0415
        from peft.tuners.lora.layer import Linear  # noqa: PLC0415
    except ImportError:
        return ()
    return (peft.PeftModelForCausalLM, LoraModel, Linear)


def lora_sites(model: nn.Module, foundation: nn.Module) -> Optional[List[LoraSite]]:
    """The LoRA layers of an adapter model, when its graph is the foundation's plus their products.

    Conservative: None unless every PEFT or edgeshare adapter layer is a plain LoRA linear layer,
    every weight of model is a LoRA weight of one of them or a foundation tensor (the same storage),
    every foundation tensor is still used, and no two layers wrap one weight.

    Args:
      model: the adapter model ("forward"'s module).
      foundation: the foundation model ("forward"'s module of the foundation's program).

    Returns:
      The layers, or None when the model must be traced.
    """
    peft_types = _peft_container_types()
    sites: List[LoraSite] = []
    for path, module in model.named_modules():
        kind = type(module)
        if kind is LoRALinear:
            site = _edgeshare_site(path, module)
        elif peft_types and kind is peft_types[-1]:
            site = _peft_site(path, module)
        elif kind.__module__.split(".")[0] == "peft":
            if kind in peft_types:
                continue
            return None  # modules_to_save, trainable tokens, another tuner
        elif kind.__module__ == LoRALinear.__module__:
            return None  # folded DoRA, a trained bias
        else:
            continue
        if site is None:
            return None
        sites.append(site)
    if not sites:
        return None
    lora_paths = _lora_paths(sites)
    base = {storage_key(t) for t in module_weights(foundation).values()}
    used = set()
    for name, tensor in module_weights(model).items():
        if name in lora_paths:
            continue
        key = storage_key(tensor)
        if key not in base:
            return None
        used.add(key)
    weights = [storage_key(s.weight) for s in sites]
    if used != base or len(set(weights)) != len(weights):
        return None
    return sites


def _plain(name: str) -> str:
    """A weight name without the components PEFT and LoRALinear insert ("base_model.model", "base_layer",
    "base"), to pair an adapter model's name with the foundation's."""
    name = re.sub(r"(^|\.)base_model\.model(?=\.)", "", name)
    parts = name.split(".")
    return ".".join([p for p in parts[:-1] if p not in ("base_layer", "base")] + parts[-1:]).lstrip(".")


def _rename(template: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor]) -> Optional[Dict[str, str]]:
    """Template weight name -> the adapter method module's name of the same tensor (the same storage,
    the name whose plain form matches first), or of an equal tensor under the same plain name (state
    made afresh per module, a KV cache); None when one has neither."""
    by_storage: Dict[StorageKey, List[str]] = {}
    by_plain: Dict[str, str] = {}
    for name, tensor in weights.items():
        by_storage.setdefault(storage_key(tensor), []).append(name)
        by_plain.setdefault(_plain(name), name)
    renamed: Dict[str, str] = {}
    for name, tensor in template.items():
        plain = _plain(name)
        candidates = by_storage.get(storage_key(tensor), [])
        if candidates:
            renamed[name] = next((c for c in candidates if _plain(c) == plain), candidates[0])
            continue
        other = by_plain.get(plain)
        if other is None:
            return None
        new = weights[other]
        if new.dtype != tensor.dtype or new.shape != tensor.shape or not torch.equal(new, tensor):
            return None
        renamed[name] = other
    return renamed


def _meta(node: torch.fx.Node, value: torch.Tensor) -> None:
    node.meta["val"] = value
    node.meta["tensor_meta"] = _extract_tensor_metadata(value)


def _derive_method(
    template: ExportedProgram, weights: Mapping[str, torch.Tensor], sites: List[LoraSite]
) -> Optional[ExportedProgram]:
    """template (a foundation method's edge program) with each site's low-rank product, over the
    adapter method module's weights; None when a site's weight is not read by exactly one linear
    node or a weight has no counterpart."""
    tables = {**template.state_dict, **template.constants}
    # Constants torch made while tracing (not the module's weights) stay as they are.
    named = {
        s.target: tables[s.target]
        for s in template.graph_signature.input_specs
        if s.kind in (InputKind.PARAMETER, InputKind.BUFFER) and s.target in tables
    }
    renamed = _rename(named, {k: v for k, v in weights.items() if k not in _lora_paths(sites)})
    if renamed is None:
        return None
    gm = copy.deepcopy(template.graph_module)
    specs = {s.arg.name: s for s in template.graph_signature.input_specs}
    found = _site_linears(gm.graph, specs, tables, sites)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fake_mode = detect_fake_mode([p.meta.get("val") for p in placeholders])
    if found is None or fake_mode is None:
        return None
    new_specs, replaced = _add_products(gm.graph, found, weights, fake_mode)
    gm.recompile()
    return _derived_program(template, gm, weights, renamed, specs, new_specs, replaced)


def _site_linears(
    graph: torch.fx.Graph, specs: Mapping[str, InputSpec], tables: Mapping[str, torch.Tensor], sites: List[LoraSite]
) -> Optional[List[Tuple[torch.fx.Node, LoraSite]]]:
    """The linear node reading each site's weight, or None unless each is read by exactly one."""
    by_weight = {storage_key(s.weight): s for s in sites}
    found: Dict[int, Tuple[torch.fx.Node, LoraSite]] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target != _LINEAR:
            continue
        weight = node.args[1]
        spec = specs.get(getattr(weight, "name", None))
        if spec is None or spec.target not in tables:
            continue
        site = by_weight.get(storage_key(tables[spec.target]))
        if site is None:
            continue
        if id(site) in found:
            return None
        found[id(site)] = (node, site)
    if len(found) != len(sites):
        return None
    return list(found.values())


def _add_products(
    graph: torch.fx.Graph,
    found: List[Tuple[torch.fx.Node, LoraSite]],
    weights: Mapping[str, torch.Tensor],
    fake_mode: Any,
) -> Tuple[Dict[str, InputSpec], Dict[str, str]]:
    """Adds each site's A and B placeholders and linear(linear(x, A), B) * scaling after its
    linear node; returns the new placeholders' specs and each linear node's name -> its sum's
    (which the outputs now read)."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    order = {p: i for i, p in enumerate(placeholders)}
    new_specs: Dict[str, InputSpec] = {}
    replaced: Dict[str, str] = {}
    for linear, site in found:
        anchor = max((a for a in linear.args[1:] if isinstance(a, torch.fx.Node)), key=order.__getitem__)
        x = linear.args[0]
        nodes = []
        for path in (site.a_path, site.b_path):
            with graph.inserting_after(anchor):
                anchor = graph.placeholder(placeholder_name(path, InputKind.PARAMETER))
            _meta(anchor, fake_mode.from_tensor(weights[path], static_shapes=True))
            new_specs[anchor.name] = InputSpec(InputKind.PARAMETER, TensorArgument(anchor.name), path)
            nodes.append(anchor)
        with graph.inserting_after(linear):
            low = graph.call_function(_LINEAR, (x, nodes[0]))
        with graph.inserting_after(low):
            up = graph.call_function(_LINEAR, (low, nodes[1]))
        with graph.inserting_after(up):
            scaled = graph.call_function(torch.ops.aten.mul.Tensor, (up, site.scaling))
        with graph.inserting_after(scaled):
            out = graph.call_function(torch.ops.aten.add.Tensor, (linear, scaled))
        linear.replace_all_uses_with(out, delete_user_cb=lambda user, out=out: user is not out)
        replaced[linear.name] = out.name
        # The values the ops' fake kernels would give (contiguous, the layer's dtype, x's leading
        # dims), made directly: linear's fake kernel reshapes symbolic shapes, most of the time
        # a derivation would otherwise take.
        rank = int(nodes[0].meta["val"].shape[0])
        with fake_mode:
            _meta(low, x.meta["val"].new_empty((*x.meta["val"].shape[:-1], rank)))
            for node in (up, scaled, out):
                _meta(node, torch.empty_like(linear.meta["val"]))
    return new_specs, replaced


def _derived_program(
    template: ExportedProgram,
    gm: torch.fx.GraphModule,
    weights: Mapping[str, torch.Tensor],
    renamed: Mapping[str, str],
    specs: Mapping[str, InputSpec],
    new_specs: Mapping[str, InputSpec],
    replaced: Mapping[str, str],
) -> ExportedProgram:
    """The derived graph as a program: the template's signature with the adapter's names, the
    new placeholders, and outputs that read the sums."""
    input_specs = []
    state_dict: Dict[str, torch.Tensor] = {}
    constants: Dict[str, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = new_specs.get(node.name) or specs[node.name]
        old = spec.target
        if old in renamed:
            spec = dataclasses.replace(spec, target=renamed[old])
        input_specs.append(spec)
        if node.name in new_specs or old in template.state_dict:
            state_dict[spec.target] = weights[spec.target]
        elif old in template.constants:
            constants[spec.target] = weights[spec.target] if old in renamed else template.constants[old]
    output_specs = []
    for spec in template.graph_signature.output_specs:
        if isinstance(spec.arg, TensorArgument) and spec.arg.name in replaced:
            spec = dataclasses.replace(spec, arg=TensorArgument(replaced[spec.arg.name]))
        if spec.target is not None:
            spec = dataclasses.replace(spec, target=renamed.get(spec.target, spec.target))
        output_specs.append(spec)
    signature = type(template.graph_signature)(input_specs=input_specs, output_specs=output_specs)
    return ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=signature,
        state_dict=state_dict,
        range_constraints=template.range_constraints,
        module_call_graph=copy.deepcopy(template.module_call_graph),
        constants=constants,
        verifiers=template.verifiers,
    )


class FoundationGraphs:
    """The foundation's edge programs, kept (copied, before partitioning) to derive adapter
    structures' programs from.

    Args:
      edge: the foundation's edge programs (not partitioned yet; copied here).
      modules: method name -> the foundation module that method exported.
    """

    def __init__(self, edge: EdgeProgramManager, modules: Mapping[str, nn.Module]) -> None:
        eps = {m: edge.exported_program(m) for m in edge.methods}
        own = {m: {**ep.state_dict, **ep.constants} for m, ep in eps.items()}
        self._edge = edge.with_weights(own)
        self._modules = dict(modules)

    def sites(self, modules: Mapping[str, nn.Module]) -> Optional[List[LoraSite]]:
        """The adapter model's LoRA layers when derive() may build its programs (lora_sites), else None.

        Args:
          modules: method name -> the adapter module that method exports ("forward": the adapter model).
        """
        if set(modules) != set(self._modules) or "forward" not in modules:
            return None
        return lora_sites(modules["forward"], self._modules["forward"])

    def derive(
        self, modules: Mapping[str, nn.Module], sites: List[LoraSite], policy: DataPolicy
    ) -> Optional[EdgeProgramManager]:
        """The adapter model's edge programs, or None when it must be traced after all (a site's
        weight is not read by exactly one linear node of a method, a weight has no counterpart).

        Args:
          modules: method name -> the adapter module that method exports ("forward": the adapter model).
          sites: what sites(modules) returned.
          policy: the data policy to apply, as to_edge would.

        Returns:
          Its edge programs, or None.
        """
        forward_weights = module_weights(modules["forward"])
        programs: Dict[str, ExportedProgram] = {}
        for method in self._edge.methods:
            weights = module_weights(modules[method])
            # The same tensors as "forward"'s, found under this method module's names.
            by_storage = {storage_key(t): n for n, t in weights.items()}
            method_sites = []
            for s in sites:
                a = by_storage.get(storage_key(forward_weights[s.a_path]))
                b = by_storage.get(storage_key(forward_weights[s.b_path]))
                if a is None or b is None:
                    return None
                method_sites.append(dataclasses.replace(s, a_path=a, b_path=b))
            derived = _derive_method(self._edge.exported_program(method), weights, method_sites)
            if derived is None:
                return None
            _apply_data_policy(method, derived, policy)
            programs[method] = derived
        return EdgeProgramManager(programs)
