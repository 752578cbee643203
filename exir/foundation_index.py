"""A foundation data file's index: its identity and each entry's SHA-256, without its bytes.

An adapter's program records the identity of the foundation.ptd it runs over and keys its
foundation weights by name. A process that exports only the adapter (a build action of its own)
needs no more of the foundation than this: the identity to record, and each key's digest to check
that the adapter's program asks for exactly the bytes the foundation holds. The file is a few
kilobytes of JSON, so a build hands it to each adapter's action instead of the .ptd.

    index = FoundationIndex.of(entries)          # from the entries a foundation export wrote
    write_foundation_index("foundation.index.json", index)
    index = read_foundation_index("foundation.index.json")
"""

import dataclasses
import json
import os
import tempfile
from typing import Any, Dict, Mapping

from edgeshare.exir._serialize.ptd import foundation_identity
from edgeshare.exir.errors import ExportError

__all__ = [
    "FOUNDATION_INDEX_FORMAT",
    "FoundationIndex",
    "read_foundation_index",
    "write_foundation_index",
]

# The file's "format" value: a JSON file of another kind is refused by name.
FOUNDATION_INDEX_FORMAT = "edgeshare-foundation-index-1"


@dataclasses.dataclass(frozen=True)
class FoundationIndex:
    """What an exporter needs of a foundation.ptd to export programs over it.

    Attributes:
      identity: the file's identity (ptd.foundation_identity), 32 bytes.
      digests: key -> the SHA-256 of that entry's bytes.
    """

    identity: bytes
    digests: Dict[str, bytes]

    @staticmethod
    def of(entries: Mapping[str, Any]) -> "FoundationIndex":
        """The index of a data file's entries (DataFileEntry values, as SharedData holds them)."""
        return FoundationIndex(foundation_identity(entries), {key: entries[key].digest for key in entries})

    def to_json(self) -> str:
        """The file's text: keys sorted, digests in hex, so equal indexes are equal bytes."""
        body = {
            "format": FOUNDATION_INDEX_FORMAT,
            "identity": self.identity.hex(),
            "entries": {key: self.digests[key].hex() for key in sorted(self.digests, key=lambda k: k.encode("utf-8"))},
        }
        return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


def write_foundation_index(path: str, index: FoundationIndex) -> None:
    """Writes the index to path, whole or not at all (a temporary file beside it, renamed in).

    Raises:
      ExportError: the file cannot be written (naming it).
    """
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=parent)
    except OSError as e:
        raise ExportError(f"foundation index '{path}' cannot be written: {e.strerror}") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(index.to_json())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # as open() would have made it
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _digest(value: Any, what: str, path: str) -> bytes:
    try:
        digest = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise ExportError(f"foundation index '{path}': {what} is not a 64-digit hex SHA-256")
    return digest


def read_foundation_index(path: str) -> FoundationIndex:
    """Reads and checks an index written by write_foundation_index.

    Raises:
      ExportError: the file is missing, not JSON, not an index, or its identity is not the one
        its digests make (a file edited by hand), naming the file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except OSError as e:
        raise ExportError(f"foundation index '{path}' cannot be read: {e.strerror}") from e
    except ValueError as e:
        raise ExportError(f"foundation index '{path}' is not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("format") != FOUNDATION_INDEX_FORMAT:
        raise ExportError(f"foundation index '{path}' is not an {FOUNDATION_INDEX_FORMAT} file")
    entries = body.get("entries")
    if not isinstance(entries, dict) or not entries:
        raise ExportError(f"foundation index '{path}' lists no entries")
    digests = {key: _digest(value, f"entry '{key}'", path) for key, value in entries.items()}
    identity = _digest(body.get("identity"), "identity", path)
    # foundation_identity reads an entry's digest from its fourth field.
    if foundation_identity({key: (b"", 1, None, d) for key, d in digests.items()}) != identity:
        raise ExportError(f"foundation index '{path}': its identity is not the one its entries' digests make")
    return FoundationIndex(identity, digests)
