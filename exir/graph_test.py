"""exir.graph: which placeholders are lifted weights, their fqn and tensor; node arguments."""

import pytest
import torch
from edgeshare.exir.graph import is_lifted, lifted_input, lifted_inputs, lifted_tensor, node_arg
from torch import nn
from torch.export.graph_signature import InputKind


class _Lifted(nn.Module):
    """A parameter, a persistent and a non-persistent buffer, and a tensor constant."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("shift", torch.full((3,), 0.5), persistent=False)
        self.const = torch.arange(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(self.fc(x) * self.scale + self.shift + self.const, max_val=2.0)


def _program() -> torch.export.ExportedProgram:
    return torch.export.export(_Lifted(), (torch.randn(2, 4),))


def _placeholder(ep: torch.export.ExportedProgram, fqn: str) -> torch.fx.Node:
    name = next(n for n, lifted in lifted_inputs(ep).items() if lifted.fqn == fqn)
    return next(n for n in ep.graph.nodes if n.name == name)


def test_lifted_inputs_name_kind_and_fqn_of_every_weight_but_not_the_user_input() -> None:
    ep = _program()
    kinds = {lifted.fqn: lifted.kind for lifted in lifted_inputs(ep).values()}
    assert kinds == {
        "fc.weight": InputKind.PARAMETER,
        "fc.bias": InputKind.PARAMETER,
        "scale": InputKind.BUFFER,
        "shift": InputKind.BUFFER,
        "const": InputKind.CONSTANT_TENSOR,
    }
    (user,) = ep.graph_signature.user_inputs
    user_node = next(n for n in ep.graph.nodes if n.name == user)
    assert not is_lifted(ep, user_node) and lifted_input(ep, user_node) is None
    assert not is_lifted(ep, 1.0)
    linear = next(n for n in ep.graph.nodes if n.op == "call_function")
    assert not is_lifted(ep, linear)


def test_lifted_tensor_reads_state_dict_and_constants() -> None:
    ep = _program()
    for fqn, want in [
        ("fc.weight", ep.state_dict["fc.weight"]),
        ("scale", torch.full((3,), 2.0)),
        ("shift", torch.full((3,), 0.5)),
        ("const", torch.arange(3.0)),
    ]:
        node = _placeholder(ep, fqn)
        assert is_lifted(ep, node)
        assert lifted_input(ep, node).fqn == fqn
        assert torch.equal(lifted_tensor(ep, fqn), want)
    assert "shift" not in ep.state_dict and "const" not in ep.state_dict


def test_lifted_tensor_of_an_unknown_fqn_names_it() -> None:
    with pytest.raises(KeyError, match="'nope.weight'"):
        lifted_tensor(_program(), "nope.weight")


def test_node_arg_by_position_by_name_or_default() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    positional = graph.call_function(torch.ops.aten.hardtanh.default, (x, -0.5, 0.5))
    keyword = graph.call_function(torch.ops.aten.hardtanh.default, (x,), {"max_val": 3.0})
    assert node_arg(positional, 1, "min_val", -1.0) == -0.5
    assert node_arg(positional, 2, "max_val", 1.0) == 0.5
    assert node_arg(keyword, 1, "min_val", -1.0) == -1.0
    assert node_arg(keyword, 2, "max_val", 1.0) == 3.0


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
