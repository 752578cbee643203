"""Round trips of the .pte and .ptd writers and readers, with header fields and alignment."""

import hashlib
import struct

import pytest
from edgeshare.exir._serialize import (
    Segment,
    deserialize_ptd,
    deserialize_pte,
    serialize_ptd,
    serialize_pte,
    with_foundation_digest,
    with_replaced_data,
)
from edgeshare.exir._serialize._format import named_data_to_fb
from edgeshare.exir._serialize.ptd import PtdIndexEntry, read_ptd_index
from edgeshare.exir.errors import SerializationError
from edgeshare.exir.tensor_layout import TensorLayout
from edgeshare.schema import program_generated as fb


def _header(data):
    magic, version, size, reserved, fb_off, fb_size, base, seg_size = struct.unpack_from("<4sIIIQQQQ", data)
    return magic, version, size, reserved, fb_off, fb_size, base, seg_size


def _program():
    program = fb.ProgramT()
    plan = fb.ExecutionPlanT()
    plan.name = "forward"
    plan.nonConstBufferSizes = [0, 64]
    program.executionPlans = [plan]
    layout = TensorLayout(6, (2,), (0,))
    program.namedData = [
        named_data_to_fb(fb, "zeta", 1, hashlib.sha256(b"B" * 8).digest(), layout),
        named_data_to_fb(fb, "alpha", 0, hashlib.sha256(b"A" * 5).digest(), None),
    ]
    return program


def test_pte_round_trip_header_and_alignment():
    data = serialize_pte(_program(), [Segment(b"A" * 5, 16), Segment(b"B" * 8, 128)], 64)
    magic, version, size, reserved, fb_off, fb_size, base, seg_size = _header(data)
    assert (magic, version, size, reserved, fb_off) == (b"ESPT", 1, 48, 0, 48)
    assert base % 128 == 0 and base >= 48 + fb_size and base - (48 + fb_size) < 128
    assert len(data) == base + seg_size
    assert data[48 + 4 : 48 + 8] == b"ESP1"
    pte = deserialize_pte(data, "x.pte")
    assert pte.program.version == 1
    assert pte.program.segmentAlignment == 128
    assert all(s.offset % 128 == 0 for s in pte.program.segments)
    assert pte.segments == [b"A" * 5, b"B" * 8]
    assert list(pte.named_data) == ["alpha", "zeta"]  # sorted by key
    assert pte.named_data["zeta"].tensor_layout == TensorLayout(6, (2,), (0,))
    assert pte.named_data["alpha"].tensor_layout is None
    assert pte.program.executionPlans[0].name == b"forward"


def test_replaced_data_is_what_serializing_the_new_bytes_writes():
    a, b, c = b"A" * 5, b"B" * 8, b"C" * 8
    digest = {x: hashlib.sha256(x).digest() for x in (a, b, c)}

    def program(zeta):
        p = _program()
        p.namedData[0] = named_data_to_fb(fb, "zeta", 1, digest[zeta], TensorLayout(6, (2,), (0,)))
        return p

    old = serialize_pte(program(b), [Segment(a, 16), Segment(b, 128)], 64)
    new = serialize_pte(program(c), [Segment(a, 16), Segment(c, 128)], 64)
    assert with_replaced_data(old, {digest[b]: (b, c, digest[c])}, "x.pte") == new
    # Bytes that are no segment of their own: the caller lowers again.
    assert with_replaced_data(old, {digest[b]: (b"B" * 4, b"C" * 4, digest[c])}, "x.pte") is None
    twice = serialize_pte(program(b), [Segment(b, 16), Segment(b, 128)], 64)
    assert with_replaced_data(twice, {digest[b]: (b, c, digest[c])}, "x.pte") is None
    with pytest.raises(SerializationError, match="x.pte: a replacement changes a size"):
        with_replaced_data(old, {digest[b]: (b, b"C" * 9, digest[c])}, "x.pte")


def test_foundation_digest_set_in_place_is_the_image_packed_with_it():
    segments = [Segment(b"A" * 5, 16), Segment(b"B" * 8, 128)]
    identity, provisional = hashlib.sha256(b"file").digest(), hashlib.sha256(b"own entries").digest()
    repacked = with_foundation_digest(serialize_pte(_program(), segments, 64), identity, "x.pte")
    recorded = _program()
    recorded.foundationDigest = list(provisional)
    patched = with_foundation_digest(serialize_pte(recorded, segments, 64), identity, "x.pte")
    assert patched == repacked
    assert bytes(deserialize_pte(patched, "x.pte").program.foundationDigest) == identity
    with pytest.raises(SerializationError, match="x.pte: foundation_digest has 31 bytes"):
        with_foundation_digest(patched, identity[:31], "x.pte")


