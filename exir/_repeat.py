"""A model whose layers repeat, exported with its first three layers and the rest copied in its graph.

Tracing and decomposing cost the same for every decoder layer of a transformer, though each layer's
graph is the one before it with other weights. RepeatedLayers finds a model's nn.ModuleList of
alike layers (the same module tree, parameter and buffer shapes and plain attributes, up to the
layer's own index); truncated() exports it with the first three; expand() then builds the whole
edge program from that one: layer 2's nodes copied for each later layer, reading that layer's
weights and state (its placeholders, in the order torch.export lifts them) and the layer before's
outputs, the nodes after the layers reading the last copy, and each copy's state mutations added
to the outputs after layer 2's. The program is the one a full trace gives (the same ops, values
and signature order), made in the time of three layers.

What expand() cannot check from the modules it checks in the graph: layers 1 and 2 must be the same
nodes (so no op depends on the layer's index), reading layer 0's and 1's outputs in the same places,
and nothing after the layers may read an earlier layer; any difference returns None and the caller
traces the whole model. matches_eager() then runs the expanded program on the example inputs
against the module itself, a last check that no copy computes something the layer would not.

    repeat = RepeatedLayers.find(model)                 # None: no ModuleList worth it
    with repeat.truncated():
        programs = {m: torch.export.export(...)}          # three layers
    edge = to_edge(programs, rewrite=lambda method, ep: repeat.expand(ep, prefix, weights))
"""

import contextlib
import dataclasses
import math
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from edgeshare.exir._resident import release
from edgeshare.exir._weights import placeholder_name
from torch import nn
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, OutputKind, OutputSpec, TensorArgument
from torch.utils import _pytree as pytree

__all__ = ["TRACED_LAYERS", "RepeatedLayers", "matches_eager"]

# Layer 2 is copied; layers 0 and 1 show what a layer reads from the one before it.
TRACED_LAYERS = 3
# Fewer layers than this are traced whole: copying saves less than it risks.
_MIN_LAYERS = 6

_PLAIN = (bool, int, float, str, type(None), torch.dtype)


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, _PLAIN) and _plain(v) for k, v in value.items())
    return False


def _same_value(a: Any, b: Any, index_a: int, index_b: int) -> bool:
    """Equal plain values; an int equal to each layer's own index (layer_idx) counts as the same."""
    if type(a) is int and type(b) is int and (a, b) == (index_a, index_b):
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _attributes(module: nn.Module) -> Dict[str, Any]:
    """The plain attributes of a module (its own __dict__, not its parameters, buffers or children)."""
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and _plain(v)}


def _layer_difference(first: nn.Module, other: nn.Module, index_first: int, index_other: int) -> Optional[str]:
    """What makes other not a copy of first with other weights, or None."""
    mods_a, mods_b = dict(first.named_modules()), dict(other.named_modules())
    if [(n, type(m)) for n, m in mods_a.items()] != [(n, type(m)) for n, m in mods_b.items()]:
        return "its modules"
    for kind in ("named_parameters", "named_buffers"):
        a = [(n, t.shape, t.dtype) for n, t in getattr(first, kind)()]
        b = [(n, t.shape, t.dtype) for n, t in getattr(other, kind)()]
        if a != b:
            return kind.split("_")[1]
    for path, module in mods_a.items():
        mine, theirs = _attributes(module), _attributes(mods_b[path])
        if mine.keys() != theirs.keys():
            return f"the attributes of '{path}'"
        for key, value in mine.items():
            if not _same_value(value, theirs[key], index_first, index_other):
                return f"'{path}.{key}'".replace("'.", "'")
    return None


def _relabel(target: str, prefix: str, frm: int, to: int) -> Optional[str]:
    """A layer's weight or state name as layer `to` names it: the index after prefix, or else the
    one number in the name equal to frm ("key_cache_2" -> "key_cache_5"); None when ambiguous."""
    head = f"{prefix}.{frm}."
    if target.startswith(head):
        return f"{prefix}.{to}.{target[len(head):]}"
    parts = re.split(r"(\d+)", target)
    hits = [i for i in range(1, len(parts), 2) if parts[i] == str(frm)]
    if len(hits) != 1:
        return None
    parts[hits[0]] = str(to)
    return "".join(parts)


def _layer_index(node: torch.fx.Node, pattern: "re.Pattern[str]") -> Optional[int]:
    indices = set()
    for value in (node.meta.get("nn_module_stack") or {}).values():
        match = pattern.match(value[0])
        if match:
            indices.add(int(match.group(1)))
    return indices.pop() if len(indices) == 1 else (-1 if indices else None)


