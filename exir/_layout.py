"""TensorLayout: how a tensor's bytes are laid out, as the .pte/.ptd schemas record it.

Its own torch-free module so that reading files (exir._serialize, edgeshare-inspect) needs no torch;
tensor_layout.py re-exports it with the torch side (dtypes, bytes, digests).
"""

import dataclasses
from typing import TYPE_CHECKING, Dict, Tuple

from edgeshare.exir.errors import UnsupportedModelError

if TYPE_CHECKING:
    import torch

__all__ = ["TensorLayout", "scalar_type_of"]


@dataclasses.dataclass(frozen=True)
class TensorLayout:
    """How a tensor's bytes are laid out.

    Attributes:
      scalar_type: ScalarType number (torch's numbering).
      sizes: the sizes, outermost first.
      dim_order: a permutation of 0..rank-1; 0..rank-1 is contiguous row-major.
    """

    scalar_type: int
    sizes: Tuple[int, ...]
    dim_order: Tuple[int, ...]

    @staticmethod
    def of(tensor: "torch.Tensor", what: str = "tensor") -> "TensorLayout":
        """Returns the contiguous layout of a tensor.

        Args:
          tensor: the tensor.
          what: names the tensor in error messages.

        Returns:
          Its layout, with dim_order 0..rank-1.

        Raises:
          UnsupportedModelError: the dtype is not supported.
        """
        sizes = tuple(int(s) for s in tensor.shape)
        return TensorLayout(scalar_type_of(tensor.dtype, what), sizes, tuple(range(len(sizes))))


# The files' ScalarType numbers (torch's numbering), by torch dtype name: no torch import needed.
_SCALAR_TYPES: Dict[str, int] = {
    "uint8": 0,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "float16": 5,
    "float32": 6,
    "float64": 7,
    "bool": 11,
    "bfloat16": 15,
}


def scalar_type_of(dtype: "torch.dtype", what: str = "tensor") -> int:
    """Returns the schema ScalarType number of a torch dtype.

    Args:
      dtype: the torch dtype.
      what: names the tensor in the error message.

    Returns:
      The ScalarType value (torch's numbering).

    Raises:
      UnsupportedModelError: the files cannot hold this dtype.
    """
    number = _SCALAR_TYPES.get(str(dtype).replace("torch.", "", 1))
    if number is None:
        supported = ", ".join(f"torch.{name}" for name in _SCALAR_TYPES)
        raise UnsupportedModelError(f"{what}: dtype {dtype} is not supported (supported: {supported})")
    return number
