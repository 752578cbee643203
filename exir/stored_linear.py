"""Open adapter weights stored in an adapter format row: the edgeshare::linear_stored operator and
the pass that uses it.

`torch.ops.edgeshare.linear_stored(x, weight, scales)` is a linear without bias over a weight read
as stored (a swappable adapter's, rebound at each execute):

    x:       float32 [..., in]
    weight:  [out, in] in a row's dtype (float16: f16w; int8: qc8w)
    scales:  float32 [out] for a quantized row, else None
    returns  float32 [..., out] = x . (float32(weight) * scales[:, None])^T

The XNNPACK delegate runs it as FULLY_CONNECTED_UNPACKED (a HALF weight input, or a CHAR one with
its scales as a third input); its activations stay float32. `store_open_linears` rewrites a
program's aten.linear over an open float32 weight (no bias) to it: the weight's tensor becomes the
row's values under "<key><key_suffix>", and a quantized row's scales a further open entry under
"<key><scales_suffix>" (same tag), so each adapter's data file holds them in that format.
STORED_FROM_META on each such placeholder says which float weight it is made from, and how, so
another adapter's file can be written from that adapter's model (exir/swappable.py).

    store_open_linears(edge_program, fc_format("f16w"))
"""

from typing import Optional

import torch
from edgeshare.exir.data_policy import DATA_KEY_META, DATA_OPEN_META, EXTERNAL_TAG_META
from edgeshare.exir.fc_formats import FcFormat, fc_format
from edgeshare.exir.graph import lifted_inputs, lifted_tensor, node_arg
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

__all__ = ["OPERATOR", "STORED_FROM_META", "linear_stored", "store_open_linears", "stored_entry"]

OPERATOR = "edgeshare::linear_stored"
# On a placeholder store_open_linears made: (the float weight's fqn, the row's scheme, "values" or
# "scales").
STORED_FROM_META = "edgeshare_stored_from"


@torch.library.custom_op(OPERATOR, mutates_args=())
def linear_stored(x: torch.Tensor, weight: torch.Tensor, scales: Optional[torch.Tensor]) -> torch.Tensor:
    """The eager reference: the weight widened to float32 (times its scales per row)."""
    w = weight.to(torch.float32)
    if scales is not None:
        w = w * scales.to(torch.float32)[:, None]
    return torch.nn.functional.linear(x, w)


@linear_stored.register_fake
def _(x, weight, scales):  # noqa: ANN001, ANN202
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def stored_entry(weight: torch.Tensor, scheme: str, part: str) -> torch.Tensor:
    """One entry of a float32 weight stored in a row (STORED_FROM_META's scheme and part)."""
    values, scales = fc_format(scheme).stored(weight)
    entry = values if part == "values" else scales
    if entry is None:
        raise ValueError(f"fc format {scheme} stores no {part}")
    return entry


def _open_weight(ep: ExportedProgram, node: torch.fx.Node) -> Optional[str]:
    """The fqn of an open float32 matrix placeholder every user of which reads it as a linear's
    weight without bias, or None."""
    lifted = lifted_inputs(ep)
    if node.op != "placeholder" or node.name not in lifted or not node.meta.get(DATA_OPEN_META, False):
        return None
    fqn = lifted[node.name].fqn
    tensor = lifted_tensor(ep, fqn)
    if tensor.dtype != torch.float32 or tensor.dim() != 2 or not node.users:
        return None
    for user in node.users:
        if user.target is not torch.ops.aten.linear.default or len(user.args) < 2 or user.args[1] is not node:
            return None
        if user.args[0] is node or node_arg(user, 2, "bias", None) is not None:
            return None
    return fqn


def _set_lifted(ep: ExportedProgram, fqn: str, tensor: torch.Tensor) -> None:
    if fqn in ep.state_dict:
        ep.state_dict[fqn] = torch.nn.Parameter(tensor, requires_grad=False)
    else:
        ep.constants[fqn] = tensor


def store_open_linears(ep: ExportedProgram, fmt: FcFormat) -> int:
    """Rewrites, in place, every aten.linear over an open float32 weight without bias (and only
    read so) to linear_stored over the weight stored in fmt (see the module doc).

    Args:
      ep: an edge program whose placeholders carry the data policy's meta.
      fmt: an adapter format row other than f32.

    Returns:
      How many weights were rewritten.

    Raises:
      ValueError: a weight fmt cannot store (a NaN or an infinity), naming its key.
    """
    count = 0
    for node in list(ep.graph.nodes):
        fqn = _open_weight(ep, node)
        if fqn is None:
            continue
        key = node.meta.get(DATA_KEY_META, fqn)
        try:
            values, scales = fmt.stored(lifted_tensor(ep, fqn))
        except ValueError as e:
            raise ValueError(f"adapter weight '{key}': {e}") from None
        _set_lifted(ep, fqn, values)
        node.meta["val"] = node.meta["val"].new_empty(tuple(values.shape), dtype=values.dtype)
        node.meta[DATA_KEY_META] = key + fmt.key_suffix
        node.meta[STORED_FROM_META] = (fqn, fmt.scheme, "values")
        s_node = None
        if scales is not None:
            s_node = _add_open_constant(ep, node, f"{node.name}_scales", scales, key + fmt.scales_suffix)
            s_node.meta[STORED_FROM_META] = (fqn, fmt.scheme, "scales")
        for user in list(node.users):
            if user.target is not torch.ops.aten.linear.default:
                continue
            with ep.graph.inserting_before(user):
                stored = ep.graph.call_function(torch.ops.edgeshare.linear_stored.default, (user.args[0], node, s_node))
            stored.meta = dict(user.meta)
            user.replace_all_uses_with(stored)
            ep.graph.erase_node(user)
        count += 1
    if count:
        ep.graph_module.recompile()
    return count


def _add_open_constant(
    ep: ExportedProgram, after: torch.fx.Node, name: str, tensor: torch.Tensor, key: str
) -> torch.fx.Node:
    """An open lifted constant placeholder right after `after`, in after's file."""
    with ep.graph.inserting_after(after):
        node = ep.graph.placeholder(name)
    node.meta["val"] = after.meta["val"].new_empty(tuple(tensor.shape), dtype=tensor.dtype)
    node.meta[DATA_KEY_META] = key
    node.meta[EXTERNAL_TAG_META] = after.meta.get(EXTERNAL_TAG_META)
    node.meta[DATA_OPEN_META] = True
    specs = ep.graph_signature.input_specs
    at = next(i for i, s in enumerate(specs) if s.arg.name == after.name)
    specs.insert(at + 1, InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(node.name), node.name))
    ep.constants[node.name] = tensor
    ep.__dict__.pop("_edgeshare_lifted", None)  # graph.lifted_inputs' cached answer
    return node
