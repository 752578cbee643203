"""The .pte program file: writer and round-trip reader (layout in _format.py)."""

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import flatbuffers
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


def with_foundation_digest(data: bytes, foundation_digest: bytes, file_name: str = "<pte>") -> bytes:
    """A .pte image with Program.foundation_digest set (the identity of the foundation file it was
    exported over: ptd.foundation_identity()); everything else, segments included, as it was.

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


def with_replaced_data(
    data: bytes, replacements: Mapping[bytes, Tuple[bytes, bytes, bytes]], file_name: str = "<pte>"
) -> Optional[bytes]:
    """A .pte image in which other tensors of the same sizes stand where its own stood: the
    segment holding each old tensor's bytes holds the new bytes, and every copy of the old
    digest (the named-data table's, a delegate's identity of the constant) is the new digest.
    Nothing moves, so the image is what serializing the program over the new tensors writes,
    provided nothing else in it depends on their values.

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
    start = header.flatbuffer_offset
    program = fb.Program.GetRootAs(bytes(data[start : start + header.flatbuffer_size]), 0)
    by_size: Dict[int, List[int]] = {}
    for i in range(program.SegmentsLength()):
        seg = program.Segments(i)
        if seg.Offset() + seg.Size() > header.segment_data_size:
            raise SerializationError(f"{file_name}: segments[{i}] runs past the segment data")
        by_size.setdefault(seg.Size(), []).append(header.segment_base_offset + seg.Offset())
    out = bytearray(data)
    view = memoryview(data)
    for old_digest, (old, new, new_digest) in replacements.items():
        if len(old) != len(new) or len(old_digest) != 32 or len(new_digest) != 32:
            raise SerializationError(f"{file_name}: a replacement changes a size")
        at = [o for o in by_size.get(len(old), []) if view[o : o + len(old)] == old]
        if len(at) != 1:
            return None
        out[at[0] : at[0] + len(new)] = new
    patched = bytes(out)
    for old_digest, (_, _, new_digest) in replacements.items():
        patched = patched.replace(old_digest, new_digest)
    return patched


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
