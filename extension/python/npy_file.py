"""Reading a .npy file a user names (prompt ids, inputs) without trusting it.

    prompt = load_npy("prompt.npy")          # a numpy array, its bytes copied out of the file

np.load alone blocks forever on a FIFO and believes a header's shape before it reads: this refuses
anything but a regular file before opening it, and compares the header's claim with the file's size
first, so a shape that claims more bytes than the file holds is an error, not a huge allocation.
"""

from __future__ import annotations

import math
import os
import stat
from typing import Union

import numpy as np

__all__ = ["NpyFileError", "load_npy"]


class NpyFileError(ValueError):
    """The file is not a .npy array this runtime can read; the message names it."""


def load_npy(path: Union[str, "os.PathLike[str]"]) -> np.ndarray:
    """Reads the array in the .npy file at `path`.

    Args:
      path: a .npy file (NumPy's format, no pickled objects).

    Returns:
      The array, in memory (the file is closed).

    Raises:
      NpyFileError: the path is missing or not a regular file (a FIFO, a folder), or its header is
        malformed or claims more data than the file holds; the message names the file.
    """
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except OSError as e:
        raise NpyFileError(f"cannot read {name}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise NpyFileError(f"cannot read {name}: not a regular file")
    try:
        with open(name, "rb") as f:
            version = np.lib.format.read_magic(f)
            readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in readers:
                raise ValueError(f".npy version {version} is not supported (1.0 and 2.0 are)")
            shape, _, dtype = readers[version](f)
            data_bytes = os.fstat(f.fileno()).st_size - f.tell()
            # Python ints: the claimed size never overflows, whatever the header says.
            claimed = dtype.itemsize * math.prod(shape)
            if dtype.hasobject or claimed > data_bytes:
                raise ValueError(f"its header claims {shape} {dtype}, {claimed} bytes; the file holds {data_bytes}")
            f.seek(0)
            return np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NpyFileError(f"{name} is not a readable .npy array: {reason:.200}") from None
