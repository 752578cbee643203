"""Tensor layouts (element type, sizes, dim order) as the .pte/.ptd schemas number them, and a
tensor's bytes and SHA-256 identity.

A large export asks for the identity of one foundation weight in many places (the data policy, each
delegate's constant, the emitter, the data file). Inside `with digest_cache():` tensor_digest computes
each tensor's digest once and hands it out again for any tensor viewing the same elements of the same
storage (an adapter model that shares the foundation's tensors, or a lifted copy of a parameter).
A tensor mapped from a file (a safetensors checkpoint) leaves the process's resident memory again
once its digest is computed (_resident.release): the exporter holds a model's weights without
keeping their bytes resident between the few stages that read them.
"""

import contextlib
import contextvars
import hashlib
from typing import Any, Callable, Dict, Hashable, Iterator, Optional, Tuple, TypeVar

import torch
from edgeshare.exir._layout import TensorLayout, scalar_type_of
from edgeshare.exir._resident import read_once, release
from edgeshare.exir.errors import UnsupportedModelError

__all__ = [
    "TensorLayout",
    "StorageKey",
    "derived",
    "digest_cache",
    "scalar_type_of",
    "storage_key",
    "tensor_bytes",
    "tensor_digest",
    "tensor_view",
]

T = TypeVar("T")

# torch's ScalarType numbering, as schema/scalar_type.fbs spells it.
def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Returns the contiguous row-major bytes of a tensor (little-endian, as on the target).

    Args:
      tensor: a CPU tensor.

    Returns:
      Its bytes.
    """
    t = tensor.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def tensor_view(tensor: torch.Tensor) -> memoryview:
    """Returns the contiguous row-major bytes of a tensor without copying when it is contiguous.

    Args:
      tensor: a CPU tensor.

    Returns:
      A read-only view of its bytes (it keeps the tensor's storage alive); a copy's view for a
      non-contiguous tensor.
    """
    t = tensor.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).toreadonly()


# (storage pointer, storage offset, sizes, strides, dtype) -> (tensor, version, digest). The tensor is
# held so that its storage (and so the pointer) cannot be freed and reused while the entry exists.
StorageKey = Tuple[int, int, Tuple[int, ...], Tuple[int, ...], torch.dtype]


def storage_key(tensor: torch.Tensor) -> StorageKey:
    """Which elements of which storage a tensor views: equal for one tensor under several names or
    objects (a lifted copy of a parameter, an adapter model sharing the foundation's tensors)."""
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )


_DIGESTS: contextvars.ContextVar[Optional[Dict[StorageKey, Tuple[torch.Tensor, int, bytes]]]] = contextvars.ContextVar(
    "edgeshare_digests", default=None
)
# (kind, dtype, sizes, digest) -> what derived() made of a tensor with that identity.
_DERIVED: contextvars.ContextVar[Optional[Dict[Hashable, Any]]] = contextvars.ContextVar(
    "edgeshare_derived", default=None
)


@contextlib.contextmanager
def digest_cache() -> Iterator[None]:
    """Within the block, tensor_digest computes each tensor's digest once, and derived() each
    tensor's derived data once (both caches end with it)."""
    token = _DIGESTS.set({} if _DIGESTS.get() is None else _DIGESTS.get())
    derived_token = _DERIVED.set({} if _DERIVED.get() is None else _DERIVED.get())
    try:
        yield
    finally:
        _DERIVED.reset(derived_token)
        _DIGESTS.reset(token)


def derived(tensor: torch.Tensor, kind: Hashable, make: Callable[[torch.Tensor], T]) -> T:
    """make(tensor) for a pure function of a tensor's bytes (e.g. its quantization), made once
    inside digest_cache() for every tensor of the same dtype, sizes and bytes: each program that
    stores it holds the same object, not a copy of its own.

    Args:
      tensor: a CPU tensor.
      kind: names make and its parameters (e.g. ("qc4w", 32)).
      make: the function.

    Returns:
      make(tensor), or what it returned for an equal tensor earlier in the block.
    """
    cache = _DERIVED.get()
    if cache is None:
        return make(tensor)
    key = (kind, tensor.dtype, tuple(tensor.shape), tensor_digest(tensor))
    if key not in cache:
        cache[key] = make(tensor)
    return cache[key]


def tensor_digest(tensor: torch.Tensor) -> bytes:
    """Returns the SHA-256 of tensor_bytes(tensor), once per tensor inside digest_cache(). Pages of
    tensor that hold a mapped file's bytes are released from the process afterwards (they stay
    readable).

    Args:
      tensor: a CPU tensor.

    Returns:
      The 32-byte digest.
    """
    cache = _DIGESTS.get()
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        return hashlib.sha256(tensor_view(tensor)).digest()
    if cache is None:
        return _hash_and_release(tensor)
    key = storage_key(tensor)
    hit = cache.get(key)
    # The version counter moves with every in-place write, so a changed tensor is hashed again.
    if hit is not None and hit[1] == tensor._version:
        return hit[2]
    digest = _hash_and_release(tensor)
    cache[key] = (tensor, tensor._version, digest)
    return digest


def _hash_and_release(tensor: torch.Tensor) -> bytes:
    sha = hashlib.sha256()
    for piece in read_once(tensor_view(tensor)):
        sha.update(piece)
    release(tensor)  # a non-contiguous tensor was read through a copy
    return sha.digest()
