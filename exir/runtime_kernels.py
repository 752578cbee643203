"""The operators the C++ runtime can run outside a delegate: the names its portable kernels register.

The list is made at build time by //runtime/kernels/portable:kernel_names (a data dependency of
//exir), so the exporter refuses a kernel call the runtime cannot run, naming the node, instead of
writing a program that fails at load on the device.

    if not supports("aten::erf"): ...
"""

import functools
import os
from typing import FrozenSet, Optional

__all__ = ["runtime_kernels", "supports"]

_LIST = os.path.join("runtime", "kernels", "portable", "kernel_names.txt")


@functools.lru_cache(maxsize=1)
def runtime_kernels() -> Optional[FrozenSet[str]]:
    """The registered operator names ("aten::add.Tensor"), or None outside a Bazel build (no list)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, _LIST)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return frozenset(line.strip() for line in f if line.strip())


def supports(name: str) -> bool:
    """Whether the runtime has a kernel for `name` (True when the list is unknown)."""
    kernels = runtime_kernels()
    return kernels is None or name in kernels
