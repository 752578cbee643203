"""TensorLayout: how a tensor's bytes are laid out, as the .pte/.ptd schemas record it.

Its own torch-free module so that reading files (exir._serialize, edgeshare-inspect) needs no torch;
tensor_layout.py re-exports it with the torch side (dtypes, bytes, digests).
"""

import dataclasses
from typing import TYPE_CHECKING, Tuple

if TYPE_CHECKING:
    import torch

__all__ = ["TensorLayout"]


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
        from edgeshare.exir.tensor_layout import scalar_type_of  # noqa: PLC0415 (torch's dtypes)

        sizes = tuple(int(s) for s in tensor.shape)
        return TensorLayout(scalar_type_of(tensor.dtype, what), sizes, tuple(range(len(sizes))))
