"""edgeshare's ahead-of-time pipeline: export, partition, lower, emit and serialize .pte/.ptd.

Without torch (the runtime-only wheel) only the file readers and writers of exir._serialize are
usable, which edgeshare-inspect reads with: the pipeline's names below then say what is missing.
"""

try:
    import torch  # noqa: F401 (whether the pipeline can be imported at all)
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    _PIPELINE = False
else:
    _PIPELINE = True

if _PIPELINE:
    from edgeshare.exir.compile_spec import CompileSpec
    from edgeshare.exir.data_policy import (
        CallableDataPolicy,
        DataPlacement,
        DataPolicy,
        FoundationDataPolicy,
        InlineDataPolicy,
        LoraDataPolicy,
        PatternDataPolicy,
        canonical_name,
    )
    from edgeshare.exir.errors import (
        AdapterMismatchError,
        DataPlacementError,
        ExportError,
        LoweringError,
        NamedDataError,
        SerializationError,
        UnsupportedModelError,
    )
    from edgeshare.exir.export import (
        EdgeProgramManager,
        ExecutorchBackendConfig,
        ExecutorchProgramManager,
        to_edge,
    )
    from edgeshare.exir.hf import (
        CausalLMLogits,
        HfInputError,
        UnsupportedAdapterError,
        export_hf_lora,
        export_hf_swappable,
        load_hf_model,
        load_peft_adapter,
    )
    from edgeshare.exir.lora import AdapterNameError
    from edgeshare.exir.lower import BackendDetails, PreprocessResult
    from edgeshare.exir.named_data_store import NamedDataStore, NamedDataStoreOutput
    from edgeshare.exir.partition import DelegationSpec, Partitioner, PartitionResult
    from edgeshare.exir.swappable import SwappableDataPolicy, SwappableExportResult, export_swappable

__all__ = [
    "AdapterMismatchError",
    "AdapterNameError",
    "BackendDetails",
    "CallableDataPolicy",
    "CausalLMLogits",
    "CompileSpec",
    "DataPlacement",
    "DataPlacementError",
    "DataPolicy",
    "DelegationSpec",
    "EdgeProgramManager",
    "ExecutorchBackendConfig",
    "ExecutorchProgramManager",
    "ExportError",
    "FoundationDataPolicy",
    "HfInputError",
    "InlineDataPolicy",
    "LoraDataPolicy",
    "LoweringError",
    "NamedDataError",
    "NamedDataStore",
    "NamedDataStoreOutput",
    "PartitionResult",
    "Partitioner",
    "PatternDataPolicy",
    "PreprocessResult",
    "SerializationError",
    "SwappableDataPolicy",
    "SwappableExportResult",
    "UnsupportedAdapterError",
    "UnsupportedModelError",
    "canonical_name",
    "export_hf_lora",
    "export_hf_swappable",
    "export_swappable",
    "load_hf_model",
    "load_peft_adapter",
    "to_edge",
]


def __getattr__(name: str) -> object:
    """Without torch: says that a pipeline name needs it (with torch every name is imported above)."""
    if name in __all__:
        raise ModuleNotFoundError(
            f"edgeshare.exir.{name} needs torch, which is not installed (the wheel's [export] extra has it)",
            name="torch",
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
