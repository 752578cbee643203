"""The int8 token embedding: the edgeshare::embedding_qc8w operator and the pass that uses it.

`torch.ops.edgeshare.embedding_qc8w(weight, scales, indices)` gathers rows of an int8-per-row
table (scheme qc8w, exir/quantize.py) and writes each as float32 q * scale:

    weight:  int8 [n, d]
    scales:  float32 [n]
    indices: int64 or int32, any shape
    returns  float32 [..., d]

The runtime runs it as the portable kernel of the same name (runtime/kernels/portable/shape.cc).
`quantize_embeddings` rewrites a program's aten.embedding over a pinned foundation weight to it,
with the weight's "<key>.qc8w" and "<key>.qc8w.scales" entries as lifted constants: the same
entries the delegate stores for an int8 fully connected over that weight, so a tied embedding
and lm_head hold one int8 entry (and its scales) and no float copy. A table whose placeholder
carries QUANT_SCHEME_META (the XNNPACK partitioner records each foundation weight's format under a
format with a fallback) is gathered in that format instead: "int8" by edgeshare::embedding_qb8w
(exir/embedding_qb8w.py) over "<key>.qb8w" and "<key>.qb8w.scales", "int4" by
edgeshare::embedding_qc4w (exir/embedding_qc4w.py) over "<key>.qc4w" and "<key>.qc4w.scales", "int5"
by edgeshare::embedding_qb5w (exir/embedding_qb5w.py) over "<key>.qb5w" and "<key>.qb5w.scales".
"""

from typing import Dict, Optional, Tuple

import torch
from edgeshare.exir import embedding_qb5w as _embedding_qb5w  # noqa: F401 (defines the 5-bit block operator)
from edgeshare.exir import embedding_qb8w as _embedding_qb8w  # noqa: F401 (defines the int8 block operator)
from edgeshare.exir import embedding_qc4w as _embedding_qc4w  # noqa: F401 (defines the int4 operator)
from edgeshare.exir.data_policy import DATA_KEY_META, DATA_OPEN_META, EXTERNAL_TAG_META
from edgeshare.exir.fc_formats import QB5W, QB8W, QC4W, QC8W, format_for_option
from edgeshare.exir.graph import lifted_inputs, lifted_tensor
from edgeshare.exir.quantize import DEFAULT_GROUP_SIZE, QUANT_SCHEME_META, gather_qc8w, quantized
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

__all__ = ["OPERATOR", "embedding_qc8w", "quantize_embeddings"]

OPERATOR = "edgeshare::embedding_qc8w"


