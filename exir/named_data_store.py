"""NamedDataStore: byte blobs under string keys, bound for the .pte or for an external .ptd tag.

A backend's preprocess fills one store per call and returns its output; to_executorch merges every
output into one store per program. The rules:
  - the same key with the same bytes is stored once (two methods or partitions may share a key);
  - the same key with different bytes is an error naming the key;
  - the same key under two different external tags (or under a tag and the program) is an error;
  - buffers are deduplicated by content, so two keys with the same bytes share one segment;
  - every entry records the SHA-256 digest of its bytes and the alignment it asked for.
"""

import dataclasses
import hashlib
from typing import Dict, List, Optional, Tuple, Union

from edgeshare.exir.errors import NamedDataError
from edgeshare.exir.tensor_layout import TensorLayout

__all__ = [
    "DataBuffer",
    "DataEntry",
    "NamedDataStore",
    "NamedDataStoreOutput",
    "DEFAULT_ALIGNMENT",
]

DEFAULT_ALIGNMENT = 16


@dataclasses.dataclass
class DataBuffer:
    """One stored blob.

    Attributes:
      data: the bytes (bytes, or a read-only memoryview of a weight's bytes in place).
      alignment: the largest alignment any key of this blob asked for (a power of two).
      digest: SHA-256 of data.
    """

    data: Union[bytes, memoryview]
    alignment: int
    digest: bytes


@dataclasses.dataclass(frozen=True)
class DataEntry:
    """A key's entry: which buffer holds its bytes and, for tensors, their layout."""

    buffer_index: int
    tensor_layout: Optional[TensorLayout] = None


@dataclasses.dataclass
class NamedDataStoreOutput:
    """What a store holds, ready for serialization.

    Attributes:
      buffers: the distinct blobs.
      pte_data: key -> entry for data that stays in the program (.pte).
      external_data: tag -> {key -> entry} for data written to <tag>.ptd.
    """

    buffers: List[DataBuffer] = dataclasses.field(default_factory=list)
    pte_data: Dict[str, DataEntry] = dataclasses.field(default_factory=dict)
    external_data: Dict[str, Dict[str, DataEntry]] = dataclasses.field(default_factory=dict)


def _where(tag: Optional[str]) -> str:
    return "the program" if tag is None else f"external tag '{tag}'"


class NamedDataStore:
    """Collects named blobs for one program and its data files."""

    def __init__(self) -> None:
        self._buffers: List[DataBuffer] = []
        self._by_digest: Dict[Tuple[bytes, int], int] = {}
        # key -> (external tag or None, entry)
        self._entries: Dict[str, Tuple[Optional[str], DataEntry]] = {}

    def add_named_data(
        self,
        key: str,
        data: Union[bytes, bytearray, memoryview],
        alignment: int = DEFAULT_ALIGNMENT,
        external_tag: Optional[str] = None,
        tensor_layout: Optional[TensorLayout] = None,
        digest: Optional[bytes] = None,
    ) -> None:
        """Stores data under key.

        Args:
          key: the name the runtime looks the data up by.
          data: the bytes.
          alignment: required alignment of the bytes in the file (a power of two).
          external_tag: None to keep the data in the program (.pte), else the tag of the .ptd
            file (e.g. "foundation" -> foundation.ptd).
          tensor_layout: the layout when the data is a tensor; None for opaque blobs.
          digest: the SHA-256 of data when the caller has it already (a tensor's identity,
            computed once per export); None to compute it here.

        Raises:
          NamedDataError: the key already holds different bytes or layout, or sits under another
            external tag; or an argument is invalid.
          TypeError: key is not a str or data is not bytes-like.
        """
        if not isinstance(key, str):
            raise TypeError(f"named data key must be a str, got {type(key).__name__}")
        if not key:
            raise NamedDataError("named data key must not be empty")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"named data '{key}': data must be bytes, got {type(data).__name__}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise NamedDataError(f"named data '{key}': alignment {alignment} is not a power of two")
        if external_tag is not None and (not external_tag or "/" in external_tag or external_tag.startswith(".")):
            raise NamedDataError(f"named data '{key}': external tag '{external_tag}' is not a file stem")
        # A memoryview (a weight's bytes in place) is kept as it is: a large model's weights are
        # not copied per program. Mutable bytes are copied so a later change cannot alter the store.
        data = memoryview(data).cast("B") if isinstance(data, memoryview) else bytes(data)
        if digest is None:
            digest = hashlib.sha256(data).digest()
        existing = self._entries.get(key)
        if existing is not None:
            tag, entry = existing
            if tag != external_tag:
                raise NamedDataError(
                    f"named data '{key}' is placed under both {_where(tag)} and {_where(external_tag)}"
                )
            buffer = self._buffers[entry.buffer_index]
            if buffer.digest != digest or len(buffer.data) != len(data):
                raise NamedDataError(
                    f"named data '{key}' was added twice with different bytes "
                    f"({len(buffer.data)} bytes sha256 {buffer.digest.hex()[:16]}... vs "
                    f"{len(data)} bytes sha256 {digest.hex()[:16]}...)"
                )
            if tensor_layout != entry.tensor_layout:
                raise NamedDataError(
                    f"named data '{key}' was added twice with different layouts "
                    f"({entry.tensor_layout} vs {tensor_layout})"
                )
            buffer.alignment = max(buffer.alignment, alignment)
            return
        index = self._by_digest.get((digest, len(data)))
        if index is None:
            index = len(self._buffers)
            self._buffers.append(DataBuffer(data, alignment, digest))
            self._by_digest[(digest, len(data))] = index
        else:
            self._buffers[index].alignment = max(self._buffers[index].alignment, alignment)
        self._entries[key] = (external_tag, DataEntry(index, tensor_layout))

    def merge(self, output: NamedDataStoreOutput) -> None:
        """Adds every entry of another store's output, with the same rules as add_named_data.

        Args:
          output: e.g. a backend's PreprocessResult.data_store_output.

        Raises:
          NamedDataError: a key conflicts with one already stored.
        """
        for key, entry in output.pte_data.items():
            buf = output.buffers[entry.buffer_index]
            self.add_named_data(key, buf.data, buf.alignment, None, entry.tensor_layout, buf.digest)
        for tag, entries in output.external_data.items():
            for key, entry in entries.items():
                buf = output.buffers[entry.buffer_index]
                self.add_named_data(key, buf.data, buf.alignment, tag, entry.tensor_layout, buf.digest)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def external_tag(self, key: str) -> Optional[str]:
        """Returns the external tag of a stored key (None: the program).

        Raises:
          KeyError: the key is not stored.
        """
        return self._entries[key][0]

    def get_named_data_store_output(self) -> NamedDataStoreOutput:
        """Returns what the store holds (buffers are shared, not copied).

        Returns:
          The buffers, the program's keys and each external tag's keys.
        """
        out = NamedDataStoreOutput(buffers=list(self._buffers))
        for key, (tag, entry) in self._entries.items():
            if tag is None:
                out.pte_data[key] = entry
            else:
                out.external_data.setdefault(tag, {})[key] = entry
        return out
