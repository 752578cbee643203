"""The .pte program file: writer and round-trip reader (layout in _format.py)."""

import dataclasses
import struct
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import flatbuffers
import numpy as np
from edgeshare.exir._serialize import _format
from edgeshare.exir._serialize._format import FileHeader, NamedBlob, Segment
from edgeshare.exir.errors import SerializationError
from edgeshare.schema import program_generated as fb

PTE_MAGIC = b"ESPT"
PTE_FILE_IDENTIFIER = b"ESP1"
DEFAULT_SEGMENT_ALIGNMENT = 64


@dataclasses.dataclass
class PteFile:
    """A .pte read back.

    Attributes:
      header: the file header.
      program: the Program (FlatBuffers object API).
      segments: the bytes of each segment.
      named_data: the program's named data by key (in file order).
    """

    header: FileHeader
    program: "fb.ProgramT"
    segments: List[bytes]
    named_data: Dict[str, NamedBlob]


def serialize_pte(
    program: "fb.ProgramT",
    segments: Sequence[Segment],
    segment_alignment: int = DEFAULT_SEGMENT_ALIGNMENT,
) -> bytes:
    """Writes a .pte image.

    Fills program.version, program.segments and program.segmentAlignment, and sorts
    program.namedData by key.

    Args:
      program: the Program; namedData entries name indices into segments.
      segments: the segment bytes with their required alignment.
      segment_alignment: the minimum alignment of every segment (raised to the largest segment
        alignment).

    Returns:
      The file bytes.

    Raises:
      SerializationError: duplicate named-data keys or a bad alignment.
    """
    alignment = _format.effective_alignment(segment_alignment, segments)
    placed = _format.layout_segments(segments, alignment)
    program.version = _format.FORMAT_VERSION
    program.segmentAlignment = alignment
    program.segments = [fb.DataSegmentT(offset, size) for offset, size in placed]
    entries = sorted(program.namedData or [], key=lambda e: e.key.encode("utf-8"))
    for a, b in zip(entries, entries[1:]):
        if a.key == b.key:
            raise SerializationError(f"program named data key '{a.key}' appears twice")
    program.namedData = entries
    builder = flatbuffers.Builder(4096)
    builder.Finish(program.Pack(builder), file_identifier=PTE_FILE_IDENTIFIER)
    return _format.assemble(PTE_MAGIC, bytes(builder.Output()), segments, placed, alignment)


# Program.foundation_digest is the sixth field of the Program table (program.fbs): its vtable slot.
_FOUNDATION_DIGEST_SLOT = 4 + 2 * 5


def _foundation_digest_at(data: bytes, header: _format.FileHeader, file_name: str) -> Optional[int]:
    """Where the image's Program.foundation_digest bytes lie (a file offset), or None when the
    program has no such field."""
    start, end = header.flatbuffer_offset, header.flatbuffer_offset + header.flatbuffer_size
    try:
        table = fb.Program.GetRootAs(data, start)._tab
        slot = table.Offset(_FOUNDATION_DIGEST_SLOT)
        if slot == 0:
            return None
        at, size = table.Vector(slot), table.VectorLen(slot)
    except (struct.error, IndexError) as e:
        raise SerializationError(f"{file_name}: the Program flatbuffer is malformed ({e})") from e
    if size != 32 or not start <= at <= end - 32:
        raise SerializationError(f"{file_name}: Program.foundation_digest is not 32 bytes inside the flatbuffer")
    return at


def with_foundation_digest(data: bytes, foundation_digest: bytes, file_name: str = "<pte>") -> bytes:
    """A .pte image with Program.foundation_digest set (the identity of the foundation file it was
    exported over: ptd.foundation_identity()); everything else, segments included, as it was.

    When the image already records a foundation digest (to_executorch's foundation_tag), its 32
    bytes are overwritten where they lie; otherwise the program is unpacked and packed again with
    the field, which lays it out as serializing it with the field does.

    Args:
      data: the file bytes (as serialize_pte wrote them).
      foundation_digest: 32 bytes.
      file_name: names the file in errors.

    Returns:
      The new file bytes.

    Raises:
      SerializationError: a malformed image or a digest that is not 32 bytes.
    """
    if len(foundation_digest) != 32:
        raise SerializationError(f"{file_name}: foundation_digest has {len(foundation_digest)} bytes, not 32")
    header = _format.read_header(data, PTE_MAGIC, file_name)
    at = _foundation_digest_at(data, header, file_name)
    if at is not None:
        return b"".join((data[:at], bytes(foundation_digest), data[at + 32 :]))
    start = header.flatbuffer_offset
    program = fb.ProgramT.InitFromObj(fb.Program.GetRootAs(bytes(data[start : start + header.flatbuffer_size]), 0))
    segments = _format.read_segments(data, header, program.segments, program.segmentAlignment, file_name)
    program.foundationDigest = list(foundation_digest)
    builder = flatbuffers.Builder(4096)
    builder.Finish(program.Pack(builder), file_identifier=PTE_FILE_IDENTIFIER)
    # Each segment at the program's alignment: the same placement serialize_pte chose.
    placed = [(s.offset, s.size) for s in program.segments or []]
    segs = [Segment(seg, program.segmentAlignment) for seg in segments]
    return _format.assemble(PTE_MAGIC, bytes(builder.Output()), segs, placed, program.segmentAlignment)


# How many first bytes of a segment index it for with_replaced_data.
_START = 64