def _rename_stack(meta: Dict[str, Any], pattern: "re.Pattern[str]", index: int) -> None:
    """nn_module_stack of a copied node: the copy's layer path instead of layer 2's."""
    stack = meta.get("nn_module_stack")
    if not stack:
        return

    def fix(path: str) -> str:
        match = pattern.match(path)
        return path if match is None else f"{path[: match.start(1)]}{index}{path[match.end(1):]}"

    meta["nn_module_stack"] = {fix(k): (fix(v[0]), *v[1:]) for k, v in stack.items()}


@dataclasses.dataclass
class _Layers:
    """The graph's call nodes split at the layers: before, each traced layer's, after."""

    before: List[torch.fx.Node]
    layers: List[List[torch.fx.Node]]
    after: List[torch.fx.Node]


def _split(graph: torch.fx.Graph, pattern: "re.Pattern[str]") -> Optional[_Layers]:
    before: List[torch.fx.Node] = []
    layers: List[List[torch.fx.Node]] = [[] for _ in range(TRACED_LAYERS)]
    after: List[torch.fx.Node] = []
    current = -1
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op != "call_function":
            return None
        index = _layer_index(node, pattern)
        if index == -1 or (index is not None and not current <= index < TRACED_LAYERS):
            return None
        if index is None:
            if current == -1:
                before.append(node)
                continue
            current = TRACED_LAYERS
            after.append(node)
            continue
        if current == TRACED_LAYERS or index < current:
            return None  # a layer's node after another layer's, or after the layers
        current = index
        layers[index].append(node)
    if any(not layer for layer in layers) or len({len(layer) for layer in layers}) != 1:
        return None
    return _Layers(before, layers, after)


@dataclasses.dataclass
class _Template:
    """Layer 2's nodes and where each of their inputs comes from, for making the copies."""

    nodes: List[torch.fx.Node]
    # (node index, pytree leaf index) -> ("own", j) | ("carried", j) | ("state", target) | ("shared", None)
    sources: Dict[Tuple[int, int], Tuple[str, Any]]
    state: Dict[str, torch.fx.Node]  # layer 2's placeholder by target


def _template(
    split: _Layers, placeholders: Mapping[torch.fx.Node, InputSpec], prefix: str
) -> Optional[_Template]:
    """Layer 2 described by its inputs, when layer 1 is the same description one layer earlier."""
    last, prev, first = split.layers[2], split.layers[1], split.layers[0]
    pos_last = {n: i for i, n in enumerate(last)}
    pos_prev = {n: i for i, n in enumerate(prev)}
    pos_first = {n: i for i, n in enumerate(first)}
    sources: Dict[Tuple[int, int], Tuple[str, Any]] = {}
    state: Dict[str, torch.fx.Node] = {}
    for j, (a, b) in enumerate(zip(prev, last)):
        if a.target != b.target:
            return None
        leaves_a, spec_a = pytree.tree_flatten((a.args, a.kwargs))
        leaves_b, spec_b = pytree.tree_flatten((b.args, b.kwargs))
        if spec_a != spec_b:
            return None
        for leaf, (x, y) in enumerate(zip(leaves_a, leaves_b)):
            if not isinstance(y, torch.fx.Node):
                if isinstance(x, torch.fx.Node) or type(x) is not type(y) or x != y:
                    return None
                continue
            if not isinstance(x, torch.fx.Node):
                return None
            if y in pos_last:
                if pos_prev.get(x) != pos_last[y]:
                    return None
                sources[(j, leaf)] = ("own", pos_last[y])
            elif y in pos_prev:
                if pos_first.get(x) != pos_prev[y]:
                    return None
                sources[(j, leaf)] = ("carried", pos_prev[y])
            elif y.op == "placeholder" and x is not y:
                spec_x, spec_y = placeholders.get(x), placeholders.get(y)
                if spec_x is None or spec_y is None or spec_x.kind != spec_y.kind or spec_y.target is None:
                    return None
                if _relabel(spec_x.target, prefix, 1, 2) != spec_y.target:
                    return None
                sources[(j, leaf)] = ("state", spec_y.target)
                state[spec_y.target] = y
            elif x is y and (y.op == "placeholder" or y in split.before):
                sources[(j, leaf)] = ("shared", None)
            else:
                return None
    # Layers 0 and 1 are read by the layers only, and by the outputs as their state's updates.
    traced = set(first) | set(prev) | set(last)
    for node in first + prev:
        if any(user not in traced and user.op != "output" for user in node.users):
            return None
    order = {n: i for i, n in enumerate(placeholders)}
    ordered = dict(sorted(state.items(), key=lambda item: order[item[1]]))
    return _Template(last, sources, ordered)


