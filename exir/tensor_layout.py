"""Tensor layouts (element type, sizes, dim order) as the .pte/.ptd schemas number them."""

import dataclasses
from typing import Dict, Tuple

import torch
from edgeshare.exir.errors import UnsupportedModelError

__all__ = ["TensorLayout", "scalar_type_of", "tensor_bytes"]

# torch's ScalarType numbering, as schema/scalar_type.fbs spells it.
_SCALAR_TYPES: Dict[torch.dtype, int] = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.float16: 5,
    torch.float32: 6,
    torch.float64: 7,
    torch.bool: 11,
    torch.bfloat16: 15,
}


def scalar_type_of(dtype: torch.dtype, what: str = "tensor") -> int:
    """Returns the schema ScalarType number of a torch dtype.

    Args:
      dtype: the torch dtype.
      what: names the tensor in the error message.

    Returns:
      The ScalarType value (torch's numbering).

    Raises:
      UnsupportedModelError: the files cannot hold this dtype.
    """
    try:
        return _SCALAR_TYPES[dtype]
    except KeyError:
        raise UnsupportedModelError(
            f"{what}: dtype {dtype} is not supported (supported: {', '.join(str(d) for d in _SCALAR_TYPES)})"
        ) from None


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
    def of(tensor: torch.Tensor, what: str = "tensor") -> "TensorLayout":
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


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Returns the contiguous row-major bytes of a tensor (little-endian, as on the target).

    Args:
      tensor: a CPU tensor.

    Returns:
      Its bytes.
    """
    t = tensor.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()
