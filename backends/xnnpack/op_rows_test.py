"""The op rows agree with xnnpack_graph.fbs and with each other; the partitioner and preprocess
read them."""

import os
import subprocess

import pytest
import torch
from edgeshare.backends.xnnpack import op_rows, partitioner
from edgeshare.backends.xnnpack import xnnpack_graph_generated as xfb
from edgeshare.backends.xnnpack.op_rows import REGISTRY, OpRow, Registry, RegistryError

aten = torch.ops.aten


def test_every_kind_a_row_names_is_in_the_fbs_enum() -> None:
    names = op_rows.op_kind_names()
    for row in REGISTRY.rows:
        assert row.kinds, row.name
        for kind in row.kinds:
            assert kind in names, f"row '{row.name}' names {kind}, not an OpKind of xnnpack_graph.fbs"
            assert getattr(xfb.OpKind, kind) == names[kind]
    assert op_rows.emitted_op_kinds() <= set(names)


def test_every_fbs_op_kind_is_emitted_by_some_row() -> None:
    missing = set(op_rows.op_kind_names()) - op_rows.emitted_op_kinds()
    assert not missing, f"OpKinds of xnnpack_graph.fbs no Python row emits: {sorted(missing)}"


def test_python_rows_fbs_enum_and_cpp_rows_name_the_same_op_kinds() -> None:
    # The C++ delegate's rows (backends/xnnpack/runtime/op_rows.inc), as its op_kinds binary lists
    # them: together with the two tests above, the three lists of op kinds are one.
    listed = subprocess.run([os.environ["XNNPACK_OP_KINDS"]], check=True, capture_output=True, text=True).stdout.split()
    assert len(listed) == len(set(listed)), f"a C++ row appears twice: {listed}"
    fbs = set(op_rows.op_kind_names())
    assert set(listed) == fbs, (
        f"C++ rows without an OpKind: {sorted(set(listed) - fbs)}; "
        f"OpKinds without a C++ row: {sorted(fbs - set(listed))}"
    )
    assert set(listed) == op_rows.emitted_op_kinds(), (
        f"C++ rows no Python row emits: {sorted(set(listed) - op_rows.emitted_op_kinds())}"
    )


def test_no_two_rows_handle_one_target_and_row_for_finds_each() -> None:
    seen = {}
    for row in REGISTRY.rows:
        for target in row.targets:
            assert target not in seen, f"{target} is in rows '{seen[target]}' and '{row.name}'"
            seen[target] = row.name
            assert op_rows.row_for(target) is row
    assert set(seen) == op_rows.supported_targets()
    assert len({row.name for row in REGISTRY.rows}) == len(REGISTRY.rows)
    assert op_rows.row_for(aten.tanh.default) is None


def _row(name: str, targets, kinds=("ADD",)) -> OpRow:
    return OpRow(name, tuple(targets), tuple(kinds), lambda ctx, node: True, lambda e, node: None, name)


def test_registry_refuses_a_target_in_two_rows() -> None:
    with pytest.raises(RegistryError, match="'a' and 'b' both handle aten.add.Tensor"):
        Registry([_row("a", [aten.add.Tensor]), _row("b", [aten.mul.Tensor, aten.add.Tensor])])


def test_registry_refuses_an_unknown_op_kind_and_a_repeated_name() -> None:
    with pytest.raises(RegistryError, match="op row 'a': op kinds \\['TANH'\\]"):
        Registry([_row("a", [aten.tanh.default], ["TANH"])])
    with pytest.raises(RegistryError, match="two rows are named 'a'"):
        Registry([_row("a", [aten.add.Tensor]), _row("a", [aten.mul.Tensor])])


def test_partitioner_docstring_lists_every_row() -> None:
    for row in REGISTRY.rows:
        assert f"- {row.summary} -> {', '.join(row.kinds)}\n" in partitioner.__doc__, row.name


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