@torch.library.custom_op(OPERATOR, mutates_args=())
def embedding_qc8w(weight: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The eager reference (exir/quantize.py's gather_qc8w)."""
    return gather_qc8w(weight, scales, indices)


@embedding_qc8w.register_fake
def _(weight, scales, indices):  # noqa: ANN001, ANN202
    return scales.new_empty((*indices.shape, weight.shape[1]))


def _gathers() -> Dict[str, object]:
    """Format scheme -> the operator gathering rows of a table stored in it."""
    ops = torch.ops.edgeshare
    return {
        QC8W.scheme: ops.embedding_qc8w.default,
        QB8W.scheme: ops.embedding_qb8w.default,
        QC4W.scheme: ops.embedding_qc4w.default,
        QB5W.scheme: ops.embedding_qb5w.default,
    }


def _pinned_float_table(ep: ExportedProgram, node: object) -> bool:
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder" or node.name not in lifted_inputs(ep):
        return False
    if node.meta.get(EXTERNAL_TAG_META) is None or node.meta.get(DATA_OPEN_META, False):
        return False
    tensor = lifted_tensor(ep, lifted_inputs(ep)[node.name].fqn)
    return tensor.dtype == torch.float32 and tensor.dim() == 2


def _add_constant(
    ep: ExportedProgram, after: torch.fx.Node, name: str, tensor: torch.Tensor, key: str, tag: str
) -> torch.fx.Node:
    """A lifted constant placeholder right after `after` (and its spec right after after's)."""
    with ep.graph.inserting_after(after):
        node = ep.graph.placeholder(name)
    fake = after.meta.get("val")
    if isinstance(fake, torch.Tensor):
        node.meta["val"] = fake.new_empty(tuple(tensor.shape), dtype=tensor.dtype)
    node.meta[DATA_KEY_META] = key
    node.meta[EXTERNAL_TAG_META] = tag
    node.meta[DATA_OPEN_META] = False
    specs = ep.graph_signature.input_specs
    at = next(i for i, s in enumerate(specs) if s.arg.name == after.name)
    specs.insert(at + 1, InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(node.name), node.name))
    ep.constants[node.name] = tensor
    _forget_lifted(ep)
    return node


def _forget_lifted(ep: ExportedProgram) -> None:
    """Drops graph.lifted_inputs' cached answer after the signature changed in place."""
    ep.__dict__.pop("_edgeshare_lifted", None)


def quantize_embeddings(ep: ExportedProgram, group_size: Optional[int] = None) -> Dict[str, str]:
    """Rewrites, in place, every aten.embedding over a pinned float32 foundation table to
    embedding_qc8w over the table's int8 entries, or to the gather of the format its placeholder's
    QUANT_SCHEME_META names ("int8": embedding_qb8w, "int4": embedding_qc4w); a table nothing else
    reads is dropped.

    Args:
      ep: an edge program whose placeholders carry the data policy's meta.
      group_size: the int4 group (required when a table is marked "int4").

    Returns:
      Each rewritten table's key -> its scheme ("int8", or "int4").

    Raises:
      ValueError: a table has a NaN or an infinity, or is marked "int4" without a group size or
        with a width that is not a multiple of it (naming its key).
    """
    done: Dict[str, Tuple[torch.fx.Node, torch.fx.Node, object]] = {}
    schemes: Dict[str, str] = {}
    count = 0
    for node in list(ep.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.embedding.default:
            continue
        weight, indices = node.args[0], node.args[1]
        if not _pinned_float_table(ep, weight):
            continue
        if weight.name not in done:
            fqn = lifted_inputs(ep)[weight.name].fqn
            key = weight.meta.get(DATA_KEY_META, fqn)
            fmt = format_for_option(weight.meta.get(QUANT_SCHEME_META, QC8W.option))
            try:
                if fmt.grouped and group_size is None:
                    raise ValueError(f"marked {fmt.option} without a group size")
                table = lifted_tensor(ep, fqn)
                q, scales = quantized(table, fmt.option, group_size or DEFAULT_GROUP_SIZE)
            except ValueError as e:
                raise ValueError(f"token embedding '{key}': {e}") from None
            tag = weight.meta[EXTERNAL_TAG_META]
            name = f"{weight.name}_{fmt.key_suffix[1:]}"
            q_node = _add_constant(ep, weight, name, q, key + fmt.key_suffix, tag)
            s_node = _add_constant(ep, q_node, f"{name}_scales", scales, key + fmt.scales_suffix, tag)
            op = _gathers()[fmt.scheme]
            done[weight.name] = (q_node, s_node, op)
            schemes[key] = fmt.option
        q_node, s_node, op = done[weight.name]
        with ep.graph.inserting_before(node):
            gather = ep.graph.call_function(op, (q_node, s_node, indices))
        gather.meta = dict(node.meta)
        node.replace_all_uses_with(gather)
        ep.graph.erase_node(node)
        count += 1
    for name in done:
        weight = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == name)
        if weight.users:
            continue
        fqn = lifted_inputs(ep)[name].fqn
        ep.graph.erase_node(weight)
        ep.graph_signature.input_specs[:] = [s for s in ep.graph_signature.input_specs if s.arg.name != name]
        _forget_lifted(ep)
        if not any(s.target == fqn for s in ep.graph_signature.input_specs):
            ep.state_dict.pop(fqn, None)
            ep.constants.pop(fqn, None)
    if count:
        ep.graph_module.recompile()
    return schemes
