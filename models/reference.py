"""The benchmark's reference model: a stack of transformer-style blocks, Linear-heavy like an LLM's."""

import torch
from torch import nn

__all__ = ["ReferenceBlock", "ReferenceModel", "reference_foundation"]


class ReferenceBlock(nn.Module):
    """h = x + o_proj(LayerNorm(x)); out = h + down(silu(up(LayerNorm(h))))."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = x + self.o_proj(self.norm1(x))
        return h + self.down(nn.functional.silu(self.up(self.norm2(h))))


class ReferenceModel(nn.Module):
    """A stack of ReferenceBlocks over input [T, d_model]."""

    def __init__(self, blocks: int = 4, d_model: int = 1024, d_ff: int = 2048) -> None:
        super().__init__()
        self.d_model = d_model
        self.blocks = nn.ModuleList(ReferenceBlock(d_model, d_ff) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        for block in self.blocks:
            x = block(x)
        return x


def reference_foundation(blocks: int = 4, d_model: int = 1024, d_ff: int = 2048, seed: int = 0) -> ReferenceModel:
    """The reference foundation with torch's default initialisation drawn from `seed`, in eval mode.

    With the defaults: 4 blocks, d_model 1024, d_ff 2048, about 80 MiB of fp32 weights.

    Args:
      blocks: how many ReferenceBlocks.
      d_model: the model width (the input's last dimension).
      d_ff: the MLP's hidden width.
      seed: seeds torch's global generator before the layers are built.

    Returns:
      The model, in eval mode.
    """
    torch.manual_seed(seed)
    return ReferenceModel(blocks, d_model, d_ff).eval()