@dataclasses.dataclass
class RepeatedLayers:
    """A model's run of alike layers: an nn.ModuleList (parent.attr) of at least six layers, each
    from layer 2 on the same module tree, shapes and plain attributes as layer 2.

    Attributes:
      parent: the module holding the list.
      attr: the list's attribute name.
      layers: the list.
    """

    parent: nn.Module
    attr: str
    layers: nn.ModuleList

    @classmethod
    def find(cls, model: nn.Module) -> Optional["RepeatedLayers"]:
        """The longest such list in model, or None (no list of alike layers of six or more)."""
        best: Optional[RepeatedLayers] = None
        for path, module in model.named_modules():
            if not isinstance(module, nn.ModuleList) or len(module) < _MIN_LAYERS:
                continue
            if best is not None and len(module) <= len(best.layers):
                continue
            if any(_layer_difference(module[2], module[k], 2, k) for k in range(3, len(module))):
                continue
            parent_path, _, attr = path.rpartition(".")
            best = cls(model.get_submodule(parent_path), attr, module)
        return best

    def prefix(self, module: nn.Module) -> Optional[str]:
        """The list's path under module (a method's module wrapping the model), or None."""
        for path, sub in module.named_modules(remove_duplicate=False):
            if sub is self.layers:
                return path
        return None

    @contextlib.contextmanager
    def truncated(self) -> Iterator[None]:
        """The model with only its first TRACED_LAYERS layers while the block runs."""
        setattr(self.parent, self.attr, nn.ModuleList(list(self.layers)[:TRACED_LAYERS]))
        try:
            yield
        finally:
            setattr(self.parent, self.attr, self.layers)

    def expand(self, ep: ExportedProgram, prefix: str, weights: Mapping[str, torch.Tensor]) -> Optional[ExportedProgram]:
        """The edge program of the whole model, from the program of its first TRACED_LAYERS layers.

        Args:
          ep: the truncated model's decomposed program (changed in place when this succeeds;
            left as it was when it returns None).
          prefix: the list's path under the module ep exported (see prefix()).
          weights: that module's weights and buffers by name, with every layer (module_weights of it
            after truncated() ended).

        Returns:
          The program, or None when its layers are not copies of one another in the graph.
        """
        # Every check comes before the first change to the graph.
        plan = _plan(ep, prefix, len(self.layers), weights)
        if plan is None:
            return None
        state = _add_state(ep, plan, weights)
        copies = _copy_layers(ep.graph, plan, state.nodes)
        _read_last_copy(plan, copies)
        _add_state_outputs(plan, copies)
        return _whole_program(ep, plan, state)


@dataclasses.dataclass
class _Plan:
    """What expand() changes, found before it changes anything.

    Attributes:
      total: the model's number of layers.
      pattern: matches a layer's path under the list, its index as group 1.
      specs: placeholder name -> its input spec.
      split: the graph's nodes split at the layers.
      template: layer 2 described by its inputs.
      output: the graph's output node.
      results: the output node's values.
      out_specs: their output specs.
      last_outputs: indices of the results layer 2 computes (its state's updates).
      updated: (layer, result index) -> the target that copy's update writes.
      existing: layer -> layer 2's state target -> the placeholder that layer already has.
      new: (layer, layer 2's target, the layer's target, layer 2's spec) of each placeholder to add.
    """

    total: int
    pattern: "re.Pattern[str]"
    specs: Dict[str, InputSpec]
    split: _Layers
    template: _Template
    output: torch.fx.Node
    results: List[Any]
    out_specs: List[OutputSpec]
    last_outputs: List[int]
    updated: Dict[Tuple[int, int], str]
    existing: Dict[int, Dict[str, torch.fx.Node]]
    new: List[Tuple[int, str, str, InputSpec]]


