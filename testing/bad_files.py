"""Files a user may hand the tools by mistake or by malice, for the tests of their one-line errors.

    path = bad_files.npy_with_header(tmp / "huge.npy", "<i8", "(100000, 100000)")   # 32 bytes of data
    fifo = bad_files.fifo(tmp / "pipe")                                            # blocks an open()
"""

import os
import struct
from typing import Union

__all__ = ["fifo", "npy_with_header", "renamed_method_pte"]

PathLike = Union[str, "os.PathLike[str]"]


def npy_with_header(path: PathLike, descr: Union[str, bytes], shape: str, data_bytes: int = 32) -> str:
    """Writes a .npy (version 1.0) whose header claims `descr` and `shape`, followed by
    `data_bytes` zero bytes whatever the shape needs.

    Args:
      path: where to write it.
      descr: the header's dtype string, e.g. "<i8" (bytes to put raw bytes in the header).
      shape: the header's shape as NumPy spells it, e.g. "(1, 4)".
      data_bytes: how many bytes of data follow the header.

    Returns:
      The path, as a str.
    """
    raw = descr if isinstance(descr, bytes) else descr.encode("latin-1")
    header = b"{'descr': '" + raw + b"', 'fortran_order': False, 'shape': " + shape.encode() + b", }"
    header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(data_bytes))
    return os.fspath(path)


def fifo(path: PathLike) -> str:
    """Makes a named pipe nobody writes to: opening it for reading blocks.

    Returns:
      The path, as a str.
    """
    os.mkfifo(path)
    return os.fspath(path)


def renamed_method_pte(src: PathLike, dst: PathLike, method: str, raw_name: bytes) -> str:
    """Copies the program at `src` to `dst` with every occurrence of the method name replaced by
    `raw_name` (bytes of the same length, e.g. with a control byte and a byte that is not UTF-8):
    a file whose strings a message will quote.

    Returns:
      The path of the copy, as a str.

    Raises:
      ValueError: raw_name is not as long as the name.
    """
    if len(raw_name) != len(method.encode()):
        raise ValueError(f"renamed_method_pte: {raw_name!r} is not {len(method)} bytes long")
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data.replace(method.encode(), raw_name))
    return os.fspath(dst)
