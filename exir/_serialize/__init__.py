"""Writers and round-trip readers of the .pte (program) and .ptd (data) files."""

from edgeshare.exir._serialize._format import FileHeader, NamedBlob, Segment
from edgeshare.exir._serialize.ptd import PtdFile, deserialize_ptd, serialize_ptd, write_ptd
from edgeshare.exir._serialize.pte import PteFile, deserialize_pte, serialize_pte

__all__ = [
    "FileHeader",
    "NamedBlob",
    "PtdFile",
    "PteFile",
    "Segment",
    "deserialize_ptd",
    "deserialize_pte",
    "serialize_ptd",
    "serialize_pte",
    "write_ptd",
]
