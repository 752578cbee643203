"""Graph helpers shared by exir and the backends: lifted weights and node arguments.

torch.export lifts a module's parameters, buffers and tensor constants into placeholders; the
graph signature says which placeholder is which, the tensors live in ep.state_dict (parameters,
persistent buffers) or ep.constants (lifted constants, non-persistent buffers). These helpers say
it once:

    lifted = lifted_inputs(ep)                  # placeholder name -> LiftedInput(kind, fqn)
    state = mutated_buffers(ep)                 # placeholder name -> the node of its new value
    if is_lifted(ep, node):
        tensor = lifted_tensor(ep, lifted[node.name].fqn)
    bias = node_arg(linear_node, 2, "bias", None)

Pure functions of an ExportedProgram or a node: no state, safe from any thread that may read the
program.
"""

import dataclasses
from typing import Any, Dict, Optional

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

__all__ = [
    "LIFTED_KINDS",
    "LiftedInput",
    "is_lifted",
    "lifted_input",
    "lifted_inputs",
    "lifted_tensor",
    "mutated_buffers",
    "node_arg",
]

# The input kinds whose placeholder stands for a tensor the program holds (not a runtime input).
LIFTED_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


@dataclasses.dataclass(frozen=True)
class LiftedInput:
    """A placeholder that stands for a parameter, buffer or lifted tensor constant.

    Attributes:
      kind: InputKind.PARAMETER, BUFFER or CONSTANT_TENSOR.
      fqn: the tensor's fully qualified name (its key in ep.state_dict or ep.constants).
    """

    kind: InputKind
    fqn: str


def lifted_inputs(ep: ExportedProgram) -> Dict[str, LiftedInput]:
    """Placeholder name -> LiftedInput for every parameter, buffer and lifted constant of ep.

    A buffer the program mutates (a KV cache) is not lifted: it is state, see mutated_buffers.

    Args:
      ep: the program.

    Returns:
      A new dict, in the signature's input order.
    """
    return dict(_lifted(ep))


def _lifted(ep: ExportedProgram) -> Dict[str, LiftedInput]:
    """lifted_inputs, computed once per signature: partitioners ask for every node of large graphs."""
    signature = ep.graph_signature
    token = (id(signature), len(signature.input_specs), len(signature.output_specs))
    cached = ep.__dict__.get("_edgeshare_lifted")
    if cached is not None and cached[0] == token and cached[1] is signature:
        return cached[2]
    mutated = {spec.target for spec in signature.output_specs if spec.kind == OutputKind.BUFFER_MUTATION}
    out: Dict[str, LiftedInput] = {}
    for spec in signature.input_specs:
        if spec.kind in LIFTED_KINDS and not (spec.kind == InputKind.BUFFER and spec.target in mutated):
            out[spec.arg.name] = LiftedInput(spec.kind, spec.target)
    ep.__dict__["_edgeshare_lifted"] = (token, signature, out)
    return out


def mutated_buffers(ep: ExportedProgram) -> Dict[str, str]:
    """Placeholder name -> output name, for every buffer ep mutates (its state, e.g. a KV cache).

    torch.export records `buf.index_copy_(...)` functionally: the placeholder holds the buffer's
    value before the call, and the named output node its value after.

    Args:
      ep: the program.

    Returns:
      A new dict, in the signature's input order.
    """
    new_value = {
        spec.target: spec.arg.name
        for spec in ep.graph_signature.output_specs
        if spec.kind == OutputKind.BUFFER_MUTATION
    }
    return {
        spec.arg.name: new_value[spec.target]
        for spec in ep.graph_signature.input_specs
        if spec.kind == InputKind.BUFFER and spec.target in new_value
    }


def lifted_input(ep: ExportedProgram, node: Any) -> Optional[LiftedInput]:
    """The LiftedInput node stands for, or None (not a placeholder, or a runtime input).

    Args:
      ep: the program node belongs to.
      node: anything (a non-node is never lifted).
    """
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return None
    return _lifted(ep).get(node.name)


def is_lifted(ep: ExportedProgram, node: Any) -> bool:
    """Whether node is a placeholder for a parameter, buffer or lifted constant of ep."""
    return lifted_input(ep, node) is not None


def lifted_tensor(ep: ExportedProgram, fqn: str) -> torch.Tensor:
    """The tensor a lifted input names: ep.state_dict[fqn], else ep.constants[fqn].

    Args:
      ep: the program.
      fqn: a LiftedInput's fqn.

    Raises:
      KeyError: ep holds no tensor under fqn (the message names it).
    """
    if fqn in ep.state_dict:
        return ep.state_dict[fqn]
    if fqn in ep.constants:
        return ep.constants[fqn]
    raise KeyError(f"lifted tensor '{fqn}' is in neither the program's state_dict nor its constants")


def node_arg(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    """An argument of a call node, given by position or by name, else default.

    Args:
      node: a call_function node.
      index: the argument's position in the op's schema.
      name: its name in the schema (used when it was passed as a keyword).
      default: the value when it was passed neither way (the schema's default).
    """
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)
