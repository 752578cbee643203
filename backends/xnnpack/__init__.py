"""The XNNPACK backend's ahead-of-time side: partitioner and preprocess."""

from edgeshare.backends.xnnpack.partitioner import XnnpackPartitioner
from edgeshare.backends.xnnpack.preprocess import XnnpackBackend

__all__ = ["XnnpackBackend", "XnnpackPartitioner"]
