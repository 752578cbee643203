"""The XNNPACK backend's ahead-of-time side: partitioner and preprocess.

Without torch (the runtime-only wheel) only the generated schema module beside them
(xnnpack_graph_generated, which edgeshare-inspect reads graphs with) is importable.
"""

try:
    import torch  # noqa: F401 (whether the ahead-of-time side can be imported at all)
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
else:
    from edgeshare.backends.xnnpack.partitioner import XnnpackPartitioner
    from edgeshare.backends.xnnpack.preprocess import XnnpackBackend

__all__ = ["XnnpackBackend", "XnnpackPartitioner"]