def with_replaced_data(
    data: bytes, replacements: Mapping[bytes, Tuple[bytes, bytes, bytes]], file_name: str = "<pte>"
) -> Optional[bytes]:
    """A .pte image in which other tensors of the same sizes stand where its own stood: the
    segment holding each old tensor's bytes holds the new bytes, and every copy of the old
    digest (the named-data table's, a delegate's identity of the constant) is the new digest.
    Nothing moves, so the image is what serializing the program over the new tensors writes,
    provided nothing else in it depends on their values.

    Copies of a digest are looked for everywhere but in the replaced segments themselves (tensor
    bytes, not records of identity).

    Args:
      data: the file bytes.
      replacements: old digest -> (old bytes, new bytes, new digest); every old digest, and every
        new one, distinct.
      file_name: names the file in errors.

    Returns:
      The new file bytes, or None when an old tensor's bytes are not exactly one segment (the
      delegate keeps them in another form, or two tensors shared a segment).

    Raises:
      SerializationError: a malformed image, or new bytes of another size than the old.
    """
    header = _format.read_header(data, PTE_MAGIC, file_name)
    program = fb.Program.GetRootAs(data, header.flatbuffer_offset)
    sizes = set()
    for old_digest, (old, new, new_digest) in replacements.items():
        if len(old) != len(new) or len(old_digest) != 32 or len(new_digest) != 32:
            raise SerializationError(f"{file_name}: a replacement changes a size")
        sizes.add(len(old))
    # The segments that could hold an old tensor, by their size and first bytes (then compared whole).
    whole = data if isinstance(data, bytes) else bytes(data)
    by_start: Dict[Tuple[int, bytes], List[int]] = {}
    for i in range(program.SegmentsLength()):
        seg = program.Segments(i)
        if seg.Offset() + seg.Size() > header.segment_data_size:
            raise SerializationError(f"{file_name}: segments[{i}] runs past the segment data")
        if seg.Size() in sizes:
            at = header.segment_base_offset + seg.Offset()
            by_start.setdefault((seg.Size(), whole[at : at + min(seg.Size(), _START)]), []).append(at)
    out = bytearray(whole)
    replaced: List[Tuple[int, int]] = []
    for old, new, _ in replacements.values():
        at = [o for o in by_start.get((len(old), old[:_START]), []) if whole.startswith(old, o)]
        if len(at) != 1:
            return None
        out[at[0] : at[0] + len(new)] = new
        replaced.append((at[0], at[0] + len(new)))
    new_digests = {old_digest: new_digest for old_digest, (_, _, new_digest) in replacements.items()}
    for old_digest, places in _occurrences(memoryview(whole), new_digests.keys(), replaced).items():
        for at in places:
            out[at : at + 32] = new_digests[old_digest]
    return bytes(out)


def _occurrences(
    data: memoryview, needles: Collection[bytes], skip: Sequence[Tuple[int, int]], window: int = 1 << 20
) -> Dict[bytes, List[int]]:
    """Where each 32-byte needle occurs in data (non-overlapping, left to right, as bytes.replace
    finds them), outside the skip ranges [start, end).

    One pass over data whatever the number of needles: positions whose first two bytes begin some
    needle are picked with a 64 Ki-entry table, the few left are compared whole. Windows of data
    are scanned at a time, so memory stays small.
    """
    found: Dict[bytes, List[int]] = {}
    if not needles:
        return found
    firsts = np.zeros(1 << 16, dtype=bool)
    for needle in needles:
        firsts[needle[0] | needle[1] << 8] = True
    wanted = set(needles)
    ranges, cursor = [], 0
    for start, end in sorted(skip):
        if start > cursor:
            ranges.append((cursor, start))
        cursor = max(cursor, end)
    ranges.append((cursor, len(data)))
    last_end = -1
    for begin, end in ranges:
        for lo in range(begin, end - 31, window):
            hi = min(lo + window + 31, end)
            chunk = np.frombuffer(data[lo:hi], dtype=np.uint8)
            pairs = chunk[:-1].astype(np.uint16) | chunk[1:].astype(np.uint16) << 8
            for i in np.flatnonzero(firsts[pairs[: len(pairs) - 30]]).tolist():
                at = lo + i
                piece = data[at : at + 32].tobytes()
                if at >= last_end and piece in wanted:
                    found.setdefault(piece, []).append(at)
                    last_end = at + 32
    return found


def deserialize_pte(data: bytes, file_name: str = "<pte>") -> PteFile:
    """Reads a .pte image, checking header, identifier, segment bounds, key order and digests.

    Args:
      data: the file bytes.
      file_name: names the file in errors.

    Returns:
      The parsed file.

    Raises:
      SerializationError: naming the file and the field that is wrong.
    """
    header = _format.read_header(data, PTE_MAGIC, file_name)
    start = header.flatbuffer_offset
    fb_bytes = bytes(data[start : start + header.flatbuffer_size])
    if not fb.Program.ProgramBufferHasIdentifier(fb_bytes, 0):
        raise SerializationError(f"{file_name}: flatbuffer identifier is not {PTE_FILE_IDENTIFIER!r}")
    program = fb.ProgramT.InitFromObj(fb.Program.GetRootAs(fb_bytes, 0))
    if program.version != _format.FORMAT_VERSION:
        raise SerializationError(f"{file_name}: Program.version {program.version} is not supported")
    segments = _format.read_segments(data, header, program.segments, program.segmentAlignment, file_name)
    blobs = _format.read_named_data(program.namedData, segments, file_name)
    return PteFile(header, program, segments, {b.key: b for b in blobs})
