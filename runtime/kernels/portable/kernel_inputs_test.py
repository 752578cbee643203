"""Every portable kernel registers as many inputs as its operator's schema has arguments.

Method::load trusts these counts, not the program, to know which args a call writes (everything
past the inputs must be a planned tensor), so a count that is one short would let a hostile file
have an input written, and one too many would refuse real programs. The counts are read from the
registrations in the kernel sources and checked against torch.ops.aten.<op>.<overload>._schema.
"""

import os
import re
from typing import List, Tuple

import torch

SOURCES = ["elementwise.cc", "linear_algebra.cc", "normalization.cc", "reduction.cc", "shape.cc"]

# {"aten::add.Tensor", add, 3} in a table, or register_kernel("aten::mm", mm, 2).
_REGISTRATION = re.compile(r'"(aten::[\w.]+)",\s*\w+,\s*(\d+)\s*[)}]')


def _registrations() -> List[Tuple[str, int, str]]:
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for source in SOURCES:
        with open(os.path.join(here, source)) as f:
            text = f.read()
        names = re.findall(r'(?:\{|register_kernel\()\s*"(aten::[\w.]+)"', text)
        matched = [(name, int(count), source) for name, count in _REGISTRATION.findall(text)]
        # Every operator name in the file is a registration this test can read (none slips by).
        assert sorted(names) == sorted(name for name, _, _ in matched), (source, names)
        found += matched
    return found


def _schema_arguments(name: str) -> int:
    op, _, overload = name[len("aten::") :].partition(".")
    return len(getattr(getattr(torch.ops.aten, op), overload or "default")._schema.arguments)


def test_every_kernel_registers_its_schema_argument_count() -> None:
    registrations = _registrations()
    assert len(registrations) > 50
    wrong = [
        f"{name} ({source}) registers {count} inputs, its schema has {_schema_arguments(name)}"
        for name, count, source in registrations
        if count != _schema_arguments(name)
    ]
    assert not wrong, "\n".join(wrong)


if __name__ == "__main__":
    import pytest

    raise SystemExit(pytest.main([__file__, "-q"]))