def test_replaced_data_replaces_the_digest_wherever_it_is_recorded():
    a, b, c = b"A" * 40, b"B" * 40, b"C" * 40
    digest = {x: hashlib.sha256(x).digest() for x in (a, b, c)}

    def image(weight):
        p = _program()
        p.namedData = [named_data_to_fb(fb, "w", 1, digest[weight], TensorLayout(6, (10,), (0,)))]
        # A delegate's blob that names the weight by its digest, at an odd offset.
        blob = b"x" * 3 + digest[weight] + b"y" * 5 + digest[weight]
        return serialize_pte(p, [Segment(blob, 16), Segment(weight, 64), Segment(a, 64)], 64)

    assert with_replaced_data(image(b), {digest[b]: (b, c, digest[c])}, "x.pte") == image(c)


def test_pte_without_segments_has_zero_segment_data():
    data = serialize_pte(fb.ProgramT(), [])
    _, _, _, _, _, fb_size, base, seg_size = _header(data)
    assert seg_size == 0 and len(data) == base and base % 64 == 0


def test_ptd_round_trip_is_page_aligned_and_order_independent():
    layout = TensorLayout(6, (3,), (0,))
    entries = {"b.weight": (b"x" * 12, 16, layout), "a.weight": (b"y" * 12, 16, layout)}
    data = serialize_ptd(entries)
    assert data == serialize_ptd(dict(reversed(list(entries.items()))))
    magic, version, size, reserved, fb_off, fb_size, base, seg_size = _header(data)
    assert (magic, version, size, fb_off) == (b"ESTD", 1, 48, 48)
    assert base % 4096 == 0 and len(data) == base + seg_size
    ptd = deserialize_ptd(data, "f.ptd")
    assert ptd.flat_tensor.tensorAlignment == 4096
    assert all(s.offset % 4096 == 0 for s in ptd.flat_tensor.segments)
    assert list(ptd.named_data) == ["a.weight", "b.weight"]
    assert ptd.named_data["b.weight"].data == b"x" * 12
    assert ptd.named_data["a.weight"].digest == hashlib.sha256(b"y" * 12).digest()


def test_reader_errors_name_the_file_and_field():
    data = bytearray(serialize_ptd({"k": (b"1234", 16, None)}))
    with pytest.raises(SerializationError, match="f.ptd: magic"):
        deserialize_ptd(b"XXXX" + bytes(data[4:]), "f.ptd")
    with pytest.raises(SerializationError, match="f.ptd: .*file size"):
        deserialize_ptd(bytes(data[:-1]), "f.ptd")
    with pytest.raises(SerializationError, match="shorter than the header"):
        deserialize_pte(b"ESPT", "p.pte")
    data[-1] ^= 0xFF  # the last segment byte: digest no longer matches
    with pytest.raises(SerializationError, match="'k' digest"):
        deserialize_ptd(bytes(data), "f.ptd")


def test_ptd_index_gives_sizes_and_layouts_from_the_header_alone(tmp_path):
    layout = TensorLayout(6, (3,), (0,))
    data = serialize_ptd({"b.weight": (b"x" * 12, 16, layout), "a.blob": (b"yz", 16, None)})
    path = tmp_path / "f.ptd"
    path.write_bytes(data)
    assert read_ptd_index(str(path)) == {
        "a.blob": PtdIndexEntry(2, None),
        "b.weight": PtdIndexEntry(12, layout),
    }
    # The segments are not read: a corrupt weight byte does not change the index.
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    path.write_bytes(bytes(corrupt))
    assert read_ptd_index(str(path))["b.weight"].size == 12
    path.write_bytes(data[:-1])
    with pytest.raises(SerializationError, match="f.ptd: .*file size"):
        read_ptd_index(str(path))
    path.write_bytes(b"ESPT" + data[4:])
    with pytest.raises(SerializationError, match="f.ptd: magic"):
        read_ptd_index(str(path))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
