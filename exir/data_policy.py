"""Data policies: which weight goes where (inline, the program's named data, or a .ptd tag).

A policy is asked once per parameter or buffer of each method and answers with a DataPlacement
(key + external tag) or None (not covered: the weight stays inline in the program). to_edge records
the answer on the parameter's placeholder node (node.meta[DATA_KEY_META] and
node.meta[EXTERNAL_TAG_META], node.meta[DATA_OPEN_META]) so that backends and the emitter store
the weight under that key.

Keys of data kept by the program are qualified by the method name ("forward/fc1.lora_a.weight") so
that methods never collide; keys of external data are names shared by every program.

FoundationDataPolicy (the LoRA default) decides by identity: a weight is the foundation's when its
dtype, shape and bytes equal a tensor of the bare foundation, whatever either is called.
LoraDataPolicy and PatternDataPolicy decide by name, for users who choose that explicitly.
"""

import dataclasses
import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Pattern, Sequence, Tuple, Union

import torch
from edgeshare.exir.tensor_layout import tensor_digest
from torch import nn

__all__ = [
    "CallableDataPolicy",
    "DATA_KEY_META",
    "DATA_OPEN_META",
    "DataPlacement",
    "DataPolicy",
    "EXTERNAL_TAG_META",
    "FoundationDataPolicy",
    "InlineDataPolicy",
    "LoraDataPolicy",
    "PatternDataPolicy",
    "canonical_name",
    "program_key",
]

DATA_KEY_META = "edgeshare_data_key"
EXTERNAL_TAG_META = "edgeshare_external_tag"
DATA_OPEN_META = "edgeshare_data_open"

# Path components LoRA wrappers insert around the wrapped layer (edgeshare's LoRALinear uses
# "base"; PEFT uses "base_layer" and prefixes "base_model.model.").
DEFAULT_WRAPPER_COMPONENTS: Tuple[str, ...] = ("base", "base_layer")
DEFAULT_WRAPPER_PREFIXES: Tuple[str, ...] = ("base_model.model.",)


@dataclasses.dataclass(frozen=True)
class DataPlacement:
    """Where one weight goes.

    Attributes:
      key: the named-data key.
      external_tag: None to keep it with the program; else the .ptd tag ("foundation").
      open: external data the runtime may rebind to another file's bytes under the same key
        (Method::rebind_data: a swappable adapter). The program records no digest for it, and no
        delegate packs it (the XNNPACK partitioner leaves the nodes reading it to kernels). False
        pins the bytes by their SHA-256 (the foundation). Only meaningful with an external_tag.
    """

    key: str
    external_tag: Optional[str] = None
    open: bool = False

    def __post_init__(self) -> None:
        if self.open and self.external_tag is None:
            raise ValueError(f"DataPlacement '{self.key}': open data needs an external tag (a .ptd to rebind)")


def program_key(method: str, name: str) -> str:
    """The key of a weight the program keeps: "<method>/<name>"."""
    return f"{method}/{name}"


def canonical_name(
    name: str,
    wrapper_components: Iterable[str] = DEFAULT_WRAPPER_COMPONENTS,
    wrapper_prefixes: Iterable[str] = DEFAULT_WRAPPER_PREFIXES,
) -> str:
    """Removes LoRA-wrapper path components from a parameter name.

    "layers.0.base.weight" -> "layers.0.weight"; "base_model.model.q.base_layer.weight" -> "q.weight".

    Args:
      name: a state-dict name.
      wrapper_components: path components to drop wherever they appear (not the last one).
      wrapper_prefixes: prefixes to drop.

    Returns:
      The name the bare foundation model gives the same weight.
    """
    for prefix in wrapper_prefixes:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    parts = name.split(".")
    drop = set(wrapper_components)
    kept = [p for p in parts[:-1] if p not in drop] + parts[-1:]
    return ".".join(kept)