def _plan(ep: ExportedProgram, prefix: str, total: int, weights: Mapping[str, torch.Tensor]) -> Optional[_Plan]:
    """The expansion of ep to total layers, or None when its layers are not copies of one another."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)(?:\.|$)")
    graph = ep.graph
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    placeholders = {n: specs[n.name] for n in graph.nodes if n.op == "placeholder" and n.name in specs}
    split = _split(graph, pattern)
    template = _template(split, placeholders, prefix) if split is not None else None
    if split is None or template is None:
        return None
    output = next(n for n in graph.nodes if n.op == "output")
    out_specs = list(ep.graph_signature.output_specs)
    results = list(output.args[0])
    if len(results) != len(out_specs):
        return None
    traced = set().union(*split.layers)
    if any(r in traced and s.kind != OutputKind.BUFFER_MUTATION for r, s in zip(results, out_specs)):
        return None  # a layer's value returned as it is (all hidden states): not one per layer
    in_last = set(template.nodes)
    last_outputs = [i for i, r in enumerate(results) if r in in_last]
    updated = {
        (k, i): _relabel(out_specs[i].target, prefix, 2, k) for k in range(TRACED_LAYERS, total) for i in last_outputs
    }
    if any(name is None for name in updated.values()):
        return None
    # Each later layer's state: an existing placeholder (a KV cache the wrapper registers for
    # every layer) or a new one after layer 2's of its kind, with the module's tensor.
    by_target = {s.target: n for n, s in placeholders.items() if s.target is not None}
    existing: Dict[int, Dict[str, torch.fx.Node]] = {}
    new: List[Tuple[int, str, str, InputSpec]] = []
    for k in range(TRACED_LAYERS, total):
        for target, node in template.state.items():
            name = _relabel(target, prefix, 2, k)
            if name is None:
                return None
            if name in by_target:
                existing.setdefault(k, {})[target] = by_target[name]
                continue
            if name not in weights:
                return None
            new.append((k, target, name, placeholders[node]))
    return _Plan(
        total, pattern, specs, split, template, output, results, out_specs, last_outputs, updated, existing, new
    )


@dataclasses.dataclass
class _State:
    """Each later layer's state placeholders.

    Attributes:
      nodes: layer -> layer 2's state target -> that layer's placeholder.
      created: the added placeholders' names -> their input specs.
      tensors: each added target -> (its tensor, whether it is in the state dict).
    """

    nodes: Dict[int, Dict[str, torch.fx.Node]]
    created: Dict[str, InputSpec]
    tensors: Dict[str, Tuple[torch.Tensor, bool]]


def _add_state(ep: ExportedProgram, plan: _Plan, weights: Mapping[str, torch.Tensor]) -> _State:
    """Adds the placeholders the plan's later layers lack, each kind after layer 2's last."""
    graph = ep.graph
    template = plan.template
    nodes = {k: dict(v) for k, v in plan.existing.items()}
    anchors: Dict[InputKind, torch.fx.Node] = {}
    order = {n: i for i, n in enumerate(graph.nodes)}
    for _, target, _, spec in plan.new:
        node = template.state[target]
        anchor = anchors.get(spec.kind)
        if anchor is None or order[node] > order[anchor]:
            anchors[spec.kind] = node
    created: Dict[str, InputSpec] = {}
    tensors: Dict[str, Tuple[torch.Tensor, bool]] = {}
    for k, target, name, spec in plan.new:
        old = template.state[target]
        with graph.inserting_after(anchors[spec.kind]):
            node = graph.placeholder(placeholder_name(name, spec.kind))
        node.meta = {key: value for key, value in old.meta.items() if key in ("val", "tensor_meta")}
        anchors[spec.kind] = node
        created[node.name] = dataclasses.replace(spec, arg=TensorArgument(node.name), target=name)
        tensors[name] = (weights[name], spec.target in ep.state_dict)
        nodes.setdefault(k, {})[target] = node
    return _State(nodes, created, tensors)


def _copy_layers(
    graph: torch.fx.Graph, plan: _Plan, state: Mapping[int, Mapping[str, torch.fx.Node]]
) -> Dict[int, List[torch.fx.Node]]:
    """Layer 2's nodes copied for each later layer, in layer order, where the nodes after the
    layers begin; layer -> its nodes (layer 2's own for 2)."""
    template = plan.template
    copies: Dict[int, List[torch.fx.Node]] = {2: template.nodes}
    insert_at = plan.split.after[0] if plan.split.after else plan.output
    for k in range(TRACED_LAYERS, plan.total):
        made: List[torch.fx.Node] = []
        for j, node in enumerate(template.nodes):
            leaves, tree = pytree.tree_flatten((node.args, node.kwargs))
            for leaf, value in enumerate(leaves):
                source = template.sources.get((j, leaf))
                if source is None or source[0] == "shared":
                    continue
                kind, key = source
                if kind == "own":
                    leaves[leaf] = made[key]
                elif kind == "carried":
                    leaves[leaf] = copies[k - 1][key]
                else:
                    leaves[leaf] = state[k][key]
            args, kwargs = pytree.tree_unflatten(leaves, tree)
            with graph.inserting_before(insert_at):
                copy = graph.create_node(node.op, node.target, tuple(args), dict(kwargs))
            copy.meta = dict(node.meta)
            _rename_stack(copy.meta, plan.pattern, k)
            made.append(copy)
        copies[k] = made
    return copies


def _read_last_copy(plan: _Plan, copies: Mapping[int, List[torch.fx.Node]]) -> None:
    """The nodes after the layers read the last copy instead of layer 2."""
    position = {n: i for i, n in enumerate(plan.template.nodes)}
    final = copies[plan.total - 1]
    for node in plan.split.after:
        node.args, node.kwargs = torch.fx.node.map_arg(
            (node.args, node.kwargs), lambda n: final[position[n]] if n in position else n
        )


def _add_state_outputs(plan: _Plan, copies: Mapping[int, List[torch.fx.Node]]) -> None:
    """Each copy's state updates, after layer 2's and in layer 2's order (plan.out_specs too)."""
    position = {n: i for i, n in enumerate(plan.template.nodes)}
    extra_results: List[torch.fx.Node] = []
    extra_specs: List[OutputSpec] = []
    for k in range(TRACED_LAYERS, plan.total):
        for i in plan.last_outputs:
            extra_results.append(copies[k][position[plan.results[i]]])
            extra_specs.append(
                dataclasses.replace(
                    plan.out_specs[i], arg=TensorArgument(extra_results[-1].name), target=plan.updated[(k, i)]
                )
            )
    cut = (max(plan.last_outputs) + 1) if plan.last_outputs else 0
    plan.output.args = (tuple(plan.results[:cut] + extra_results + plan.results[cut:]),)
    plan.out_specs[:] = plan.out_specs[:cut] + extra_specs + plan.out_specs[cut:]


def _whole_program(ep: ExportedProgram, plan: _Plan, state: _State) -> ExportedProgram:
    """The expanded graph as a program: its signature and the added tensors."""
    graph = ep.graph
    graph.lint()
    ep.graph_module.recompile()
    input_specs = []
    state_dict = dict(ep.state_dict)
    constants = dict(ep.constants)
    for node in graph.nodes:
        if node.op == "placeholder":
            input_specs.append(state.created.get(node.name) or plan.specs[node.name])
    for name, (tensor, persistent) in state.tensors.items():
        (state_dict if persistent else constants)[name] = tensor
    signature = type(ep.graph_signature)(input_specs=input_specs, output_specs=plan.out_specs)
    return ExportedProgram(
        root=ep.graph_module,
        graph=graph,
        graph_signature=signature,
        state_dict=state_dict,
        range_constraints=ep.range_constraints,
        module_call_graph=ep.module_call_graph,
        constants=constants,
        verifiers=ep.verifiers,
    )


class _Releasing(torch.fx.Interpreter):
    """Runs a graph and hands each weight's mapped pages back after its last use (see _resident)."""

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        for done in self.user_to_last_uses.get(n, []):
            value = self.env.get(done)
            if done.op == "placeholder" and isinstance(value, torch.Tensor):
                release(value)
        return result


def _release_own(module: nn.Module, inputs: Any, output: Any) -> None:
    for tensor in (*module.parameters(recurse=False), *module.buffers(recurse=False)):
        release(tensor)


def matches_eager(ep: ExportedProgram, module: nn.Module, example_inputs: Sequence[Any]) -> bool:
    """Whether ep's outputs on example_inputs equal module's own (within float rounding), from the
    state module holds now; neither's state is changed. Each weight's pages are released after
    its last read, so checking does not make the whole model resident."""
    threads = torch.get_num_threads()
    # A few tokens through the model: too little work to share between threads.
    torch.set_num_threads(1)
    try:
        return _matches_eager(ep, module, example_inputs)
    finally:
        torch.set_num_threads(threads)


def _matches_eager(ep: ExportedProgram, module: nn.Module, example_inputs: Sequence[Any]) -> bool:
    state = {name: b.detach().clone() for name, b in module.named_buffers()}
    hooks = [m.register_forward_hook(_release_own) for m in module.modules()]
    try:
        with torch.no_grad():
            expected = module(*example_inputs)
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for name, b in module.named_buffers():
                b.copy_(state[name])
    tables = {**ep.state_dict, **ep.constants}
    args: List[Any] = []
    users = iter(example_inputs)
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(users))
        elif spec.kind == InputKind.BUFFER:
            args.append(tables[spec.target].clone())
        else:
            args.append(tables[spec.target])
    try:
        with torch.no_grad():
            outputs = _Releasing(ep.graph_module).run(*args)
    except Exception:  # a graph that does not run is not the model's: the caller traces it whole
        return False
    mutations = sum(1 for s in ep.graph_signature.output_specs if s.kind != OutputKind.USER_OUTPUT)
    got = list(outputs)[mutations:]
    want = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        scale = float(b.abs().max()) if b.numel() else 0.0
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-5 + 1e-4 * scale):
            return False
    return True
