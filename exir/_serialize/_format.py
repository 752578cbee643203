"""The layout both file kinds share: a 48-byte header, a FlatBuffer, then aligned segments.

[0, 48)                 magic (4 bytes), u32 version (1), u32 header size (48), u32 reserved (0),
                        u64 flatbuffer offset (48), u64 flatbuffer size,
                        u64 segment base offset, u64 segment data size   (all little-endian)
[48, 48 + fb size)      the FlatBuffer (root Program "ESP1" or FlatTensor "ESD1")
[segment base, + size)  segment i at segment base + segments[i].offset; offsets are multiples
                        of the file's alignment, and segment base = align_up(48 + fb size, it)
"""

import dataclasses
import hashlib
import io
import struct
from typing import Any, BinaryIO, List, Optional, Sequence, Tuple, Union

from edgeshare.exir._resident import read_once
from edgeshare.exir.errors import SerializationError
from edgeshare.exir._layout import TensorLayout

FORMAT_VERSION = 1
HEADER_SIZE = 48
_HEADER = struct.Struct("<4sIII QQQQ".replace(" ", ""))
assert _HEADER.size == HEADER_SIZE


def align_up(value: int, alignment: int) -> int:
    """Rounds value up to a multiple of alignment (a positive int)."""
    return (value + alignment - 1) // alignment * alignment


@dataclasses.dataclass(frozen=True)
class Segment:
    """Bytes to place in a segment (any bytes-like object), and the alignment they need (a power of two)."""

    data: Union[bytes, memoryview]
    alignment: int = 1


@dataclasses.dataclass(frozen=True)
class FileHeader:
    """The 48-byte header of a .pte or .ptd file."""

    magic: bytes
    version: int
    header_size: int
    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int


@dataclasses.dataclass(frozen=True)
class NamedBlob:
    """A named-data entry as read back from a file."""

    key: str
    data: bytes
    digest: bytes
    tensor_layout: Optional[TensorLayout]


def effective_alignment(base: int, segments: Sequence[Segment]) -> int:
    """Returns the alignment a file must use so that every segment's own alignment is honoured."""
    alignment = base
    for seg in segments:
        if seg.alignment <= 0 or seg.alignment & (seg.alignment - 1):
            raise SerializationError(f"segment alignment {seg.alignment} is not a power of two")
        alignment = max(alignment, seg.alignment)
    return alignment


def layout_segments(segments: Sequence[Segment], alignment: int) -> List[Tuple[int, int]]:
    """Returns (offset, size) of each segment relative to the segment base."""
    placed = []
    cursor = 0
    for seg in segments:
        offset = align_up(cursor, alignment)
        placed.append((offset, len(seg.data)))
        cursor = offset + len(seg.data)
    return placed


def write_image(
    out: BinaryIO,
    magic: bytes,
    flatbuffer: bytes,
    segments: Sequence[Segment],
    placed: Sequence[Tuple[int, int]],
    alignment: int,
) -> int:
    """Streams header + flatbuffer + segments to out, one segment at a time; returns the bytes written.

    A segment's data may be any bytes-like object (a weight's bytes in place): nothing is gathered
    into one image first.
    """
    fb_end = HEADER_SIZE + len(flatbuffer)
    base = align_up(fb_end, alignment)
    data_size = (placed[-1][0] + placed[-1][1]) if placed else 0
    out.write(_HEADER.pack(magic, FORMAT_VERSION, HEADER_SIZE, 0, HEADER_SIZE, len(flatbuffer), base, data_size))
    out.write(flatbuffer)
    cursor = fb_end
    for seg, (offset, size) in zip(segments, placed):
        out.write(bytes(base + offset - cursor))
        for piece in read_once(seg.data):  # a weight mapped from a file: read for this write only
            out.write(piece)
        cursor = base + offset + size
    out.write(bytes(base + data_size - cursor))  # a file without segments still ends at the base
    return base + data_size


def assemble(
    magic: bytes,
    flatbuffer: bytes,
    segments: Sequence[Segment],
    placed: Sequence[Tuple[int, int]],
    alignment: int,
) -> bytes:
    """Writes header + flatbuffer + segments into one file image."""
    out = io.BytesIO()
    write_image(out, magic, flatbuffer, segments, placed, alignment)
    return out.getvalue()