class DataPolicy:
    """Decides the placement of each weight. Subclass and override place()."""

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        """Returns where a weight goes.

        Args:
          method: the method the weight belongs to.
          name: its state-dict name in that method's module.
          tensor: its value.

        Returns:
          A placement, or None to keep it inline in the program.
        """
        raise NotImplementedError

    def __call__(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        return self.place(method, name, tensor)


class InlineDataPolicy(DataPolicy):
    """Covers nothing: every weight stays with its program (the default of to_edge)."""

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        return None


class CallableDataPolicy(DataPolicy):
    """Wraps a function (method, name, tensor) -> DataPlacement | str tag | None.

    A returned str is an external tag; the key is then the canonical name.
    """

    def __init__(self, fn: Callable[[str, str, torch.Tensor], Union[DataPlacement, str, None]]) -> None:
        if not callable(fn):
            raise TypeError(f"CallableDataPolicy needs a callable, got {type(fn).__name__}")
        self._fn = fn

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        result = self._fn(method, name, tensor)
        if result is None or isinstance(result, DataPlacement):
            return result
        if isinstance(result, str):
            return DataPlacement(canonical_name(name), result)
        raise TypeError(
            f"data policy returned {type(result).__name__} for '{name}' in method '{method}'; "
            "expected DataPlacement, str or None"
        )


class PatternDataPolicy(DataPolicy):
    """Rules (regex, tag) tried in order against each name; the first match decides.

    A rule's tag None keeps the weight with the program (key "<method>/<name>"); a tag puts it in
    <tag>.ptd under its canonical name. Names no rule matches stay inline.
    """

    def __init__(
        self,
        rules: Sequence[Tuple[Union[str, Pattern[str]], Optional[str]]],
        wrapper_components: Iterable[str] = DEFAULT_WRAPPER_COMPONENTS,
    ) -> None:
        self._rules = [(re.compile(p) if isinstance(p, str) else p, tag) for p, tag in rules]
        self._wrappers = tuple(wrapper_components)

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        for pattern, tag in self._rules:
            if pattern.search(name):
                if tag is None:
                    return DataPlacement(program_key(method, name), None)
                return DataPlacement(canonical_name(name, self._wrappers), tag)
        return None


class LoraDataPolicy(PatternDataPolicy):
    """The name-based LoRA policy (export_lora's default is FoundationDataPolicy, by identity).

    Names containing "lora" (case-insensitive) stay with their program; every other weight goes to
    <foundation_tag>.ptd under its canonical name (LoRA wrapper components removed).
    """

    def __init__(
        self,
        foundation_tag: str = "foundation",
        adapter_pattern: str = r"(?i)lora",
        wrapper_components: Iterable[str] = DEFAULT_WRAPPER_COMPONENTS,
    ) -> None:
        super().__init__([(adapter_pattern, None), (r".", foundation_tag)], wrapper_components)
        self.foundation_tag = foundation_tag


_Signature = Tuple[torch.dtype, Tuple[int, ...]]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when a and b view the same elements of one storage (one tensor under two names)."""
    if a.device != b.device or a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    if a.storage_offset() != b.storage_offset():
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def foundation_tensors(foundation: nn.Module) -> Dict[str, torch.Tensor]:
    """The bare foundation's tensors by name: its state dict, then non-persistent buffers.

    Tied weights appear under each of their names (state_dict keeps duplicates).
    """
    tensors: Dict[str, torch.Tensor] = dict(foundation.state_dict(keep_vars=True))
    for name, buf in foundation.named_buffers(remove_duplicate=False):
        tensors.setdefault(name, buf)
    return {k: v.detach() for k, v in tensors.items() if isinstance(v, torch.Tensor)}


class FoundationDataPolicy(DataPolicy):
    """Foundation weights by identity, not by name.

    A weight whose dtype, shape and bytes equal a tensor of the bare foundation goes to
    <foundation_tag>.ptd under that tensor's foundation name; every other weight stays with its
    program (key "<method>/<name>"). Equal foundation tensors (an lm_head tied to the embedding,
    or two equal copies) share one key, the first of their names in state-dict order, so their
    bytes are stored once. A weight's key and bytes therefore depend on the foundation alone, not
    on how an adapter model names or wraps it: every export writes the same entry for it.

    Matching is cheap for large models: candidates are grouped by (dtype, shape); a weight that
    shares storage with a candidate matches at once; otherwise SHA-256 digests are compared, each
    foundation tensor's computed at most once.

    Args:
      foundation: the bare foundation model, or its tensors by name.
      foundation_tag: the .ptd tag of foundation weights.
    """

    def __init__(
        self,
        foundation: Union[nn.Module, Mapping[str, torch.Tensor]],
        foundation_tag: str = "foundation",
    ) -> None:
        if isinstance(foundation, nn.Module):
            tensors = foundation_tensors(foundation)
        elif isinstance(foundation, Mapping):
            tensors = {k: v.detach() for k, v in foundation.items()}
        else:
            raise TypeError(
                f"FoundationDataPolicy needs an nn.Module or a dict of tensors, got {type(foundation).__name__}"
            )
        self.foundation_tag = foundation_tag
        self._groups: Dict[_Signature, List[Tuple[str, torch.Tensor]]] = {}
        for name, tensor in tensors.items():
            self._groups.setdefault(self._signature(tensor), []).append((name, tensor))
        # Per group, digest -> first name with those bytes; filled on the group's first lookup.
        self._digests: Dict[_Signature, Dict[bytes, str]] = {}
        self._name_digests: Dict[str, bytes] = {}

    @staticmethod
    def _signature(tensor: torch.Tensor) -> _Signature:
        return tensor.dtype, tuple(int(d) for d in tensor.shape)

    def _digest_index(self, signature: _Signature) -> Dict[bytes, str]:
        index = self._digests.get(signature)
        if index is None:
            index = {}
            for name, tensor in self._groups[signature]:
                digest = tensor_digest(tensor)
                self._name_digests[name] = digest
                index.setdefault(digest, name)
            self._digests[signature] = index
        return index

    def foundation_key(self, tensor: torch.Tensor) -> Optional[str]:
        """The foundation key holding tensor's dtype, shape and bytes, or None.

        Args:
          tensor: a weight of an adapter model.

        Returns:
          The first foundation name (state-dict order) whose tensor equals it byte for byte.
        """
        signature = self._signature(tensor)
        group = self._groups.get(signature)
        if not group:
            return None
        index = self._digest_index(signature)
        tensor = tensor.detach()
        for name, candidate in group:
            if _same_storage(candidate, tensor):
                # Skips hashing the weight; the key is still the first name with these bytes.
                return index[self._name_digests[name]]
        return index.get(tensor_digest(tensor))

    def place(self, method: str, name: str, tensor: torch.Tensor) -> Optional[DataPlacement]:
        key = self.foundation_key(tensor)
        if key is None:
            return DataPlacement(program_key(method, name), None)
        return DataPlacement(key, self.foundation_tag)
