"""The .ptd data file: writer and round-trip reader (layout in _format.py)."""

import dataclasses
import hashlib
import os
from typing import Any, BinaryIO, Dict, List, Mapping, Optional, Tuple, Union

import flatbuffers
from edgeshare.exir._serialize import _format
from edgeshare.exir._serialize._format import FileHeader, NamedBlob, Segment
from edgeshare.exir.errors import SerializationError
from edgeshare.exir._layout import TensorLayout
from edgeshare.schema import flat_tensor_generated as fb

PTD_MAGIC = b"ESTD"
PTD_FILE_IDENTIFIER = b"ESD1"
DEFAULT_TENSOR_ALIGNMENT = 4096


@dataclasses.dataclass
class PtdFile:
    """A .ptd read back.

    Attributes:
      header: the file header.
      flat_tensor: the FlatTensor (FlatBuffers object API).
      segments: the bytes of each segment.
      named_data: entries by key (in file order).
    """

    header: FileHeader
    flat_tensor: "fb.FlatTensorT"
    segments: List[bytes]
    named_data: Dict[str, NamedBlob]


# key -> (bytes, alignment, layout or None for opaque data[, SHA-256 of the bytes when known]).
_Entry = Union[Tuple[Any, int, Optional[TensorLayout]], Tuple[Any, int, Optional[TensorLayout], bytes]]
PtdEntries = Mapping[str, _Entry]


def _entry_digest(entry: _Entry) -> bytes:
    return entry[3] if len(entry) > 3 else hashlib.sha256(entry[0]).digest()


def foundation_identity(entries: PtdEntries) -> bytes:
    """A data file's identity as a foundation: SHA-256 over its entries' 32-byte digests in key
    order (the runtime's DataFile::identity()). Programs and adapter files record the identity of
    the foundation they were exported for.

    Args:
      entries: the foundation file's entries, as serialize_ptd takes them.

    Returns:
      32 bytes.
    """
    keys = sorted(entries, key=lambda k: k.encode("utf-8"))
    return hashlib.sha256(b"".join(_entry_digest(entries[k]) for k in keys)).digest()


def _plan(
    entries: PtdEntries, tensor_alignment: int, foundation_digest: Optional[bytes] = None
) -> Tuple[bytes, List[Segment], List[Tuple[int, int]], int]:
    """The FlatBuffer, segments and their placement of a .ptd (see serialize_ptd)."""
    if foundation_digest is not None and len(foundation_digest) != 32:
        raise SerializationError(f"foundation_digest has {len(foundation_digest)} bytes, not 32")
    keys = sorted(entries, key=lambda k: k.encode("utf-8"))
    segments: List[Segment] = []
    by_content: Dict[bytes, int] = {}
    named = []
    for key in keys:
        entry = entries[key]
        data, alignment, layout = entry[:3]
        digest = _entry_digest(entry)
        index = by_content.get(digest)
        if index is None:
            index = len(segments)
            by_content[digest] = index
            segments.append(Segment(data if isinstance(data, (bytes, memoryview)) else bytes(data), alignment))
        named.append(_format.named_data_to_fb(fb, key, index, digest, layout))
    alignment = _format.effective_alignment(tensor_alignment, segments)
    placed = _format.layout_segments(segments, alignment)
    flat = fb.FlatTensorT()
    flat.version = _format.FORMAT_VERSION
    flat.tensorAlignment = alignment
    flat.segments = [fb.DataSegmentT(offset, size) for offset, size in placed]
    flat.namedData = named
    if foundation_digest is not None:
        flat.foundationDigest = list(foundation_digest)
    builder = flatbuffers.Builder(4096)
    builder.Finish(flat.Pack(builder), file_identifier=PTD_FILE_IDENTIFIER)
    return bytes(builder.Output()), segments, placed, alignment


def serialize_ptd(
    entries: PtdEntries, tensor_alignment: int = DEFAULT_TENSOR_ALIGNMENT, foundation_digest: Optional[bytes] = None
) -> bytes:
    """Writes a .ptd image: one segment per distinct blob, entries sorted by key.

    The output depends only on the entries (not on insertion order), so the same foundation always
    yields the same bytes.

    Args:
      entries: key -> (bytes, alignment, layout or None for opaque data), optionally with the
        bytes' SHA-256 as a fourth item (else computed here).
      tensor_alignment: the minimum alignment of every segment (raised to the largest entry
        alignment).
      foundation_digest: for an adapter's file, foundation_identity() of the foundation it was
        exported for (None: not recorded, as in a foundation's own file).

    Returns:
      The file bytes.

    Raises:
      SerializationError: a bad alignment.
    """
    flat, segments, placed, alignment = _plan(entries, tensor_alignment, foundation_digest)
    return _format.assemble(PTD_MAGIC, flat, segments, placed, alignment)


