"""The errors the ahead-of-time pipeline raises.

Every error is a ValueError or TypeError subclass whose message names the method, node, key or file
it is about, so a user can find the offending piece of their model without a debugger.
"""

__all__ = [
    "AdapterMismatchError",
    "DataPlacementError",
    "ExportError",
    "LoweringError",
    "NamedDataError",
    "SerializationError",
    "UnsupportedModelError",
]


class ExportError(ValueError):
    """Base class of edgeshare's ahead-of-time errors (a ValueError)."""


class NamedDataError(ExportError):
    """A named-data key conflicts: different bytes, two external tags, or a bad argument."""


class DataPlacementError(ExportError):
    """A data policy placed weights inconsistently, e.g. two weights under one key."""


class UnsupportedModelError(ExportError):
    """The model uses something the runtime cannot run: dynamic shapes, a dtype, an operator."""


class LoweringError(ExportError):
    """to_backend failed: a partitioner or backend broke the contract (naming the method)."""


class SerializationError(ExportError):
    """A .pte or .ptd file is malformed (naming the file and field) or cannot be written."""


class AdapterMismatchError(ExportError):
    """A LoRA adapter's names or shapes do not fit the foundation model."""
