"""Writers and round-trip readers of the .pte (program) and .ptd (data) files."""

from edgeshare.exir._serialize._format import FileHeader, NamedBlob, Segment
from edgeshare.exir._serialize.ptd import PtdFile, deserialize_ptd, foundation_identity, serialize_ptd, write_ptd
from edgeshare.exir._serialize.pte import PteFile, deserialize_pte, serialize_pte, with_foundation_digest, with_replaced_data

__all__ = [
    "FileHeader",
    "NamedBlob",
    "PtdFile",
    "PteFile",
    "Segment",
    "deserialize_ptd",
    "deserialize_pte",
    "foundation_identity",
    "serialize_ptd",
    "serialize_pte",
    "with_foundation_digest",
    "with_replaced_data",
    "write_ptd",
]
