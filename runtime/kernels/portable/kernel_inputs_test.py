"""Every portable kernel registers as many inputs as its operator's schema has arguments.

Method::load trusts these counts, not the program, to know which args a call writes (everything
past the inputs must be a planned tensor), so a count that is one short would let a hostile file
have an input written, and one too many would refuse real programs. The counts are read from the
registrations in the kernel sources and checked against torch.ops.aten.<op>.<overload>._schema.
The size kernels named sym::<op> are not torch operators (they stand for the Python operators
torch.export records on SymInts: operator.add, operator.floordiv, ...), so their counts are checked
against SYM_INPUTS, the operands of those Python operators.
"""

import os
import re
from typing import List, Tuple

import torch

SOURCES = [
    "attention.cc",
    "creation.cc",
    "elementwise.cc",
    "indexing.cc",
    "linear_algebra.cc",
    "logical.cc",
    "normalization.cc",
    "reduction.cc",
    "shape.cc",
    "sizes.cc",
    "state.cc",
]

# The Python operators on SymInts the exporter writes as sym::<op>, and their operand counts.
SYM_INPUTS = {
    "sym::add": 2,
    "sym::sub": 2,
    "sym::mul": 2,
    "sym::floordiv": 2,
    "sym::mod": 2,
    "sym::max": 2,
    "sym::min": 2,
    "sym::neg": 1,
}

# {"aten::add.Tensor", add, 3} in a table, or register_kernel("aten::mm", mm, 2).
_REGISTRATION = re.compile(r'"((?:aten|sym|edgeshare)::[\w.]+)",\s*\w+,\s*(\d+)\s*[)}]')


def _registrations() -> List[Tuple[str, int, str]]:
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for source in SOURCES:
        with open(os.path.join(here, source)) as f:
            text = f.read()
        names = re.findall(r'(?:\{|register_kernel\()\s*"((?:aten|sym|edgeshare)::[\w.]+)"', text)
        matched = [(name, int(count), source) for name, count in _REGISTRATION.findall(text)]
        # Every operator name in the file is a registration this test can read (none slips by).
        assert sorted(names) == sorted(name for name, _, _ in matched), (source, names)
        found += matched
    return found


def _schema_arguments(name: str) -> int:
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    ops = getattr(torch.ops, namespace)
    return len(getattr(getattr(ops, op), overload or "default")._schema.arguments)


def test_every_kernel_registers_its_schema_argument_count() -> None:
    import edgeshare.exir.attention  # noqa: F401, PLC0415 (defines torch.ops.edgeshare.*)
    import edgeshare.exir.batched_ops  # noqa: F401, PLC0415
    import edgeshare.exir.embedding_qc8w  # noqa: F401, PLC0415

    registrations = [r for r in _registrations() if not r[0].startswith("sym::")]
    assert len(registrations) > 80
    wrong = [
        f"{name} ({source}) registers {count} inputs, its schema has {_schema_arguments(name)}"
        for name, count, source in registrations
        if count != _schema_arguments(name)
    ]
    assert not wrong, "\n".join(wrong)


def test_size_kernels_register_their_python_operator_operand_count() -> None:
    # sym::<op> has no torch schema to read (skipped above); SYM_INPUTS holds the operands of the
    # Python operator it stands for, and every sym:: kernel must be in it.
    registered = {name: count for name, count, _ in _registrations() if name.startswith("sym::")}
    assert registered == SYM_INPUTS


def test_each_operator_is_registered_once() -> None:
    names = [name for name, _, _ in _registrations()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


if __name__ == "__main__":
    import pytest

    raise SystemExit(pytest.main([__file__, "-q"]))
