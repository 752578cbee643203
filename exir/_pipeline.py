"""What every LoRA export does, once: lower a model (reusing the lowered program of an equal structure),
gather the shared data file's entries from every program, and write the files atomically.

    lowerer = Lowerer(partitioner, config, example_inputs, dynamic_shapes, extra_methods, say, "foundation")
    lowerer.expect(structure_signature(m) for m in adapter_models)   # which structures recur
    et, edge = lowerer.lower(adapter_model, "adapter 'chat'", policy)
    foundation = SharedData("foundation"); foundation.add("chat", et)
    with OutputFiles(out_dir) as files:
        files.write_bytes("chat.pte", with_foundation_digest(et.buffer, foundation.identity()))
        foundation.write(files, config.tensor_alignment)
        files.commit()        # every file renamed into place, or none
"""

import collections
import contextlib
import dataclasses
import os
import tempfile
from typing import Any, BinaryIO, Callable, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from edgeshare.exir._derive import FoundationGraphs
from edgeshare.exir._repeat import TRACED_LAYERS, RepeatedLayers, matches_eager
from edgeshare.exir._serialize import foundation_identity, with_replaced_data, write_ptd
from edgeshare.exir._weights import module_weights
from edgeshare.exir.data_policy import DataPolicy
from edgeshare.exir.errors import ExportError, UnsupportedModelError
from edgeshare.exir.export import (
    DataFileEntry,
    EdgeProgramManager,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge,
)
from edgeshare.exir.foundation_index import FoundationIndex
from edgeshare.exir.partition import Partitioner
from edgeshare.exir.tensor_layout import tensor_bytes, tensor_digest
from torch import nn

__all__ = [
    "Lowerer",
    "OutputFiles",
    "SharedData",
    "check_out_dir",
    "export_method",
    "structure_signature",
]

Say = Callable[[str], None]


_NOT_PLAIN = object()