def write_ptd(
    out: BinaryIO,
    entries: PtdEntries,
    tensor_alignment: int = DEFAULT_TENSOR_ALIGNMENT,
    foundation_digest: Optional[bytes] = None,
) -> int:
    """Streams the .ptd serialize_ptd would return to out, one entry's bytes at a time.

    Args:
      out: a binary file open for writing.
      entries: as serialize_ptd's (bytes-like data, e.g. a weight's bytes in place).
      tensor_alignment: as serialize_ptd's.
      foundation_digest: as serialize_ptd's.

    Returns:
      The number of bytes written.

    Raises:
      SerializationError: a bad alignment.
      OSError: the file cannot be written.
    """
    flat, segments, placed, alignment = _plan(entries, tensor_alignment, foundation_digest)
    return _format.write_image(out, PTD_MAGIC, flat, segments, placed, alignment)


@dataclasses.dataclass(frozen=True)
class PtdIndexEntry:
    """What a .ptd's FlatBuffer says of one entry, without its bytes."""

    size: int
    tensor_layout: Optional[TensorLayout]


def read_ptd_index(path: str) -> Dict[str, PtdIndexEntry]:
    """Reads a .ptd's header and FlatBuffer only: its entries' sizes and layouts by key, in file order.

    The segments are neither read nor verified (deserialize_ptd does both): a summary of a file
    as large as a model costs a few kilobytes of reading.

    Args:
      path: the file.

    Returns:
      key -> PtdIndexEntry.

    Raises:
      SerializationError: a bad header or FlatBuffer, or an entry naming a missing segment.
      OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(_format.HEADER_SIZE)
        header = _format.read_header(head, PTD_MAGIC, path, file_size=size)
        fb_bytes = f.read(header.flatbuffer_size)
    if not fb.FlatTensor.FlatTensorBufferHasIdentifier(fb_bytes, 0):
        raise SerializationError(f"{path}: flatbuffer identifier is not {PTD_FILE_IDENTIFIER!r}")
    flat = fb.FlatTensorT.InitFromObj(fb.FlatTensor.GetRootAs(fb_bytes, 0))
    segments = flat.segments or []
    index: Dict[str, PtdIndexEntry] = {}
    for entry in flat.namedData or []:
        key = entry.key.decode("utf-8") if isinstance(entry.key, bytes) else entry.key
        if entry.segmentIndex >= len(segments):
            raise SerializationError(f"{path}: named data '{key}' names segment {entry.segmentIndex} of {len(segments)}")
        layout = None if entry.tensorLayout is None else _format.layout_from_fb(entry.tensorLayout)
        index[key] = PtdIndexEntry(int(segments[entry.segmentIndex].size), layout)
    return index


def deserialize_ptd(data: bytes, file_name: str = "<ptd>") -> PtdFile:
    """Reads a .ptd image, checking header, identifier, segment bounds, key order and digests.

    Args:
      data: the file bytes.
      file_name: names the file in errors.

    Returns:
      The parsed file.

    Raises:
      SerializationError: naming the file and the field that is wrong.
    """
    header = _format.read_header(data, PTD_MAGIC, file_name)
    start = header.flatbuffer_offset
    fb_bytes = bytes(data[start : start + header.flatbuffer_size])
    if not fb.FlatTensor.FlatTensorBufferHasIdentifier(fb_bytes, 0):
        raise SerializationError(f"{file_name}: flatbuffer identifier is not {PTD_FILE_IDENTIFIER!r}")
    flat = fb.FlatTensorT.InitFromObj(fb.FlatTensor.GetRootAs(fb_bytes, 0))
    if flat.version != _format.FORMAT_VERSION:
        raise SerializationError(f"{file_name}: FlatTensor.version {flat.version} is not supported")
    segments = _format.read_segments(data, header, flat.segments, flat.tensorAlignment, file_name)
    blobs = _format.read_named_data(flat.namedData, segments, file_name)
    return PtdFile(header, flat, segments, {b.key: b for b in blobs})
