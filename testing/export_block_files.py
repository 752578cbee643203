"""Writes the transformer-block fixture: a LoRA program whose layer norms stay outside the XNNPACK
delegate (portable kernels reading external constants from foundation.ptd), its foundation.ptd, and
other_foundation.ptd: the same keys, dtypes and shapes from another seed (honest digests), which
the program must refuse."""

import argparse
import os
import shutil
import sys
import tempfile
import warnings
from typing import Optional, Sequence

import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir.lora import export_lora
from edgeshare.models import TransformerBlock, lora_state_dict

DIM, BATCH, TOKENS = 32, 2, 5


def _export(seed: int, out_dir: str) -> str:
    """Exports block.pte (adapter 'block' over TransformerBlock(seed)) into out_dir; returns the .ptd."""
    block = TransformerBlock(dim=DIM, seed=seed).eval()
    adapters = {"block": lora_state_dict(block, ("q", "v"), 4, seed + 1, scale=0.2)}
    x = torch.randn(BATCH, TOKENS, DIM, generator=torch.Generator().manual_seed(5))
    result = export_lora(block, adapters, (x,), out_dir, XnnpackPartitioner(), alpha=8.0)
    return result.foundation_path


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Writes block.pte, foundation.ptd and other_foundation.ptd into --out; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    foundation = _export(0, args.out)
    if os.path.basename(foundation) != "foundation.ptd":
        raise ValueError(f"export wrote {foundation}, expected foundation.ptd")
    with tempfile.TemporaryDirectory() as other:
        shutil.copyfile(_export(1, other), os.path.join(args.out, "other_foundation.ptd"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