def _plain(value: Any) -> Any:
    """A hashable form of a configuration value (numbers, strings, and containers of them; a tensor
    attribute by its identity), or _NOT_PLAIN."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), tensor_digest(value))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in value]
        if any(i is _NOT_PLAIN for i in items):
            return _NOT_PLAIN
        ordered = sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
        return (type(value).__name__, tuple(ordered))
    if isinstance(value, Mapping):
        pairs = [(str(k), _plain(v)) for k, v in value.items()]
        if any(v is _NOT_PLAIN for _, v in pairs):
            return _NOT_PLAIN
        return ("dict", tuple(sorted(pairs)))
    return _NOT_PLAIN


def structure_signature(module: nn.Module) -> Hashable:
    """What decides a model's graph apart from its weights' values: each submodule's name, class and
    plain attributes (a LoRA layer's rank, alpha and scaling; flags), and every weight's name, dtype
    and shape. Two adapter models with equal signatures export to the same graph, so one lowering
    serves both with each one's weights (EdgeProgramManager.with_weights).

    Tensor attributes that are not parameters or buffers (torch.export makes them constants of the
    graph) count with their bytes.

    Args:
      module: an adapter model.

    Returns:
      A hashable signature.
    """
    modules = []
    for name, sub in module.named_modules(remove_duplicate=False):
        attrs = []
        # Dropout does nothing in eval mode: its rate is not part of the graph.
        skip = isinstance(sub, nn.Dropout) and not sub.training
        for key, value in [] if skip else sorted(vars(sub).items()):
            if key in ("_parameters", "_buffers", "_modules"):
                continue
            plain = _plain(value)
            if plain is not _NOT_PLAIN:
                attrs.append((key, plain))
        modules.append((name, type(sub).__module__, type(sub).__qualname__, tuple(attrs)))
    weights = tuple((name, t.dtype, tuple(t.shape)) for name, t in module_weights(module).items())
    return (tuple(modules), weights)


def export_method(
    module: nn.Module, example_inputs: Tuple[Any, ...], what: str, dynamic_shapes: Optional[Any] = None
) -> torch.export.ExportedProgram:
    """torch.export with an error that names what failed.

    Args:
      module: the model.
      example_inputs: its example inputs.
      what: names the model in errors (e.g. "adapter 'lora_a'").
      dynamic_shapes: torch.export's dynamic_shapes (None: every size is static).

    Returns:
      The exported program.

    Raises:
      UnsupportedModelError: torch.export could not trace the model (its error is chained).
    """
    module = module.eval()
    try:
        return torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:  # torch.export raises many types; keep its message.
        raise UnsupportedModelError(f"{what} could not be exported by torch.export: {type(e).__name__}: {e}") from e


@dataclasses.dataclass
class _Lowered:
    """A model's lowered program, kept for the later models of its structure.

    Attributes:
      program: what to_executorch made of it.
      edge: its lowered edge programs.
      weights: method name -> the weights (module_weights) it was lowered with.
      policy: the data policy it was lowered with.
    """

    program: ExecutorchProgramManager
    edge: EdgeProgramManager
    weights: Dict[str, Dict[str, torch.Tensor]]
    policy: DataPolicy

    def rebind(self, weights: Mapping[str, Mapping[str, torch.Tensor]]) -> Optional[ExecutorchProgramManager]:
        """This program over other weights of the same names, dtypes and shapes, when the only
        weights that differ are ones the program holds itself, each as a segment of its own: their
        bytes and digests are replaced in the image (with_replaced_data).

        Args:
          weights: method name -> {name: tensor}, as module_weights gives them.

        Returns:
          The program, or None when it has to be lowered again: a weight that differs lies in a
          data file, shares its bytes with another weight, or is not one segment of the image.
        """
        kept: set = set()
        changed: Dict[bytes, Tuple[torch.Tensor, torch.Tensor]] = {}
        for method, old_weights in self.weights.items():
            new_weights = weights.get(method, {})
            for name, old in old_weights.items():
                new = new_weights.get(name)
                if new is None or new.dtype != old.dtype or new.shape != old.shape:
                    return None
                old_digest, new_digest = tensor_digest(old), tensor_digest(new)
                if old_digest == new_digest:
                    kept.add(old_digest)
                elif tensor_digest(changed.setdefault(old_digest, (old, new))[1]) != new_digest:
                    return None  # one tensor's bytes before, two after: a segment each
        new_digests = [tensor_digest(new) for _, new in changed.values()]
        external = {e.digest for entries in self.program.data_entries.values() for e in entries.values()}
        if (
            kept & changed.keys()
            or external & changed.keys()
            or len(set(new_digests)) != len(new_digests)
            or set(new_digests) & (kept | changed.keys())
        ):
            return None
        replacements = {
            d: (tensor_bytes(old), tensor_bytes(new), tensor_digest(new)) for d, (old, new) in changed.items()
        }
        buffer = with_replaced_data(self.program.buffer, replacements)
        if buffer is None:
            return None
        return ExecutorchProgramManager(
            buffer,
            self.program.data_entries,
            self.program.methods,
            self.program.tensor_alignment,
            self.program.named_data,
        )


class _NotRepeated(Exception):
    """A method whose layers are not copies of one another (its name is the message)."""


class Lowerer:
    """Exports and lowers models with one set of options; a structure seen before is not exported,
    decomposed or lowered again: its lowered program is reused over the new model's weights, or,
    when their bytes cannot simply replace the earlier ones (see _Lowered.rebind), its edge programs
    are lowered again.

    Args:
      partitioner: the partitioner to delegate with, or None.
      config: serialization options (None: defaults).
      example_inputs: "forward"'s example inputs.
      dynamic_shapes: "forward"'s torch.export dynamic_shapes.
      extra_methods: more methods of every program (objects with name, wrap, example_inputs,
        dynamic_shapes).
      say: called with one line per step.
      foundation_tag: the tag of the foundation data file the programs are exported over: each
        program records its identity (EdgeProgramManager.to_executorch), set to the whole file's
        when it is written (with_foundation_digest).
      repeat_layers: trace the first layers of a model whose layers repeat and copy the others in
        its graph (_repeat.RepeatedLayers); False traces every layer.
    """

    def __init__(
        self,
        partitioner: Optional[Partitioner],
        config: Optional[ExecutorchBackendConfig],
        example_inputs: Sequence[Any],
        dynamic_shapes: Optional[Any],
        extra_methods: Sequence[Any],
        say: Say,
        foundation_tag: Optional[str] = None,
        repeat_layers: bool = True,
    ) -> None:
        self.partitioner = partitioner
        self.foundation_tag = foundation_tag
        self.config = config or ExecutorchBackendConfig()
        self.example_inputs = tuple(example_inputs)
        self.dynamic_shapes = dynamic_shapes
        self.extra_methods = list(extra_methods)
        self.say = say
        self.repeat_layers = repeat_layers
        self._pending: collections.Counter = collections.Counter()
        self._templates: Dict[Hashable, EdgeProgramManager] = {}
        self._lowered: Dict[Hashable, _Lowered] = {}
        self._foundation: Optional[FoundationGraphs] = None
        # What the partitioner chose for weights' formats, over every program lowered.
        self.fallbacks: Dict[str, str] = {}
        self.gathered_formats: Dict[str, str] = {}

    def expect(self, signatures: Iterable[Hashable]) -> None:
        """Announces the structures lower() will be asked for, so that a structure's first lowering
        keeps its edge programs only when another model of it follows."""
        self._pending.update(signatures)

    def method_modules(self, module: nn.Module) -> Dict[str, nn.Module]:
        """Method name -> the module it exports ("forward": module itself)."""
        return {"forward": module, **{m.name: m.wrap(module) for m in self.extra_methods}}

    def edge(
        self,
        module: nn.Module,
        what: str,
        policy: DataPolicy,
        signature: Optional[Hashable] = None,
        foundation: bool = False,
    ):
        """The edge programs of module's methods: exported and decomposed, an earlier model's of the
        same signature over module's weights, or the foundation's with module's low-rank products
        (_derive.FoundationGraphs; the foundation's are kept when foundation is set).

        Raises:
          UnsupportedModelError: a method cannot be exported.
        """
        template = self._templates.get(signature) if signature is not None else None
        if signature is not None:
            self._pending[signature] -= 1
        if template is not None:
            self.say(f"{what}: the structure of an earlier program, over its own weights")
            weights = {m: module_weights(mod) for m, mod in self.method_modules(module).items()}
            if self._pending[signature] <= 0:
                del self._templates[signature]
            return template.with_weights(weights, policy)
        sites = None
        if self._foundation is not None and not foundation:
            modules = self.method_modules(module)
            sites = self._foundation.sites(modules)
        if sites is not None:
            self.say(f"{what}: the foundation's edge programs with its low-rank products")
            derived = self._foundation.derive(modules, sites, policy)
            if derived is not None:
                self._keep_template(derived, policy, signature)
                return derived
            self.say(f"{what}: its graph is not the foundation's with its low-rank products; exporting it")
        repeat = RepeatedLayers.find(module) if self.repeat_layers else None
        edge = self._traced(module, what, policy, repeat) if repeat is not None else None
        if edge is None:
            edge = self._traced(module, what, policy, None)
        if foundation:
            self._foundation = FoundationGraphs(edge, self.method_modules(module))
        self._keep_template(edge, policy, signature)
        return edge

    def _inputs(self, method: str) -> Tuple[Tuple[Any, ...], Optional[Any]]:
        """A method's example inputs and dynamic_shapes."""
        if method == "forward":
            return self.example_inputs, self.dynamic_shapes
        extra = next(m for m in self.extra_methods if m.name == method)
        return tuple(extra.example_inputs), extra.dynamic_shapes

    def _traced(
        self, module: nn.Module, what: str, policy: DataPolicy, repeat: Optional[RepeatedLayers]
    ) -> Optional[EdgeProgramManager]:
        """module's methods exported and decomposed; with repeat, only its first layers are traced
        and the others copied in the graph (None when they turn out not to be copies)."""
        modules = self.method_modules(module)
        part = f", {TRACED_LAYERS} of its {len(repeat.layers)} layers" if repeat is not None else ""
        programs = {}
        with repeat.truncated() if repeat is not None else contextlib.nullcontext():
            for method, mod in modules.items():
                label = what if method == "forward" else f"{what}, method '{method}'"
                self.say(f"exporting {label} (torch.export{part})")
                example, dynamic = self._inputs(method)
                programs[method] = export_method(mod, example, label, dynamic)
        if repeat is None:
            return to_edge(programs, data_policy=policy)

        def expand(method: str, ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
            mod = modules[method]
            prefix = repeat.prefix(mod)
            whole = repeat.expand(ep, prefix, module_weights(mod)) if prefix is not None else None
            if whole is None or not matches_eager(whole, mod, self._inputs(method)[0]):
                raise _NotRepeated(method)
            return whole

        try:
            return to_edge(programs, data_policy=policy, rewrite=expand)
        except _NotRepeated as e:
            self.say(f"{what}: method '{e}' is not its first layers repeated; exporting every layer")
            return None

    def _keep_template(self, edge: EdgeProgramManager, policy: DataPolicy, signature: Optional[Hashable]) -> None:
        if signature is not None and self._pending[signature] > 0:
            # Kept before partitioning tags it; with_weights copies it for each later model.
            eps = {m: edge.exported_program(m) for m in edge.methods}
            own = {m: {**ep.state_dict, **ep.constants} for m, ep in eps.items()}
            self._templates[signature] = edge.with_weights(own, policy)

    def lower(
        self,
        module: nn.Module,
        what: str,
        policy: DataPolicy,
        signature: Optional[Hashable] = None,
        foundation: bool = False,
    ) -> Tuple[ExecutorchProgramManager, EdgeProgramManager]:
        """Exports (or reuses) and lowers module's methods. With foundation set, module is the
        foundation: its edge programs are kept to derive later adapter models' from (see edge()).

        Returns:
          The serialized program and the lowered edge programs. When an earlier model's lowered
          program was reused, those are the earlier model's: the same graphs, names and keys, over
          its weights (what reads them for more than their structure must lower the model itself).
        """
        kept = self._lowered.get(signature) if signature is not None else None
        if kept is not None and kept.policy is policy:
            weights = {m: module_weights(mod) for m, mod in self.method_modules(module).items()}
            program = kept.rebind(weights)
            if program is not None:
                self.say(f"{what}: the lowered program of an earlier model, over its own weights")
                self._pending[signature] -= 1
                if self._pending[signature] <= 0:
                    self._templates.pop(signature, None)
                    del self._lowered[signature]
                return program, kept.edge
        edge = self.edge(module, what, policy, signature, foundation)
        program, lowered = self.lower_edge(edge, what)
        if signature is not None:
            if self._pending[signature] <= 0:
                self._lowered.pop(signature, None)
            elif signature not in self._lowered:
                weights = {m: module_weights(mod) for m, mod in self.method_modules(module).items()}
                self._lowered[signature] = _Lowered(program, lowered, weights, policy)
        return program, lowered

    def lower_edge(self, edge: EdgeProgramManager, what: str) -> Tuple[ExecutorchProgramManager, EdgeProgramManager]:
        """Partitions, lowers and serializes edge programs."""
        self.say(f"lowering {what}")
        if self.partitioner is not None:
            edge = edge.to_backend(self.partitioner)
            self.fallbacks.update(edge.fallbacks)
            self.gathered_formats.update(edge.gathered_formats)
        return edge.to_executorch(self.config, self.foundation_tag), edge


class SharedData:
    """The entries of one shared data file (foundation.ptd), gathered from every program that uses it.

    Args:
      tag: the data file's tag (its file stem).
      reference: if set, the program (stem) whose entries are the file; every other program's
        entries must be among them (the bare foundation's program holds every foundation weight).
      index: if set, the file was written by another export and is described by this index: every
        program's entries must be among its keys with equal digests, the programs record its
        identity, and this export writes no file (reference must then be None).
    """

    def __init__(self, tag: str, reference: Optional[str] = None, index: Optional[FoundationIndex] = None) -> None:
        if index is not None and reference is not None:
            raise ExportError(f"{tag}.ptd is either exported here (program '{reference}') or given by its index")
        self.tag = tag
        self.reference = reference
        self.index = index
        self.entries: Dict[str, DataFileEntry] = {}
        self._owners: Dict[str, str] = {}

    def add(self, stem: str, program: ExecutorchProgramManager) -> None:
        """Adds one program's entries of this file.

        Raises:
          ExportError: the program puts nothing in the file, or other bytes under a key than an
            earlier program (or a key the reference program lacks).
        """
        entries = program.data_entries.get(self.tag)
        if not entries:
            raise ExportError(f"program '{stem}' put no weight in {self.tag}.ptd")
        if self.index is not None:
            self._add_indexed(stem, entries, self.index)
            return
        for key, entry in entries.items():
            known = self.entries.get(key)
            if known is None:
                if self.reference is not None and self.entries and stem != self.reference:
                    raise ExportError(
                        f"program '{stem}' put a key under {self.tag}.ptd key '{key}' that the foundation program "
                        f"'{self.reference}' does not"
                    )
                self.entries[key] = entry
                self._owners[key] = stem
            elif known.digest != entry.digest:
                if self.reference is not None:
                    raise ExportError(
                        f"program '{stem}' put other bytes under {self.tag}.ptd key '{key}' that the foundation "
                        f"program '{self.reference}' does not"
                    )
                raise ExportError(
                    f"programs '{self._owners[key]}' and '{stem}' put different bytes under {self.tag}.ptd key '{key}'"
                )
            elif entry.alignment > known.alignment:
                self.entries[key] = known._replace(alignment=entry.alignment)

    def _add_indexed(self, stem: str, entries: Mapping[str, DataFileEntry], index: FoundationIndex) -> None:
        for key, entry in entries.items():
            digest = index.digests.get(key)
            if digest is None:
                raise ExportError(
                    f"program '{stem}' puts {self.tag}.ptd key '{key}' that the given foundation lacks (is it "
                    "another model, or exported with other options?)"
                )
            if digest != entry.digest:
                raise ExportError(
                    f"program '{stem}' puts other bytes under {self.tag}.ptd key '{key}' than the given foundation "
                    "(is it another model, or exported with other options?)"
                )
            self.entries.setdefault(key, entry)
            self._owners.setdefault(key, stem)

    def identity(self) -> bytes:
        """The file's identity (ptd.foundation_identity), from the digests its entries carry: what
        the programs and adapter files exported over it record."""
        if self.index is not None:
            return self.index.identity
        return foundation_identity(self.entries)

    def foundation_index(self) -> FoundationIndex:
        """The file's index: the given one, or that of the entries gathered here."""
        return self.index if self.index is not None else FoundationIndex.of(self.entries)

    def write(self, files: "OutputFiles", tensor_alignment: int) -> str:
        """Streams the file into files (as <tag>.ptd); returns its final path."""
        return files.write(f"{self.tag}.ptd", lambda f: write_ptd(f, self.entries, tensor_alignment))


def check_out_dir(out_dir: str) -> None:
    """Checks that out_dir is (or can be made as) a writable directory, before any heavy work.

    Raises:
      ExportError: out_dir is a file, lies under a file, or cannot be written (naming it).
    """
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a path, got {type(out_dir).__name__}")
    path = os.path.abspath(out_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ExportError(f"--out '{out_dir}' is a file, not a directory")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ExportError(f"--out '{out_dir}': '{existing}' is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ExportError(f"--out '{out_dir}': '{existing}' is not writable")


class OutputFiles:
    """Files of one export, written under temporary names in out_dir and renamed into place only by
    commit(); leaving the block without commit (an error) removes them, so nothing half-written or
    partial is left under their names.

    Args:
      out_dir: the folder (created if missing).
      say: called with one line per file.
    """

    def __init__(self, out_dir: str, say: Say = lambda line: None) -> None:
        self.out_dir = out_dir
        self.say = say
        self.sizes: Dict[str, int] = {}
        self._temps: List[Tuple[str, str]] = []
        self._created = False

    def __enter__(self) -> "OutputFiles":
        self._created = not os.path.isdir(self.out_dir)
        try:
            os.makedirs(self.out_dir, exist_ok=True)
        except OSError as e:
            raise ExportError(f"cannot create the output folder '{self.out_dir}': {e.strerror or e}") from e
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._temps:
            return
        for temp, _ in self._temps:
            if os.path.exists(temp):
                os.unlink(temp)
        self._temps = []
        if self._created and not os.listdir(self.out_dir):
            os.rmdir(self.out_dir)  # a failed export leaves no trace of itself

    def write(self, name: str, fill: Callable[[BinaryIO], Any]) -> str:
        """Writes out_dir/name (under a temporary name until commit) with fill(file); returns its path.

        Raises:
          ExportError: the file cannot be written (a full disk, permissions), naming it.
        """
        path = os.path.join(self.out_dir, name)
        self.say(f"writing {path}")
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.out_dir)
        self._temps.append((temp, path))
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
                size = f.tell()
        except OSError as e:
            raise ExportError(f"cannot write {path}: {e.strerror or e}") from e
        self.sizes[path] = size
        return path

    def write_bytes(self, name: str, data: bytes) -> str:
        """write() of a bytes object."""
        return self.write(name, lambda f: f.write(data))

    def commit(self) -> Dict[str, int]:
        """Renames every file into place; returns path -> size in bytes."""
        umask = os.umask(0)
        os.umask(umask)
        for temp, path in self._temps:
            os.chmod(temp, 0o666 & ~umask)  # as open() would have made it
            os.replace(temp, path)
        self._temps = []
        return dict(self.sizes)
