"""What the quantized-foundation run tests (export_lora_int8_run_test, export_lora_int4_run_test)
check the same way: the tokens of an eager reference model, and the one-line error a flipped byte
in a scales entry of foundation.ptd gives (greedy tokens of //tools:generate over several programs
come from testing/generate_binary.py)."""

import os
import shutil
import subprocess
from typing import List, Tuple

import numpy as np
import torch
from edgeshare.exir import deserialize_ptd
from edgeshare.testing.generate_binary import generate_binary_path


def reference_tokens(model: torch.nn.Module, prompt: np.ndarray, new_tokens: int) -> List[int]:
    """Greedy tokens of an eager transformers model after `prompt`, exactly new_tokens of them."""
    ids = torch.from_numpy(prompt).view(1, -1)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
        )
    return out[0, ids.shape[1] :].tolist()


def flipped_scale_byte_error(out: str, scales_suffix: str, prompt_path: str, tmp_dir: str) -> Tuple[str, str]:
    """Flips one byte of the first scales entry (by key) ending in scales_suffix in a copy of
    out/foundation.ptd and runs foundation.pte over it.

    Returns:
      (the key, the one line the tool printed on stderr).

    Raises:
      AssertionError: the entry's bytes are not unique in the file, the tool did not exit 1, or
        it printed more than one line.
    """
    with open(os.path.join(out, "foundation.ptd"), "rb") as f:
        data = bytearray(f.read())
    ptd = deserialize_ptd(bytes(data), "foundation.ptd")
    key = sorted(k for k in ptd.named_data if k.endswith(scales_suffix))[0]
    blob = ptd.named_data[key].data
    offset = bytes(data).find(blob)
    assert offset > 0 and bytes(data).find(blob, offset + 1) < 0
    data[offset + 1] ^= 0x01
    broken = os.path.join(tmp_dir, "foundation.ptd")
    with open(broken, "wb") as f:
        f.write(bytes(data))
    program = os.path.join(tmp_dir, "foundation.pte")
    shutil.copy(os.path.join(out, "foundation.pte"), program)
    args = ["--program", program, "--data", broken, "--prompt-ids", prompt_path, "--max-new-tokens", "2"]
    proc = subprocess.run([generate_binary_path(), *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return key, lines[0]