def read_header(data: bytes, magic: bytes, file_name: str, file_size: Optional[int] = None) -> FileHeader:
    """Parses and checks the header and the flatbuffer range.

    Args:
      data: the file's bytes, or (with file_size) its first HEADER_SIZE bytes at least.
      magic: the file kind's magic.
      file_name: names the file in errors.
      file_size: the file's size, when data is only its beginning.

    Raises:
      SerializationError: naming the file and the field that is wrong.
    """
    size = len(data) if file_size is None else file_size
    if len(data) < HEADER_SIZE:
        raise SerializationError(f"{file_name}: file is {size} bytes, shorter than the header")
    fields = _HEADER.unpack_from(data, 0)
    header = FileHeader(fields[0], fields[1], fields[2], fields[4], fields[5], fields[6], fields[7])
    if header.magic != magic:
        raise SerializationError(f"{file_name}: magic is {header.magic!r}, expected {magic!r}")
    if header.version != FORMAT_VERSION:
        raise SerializationError(f"{file_name}: format version {header.version} is not supported")
    if header.header_size != HEADER_SIZE:
        raise SerializationError(f"{file_name}: header size {header.header_size} != {HEADER_SIZE}")
    if fields[3] != 0:
        raise SerializationError(f"{file_name}: reserved header field is {fields[3]}, expected 0")
    if header.flatbuffer_offset != HEADER_SIZE:
        raise SerializationError(f"{file_name}: flatbuffer offset {header.flatbuffer_offset} != {HEADER_SIZE}")
    fb_end = header.flatbuffer_offset + header.flatbuffer_size
    if fb_end > size:
        raise SerializationError(f"{file_name}: flatbuffer size {header.flatbuffer_size} runs past the file")
    if header.segment_base_offset < fb_end:
        raise SerializationError(
            f"{file_name}: segment base offset {header.segment_base_offset} overlaps the flatbuffer"
        )
    if header.segment_base_offset + header.segment_data_size != size:
        raise SerializationError(
            f"{file_name}: segment base offset + segment data size "
            f"({header.segment_base_offset} + {header.segment_data_size}) != file size {size}"
        )
    return header


def read_segments(data: bytes, header: FileHeader, segments: Any, alignment: int, file_name: str) -> List[bytes]:
    """Returns the bytes of each segment, checking alignment and bounds."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise SerializationError(f"{file_name}: alignment {alignment} is not a power of two")
    if header.segment_base_offset % alignment:
        raise SerializationError(
            f"{file_name}: segment base offset {header.segment_base_offset} is not a multiple of {alignment}"
        )
    out = []
    for i, seg in enumerate(segments or []):
        if seg.offset % alignment:
            raise SerializationError(f"{file_name}: segments[{i}].offset {seg.offset} is not aligned to {alignment}")
        if seg.offset + seg.size > header.segment_data_size:
            raise SerializationError(f"{file_name}: segments[{i}] runs past the segment data")
        start = header.segment_base_offset + seg.offset
        out.append(bytes(data[start : start + seg.size]))
    return out


def named_data_to_fb(module: Any, key: str, segment_index: int, digest: bytes, layout: Optional[TensorLayout]) -> Any:
    """Makes a NamedDataT of the given generated module (program or flat_tensor)."""
    entry = module.NamedDataT()
    entry.key = key
    entry.segmentIndex = segment_index
    entry.digest = list(digest)
    if layout is not None:
        fb_layout = module.TensorLayoutT()
        fb_layout.scalarType = layout.scalar_type
        fb_layout.sizes = list(layout.sizes)
        fb_layout.dimOrder = list(layout.dim_order)
        entry.tensorLayout = fb_layout
    return entry


def layout_from_fb(fl: Any) -> TensorLayout:
    """A TensorLayout from its FlatBuffers object."""
    return TensorLayout(
        int(fl.scalarType),
        tuple(int(s) for s in (fl.sizes if fl.sizes is not None else [])),
        tuple(int(d) for d in (fl.dimOrder if fl.dimOrder is not None else [])),
    )


def read_named_data(named_data: Any, segments: List[bytes], file_name: str) -> List[NamedBlob]:
    """Returns the named-data entries, checking order, segment indices and digests."""
    out: List[NamedBlob] = []
    previous: Optional[bytes] = None
    for entry in named_data or []:
        key = entry.key.decode("utf-8") if isinstance(entry.key, bytes) else entry.key
        encoded = key.encode("utf-8")
        if previous is not None and encoded <= previous:
            raise SerializationError(f"{file_name}: named data key '{key}' is out of order or duplicated")
        previous = encoded
        if entry.segmentIndex >= len(segments):
            raise SerializationError(
                f"{file_name}: named data '{key}' names segment {entry.segmentIndex} of {len(segments)}"
            )
        blob = segments[entry.segmentIndex]
        digest = bytes(bytearray(list(entry.digest))) if entry.digest is not None else b""
        if hashlib.sha256(blob).digest() != digest:
            raise SerializationError(f"{file_name}: named data '{key}' digest does not match its bytes")
        layout = None if entry.tensorLayout is None else layout_from_fb(entry.tensorLayout)
        out.append(NamedBlob(key, blob, digest, layout))
    return out
