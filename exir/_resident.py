"""Weights mapped from files, kept out of the exporter's resident memory while it does not read them.

transformers maps a safetensors checkpoint copy-on-write and the model's parameters view that
mapping: a weight's pages join the process's resident set when something reads them and stay
there. The exporter reads a weight's bytes for its digest (once per export) and to write it into a
data file; after each, release() hands the pages back. The kernel's page cache still holds them,
so the next read is a minor fault, not a disk read, while memory allows.

    digest = hashlib.sha256(tensor_view(weight)).digest()
    release(weight)          # the bytes stay readable, the process no longer holds them

    for piece in read_once(tensor_view(weight)):    # a large weight, a slice resident at a time
        out.write(piece)

A page is released only while it still holds the mapped file's bytes (or is shared memory): a page
written since it was mapped is the process's own copy and is kept, so release() never changes a
value. Elsewhere than Linux, or without /proc/self/pagemap, it releases nothing.
"""

import ctypes
import os
import sys
from typing import TYPE_CHECKING, Any, Iterator, Optional, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["read_once", "release", "resident_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_MADV_DONTNEED = 4
# read_once's slice: large enough that its two system calls cost nothing beside reading it.
_SLICE = 16 << 20
# /proc/self/pagemap: one 64-bit entry per virtual page (Documentation/admin-guide/mm/pagemap.rst).
_PRESENT = 1 << 63
_FILE_OR_SHARED = 1 << 61

Buffer = Union["torch.Tensor", memoryview, bytes, bytearray]


def _span(data: Buffer) -> Optional[Tuple[int, int]]:
    """(address, length) of the bytes data occupies, or None when it has none or is not on the CPU."""
    # Reading files needs no torch (edgeshare-inspect): a tensor exists only once torch is imported.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(data, torch.Tensor):
        if data.device.type != "cpu" or data.numel() == 0 or data.is_sparse:
            return None
        if any(s < 0 for s in data.stride()):
            return None
        extent = sum((size - 1) * stride for size, stride in zip(data.shape, data.stride())) + 1
        return data.data_ptr(), extent * data.element_size()
    view = memoryview(data)
    if view.nbytes == 0 or not view.c_contiguous:
        return None
    return int(np.frombuffer(view.cast("B"), dtype=np.uint8).ctypes.data), view.nbytes


class _Pagemap:
    """This process's page table flags, read from /proc/self/pagemap (None where there is none)."""

    _fd: Optional[int] = None
    # The process the open file describes: a child made by fork() inherits the descriptor, which
    # still reads its parent's page table, so the child opens its own.
    _pid: Optional[int] = None

    @classmethod
    def entries(cls, first_page: int, pages: int) -> Optional[np.ndarray]:
        if cls._pid != os.getpid():
            if cls._fd is not None:
                os.close(cls._fd)
            cls._fd, cls._pid = None, os.getpid()
            if sys.platform.startswith("linux"):
                try:
                    cls._fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    cls._fd = None
        if cls._fd is None:
            return None
        try:
            raw = os.pread(cls._fd, pages * 8, first_page * 8)
        except OSError:
            return None
        if len(raw) != pages * 8:
            return None
        return np.frombuffer(raw, dtype=np.uint64)


def _libc_madvise() -> Any:
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _libc_madvise() if sys.platform.startswith("linux") else None


def _pages(data: Buffer) -> Optional[Tuple[int, np.ndarray]]:
    """data's first page number and the pagemap entries of its pages, or None."""
    span = _span(data)
    if span is None:
        return None
    address, length = span
    first = address // _PAGE
    last = (address + length - 1) // _PAGE
    entries = _Pagemap.entries(first, last - first + 1)
    if entries is None:
        return None
    return first, entries


def resident_bytes(data: Buffer) -> int:
    """Bytes of the pages under data that this process holds resident (whole pages).

    Args:
      data: a CPU tensor or a bytes-like object.

    Returns:
      The count, or 0 when it cannot be known (no /proc/self/pagemap).
    """
    pages = _pages(data)
    if pages is None:
        return 0
    return int(np.count_nonzero(pages[1] & np.uint64(_PRESENT))) * _PAGE


def release(data: Buffer) -> int:
    """Drops data's pages from this process's resident set where that loses nothing: pages that
    hold a mapped file's bytes as the file has them (or shared memory). Its bytes stay readable
    and unchanged; reading them again maps the page cache's copy back in.

    Anonymous memory (an ordinary tensor, a page written since it was mapped) is left as it is.
    Nothing may write data while this runs.

    Args:
      data: a CPU tensor or a bytes-like object (e.g. a memoryview of a weight).

    Returns:
      The bytes released (whole pages; a page data shares with a neighbour counts whole).
    """
    if _MADVISE is None:
        return 0
    pages = _pages(data)
    if pages is None:
        return 0
    first, entries = pages
    flags = np.uint64(_PRESENT | _FILE_OR_SHARED)
    releasable = (entries & flags) == flags
    if not releasable.any():
        return 0
    # Runs of releasable pages: one madvise each.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], releasable.view(np.int8), [0]))))
    released = 0
    for start, stop in zip(edges[::2], edges[1::2]):
        address = (first + int(start)) * _PAGE
        length = (int(stop) - int(start)) * _PAGE
        if _MADVISE(ctypes.c_void_p(address), ctypes.c_size_t(length), _MADV_DONTNEED) == 0:
            released += length
    return released


def read_once(data: Buffer, slice_bytes: int = _SLICE) -> Iterator[memoryview]:
    """Yields data's bytes in consecutive slices and releases each slice (release()) when the
    consumer asks for the next one, so that reading a large mapped weight through (hashing it,
    writing it out) holds at most one slice of it resident.

    Args:
      data: a bytes-like object (a tensor's bytes: tensor_layout.tensor_view).
      slice_bytes: the slice length.

    Yields:
      Read-only memoryviews of data, in order.
    """
    view = memoryview(data).cast("B")
    for start in range(0, view.nbytes, slice_bytes):
        piece = view[start : start + slice_bytes]
        yield piece
        release(piece)
