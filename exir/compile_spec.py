"""CompileSpec: a key and opaque bytes a partitioner passes to its backend's preprocess."""

import dataclasses

__all__ = ["CompileSpec"]


@dataclasses.dataclass(frozen=True)
class CompileSpec:
    """One backend option, serialized into the program beside the delegate.

    Attributes:
      key: the option's name.
      value: its bytes.
    """

    key: str
    value: bytes
