"""A small LoRA-able transformer block: attention, layer norms and an MLP in a few kilobytes."""

import torch
from torch import nn

__all__ = ["TransformerBlock"]


class TransformerBlock(nn.Module):
    """A pre-norm transformer block: attention (matmul, softmax, reshape/permute), layer norms, MLP.

    Every parameter is drawn from `seed` (LayerNorm too, so no two weights share bytes).
    """

    def __init__(self, dim: int = 32, heads: int = 4, seed: int = 0) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        b, t, d = x.shape
        h = self.ln1(x)

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.reshape(b, t, self.heads, d // self.heads).permute(0, 2, 1, 3)

        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + self.o(y)
        return x + self.down(torch.relu(self.up(self.ln2(x))))
