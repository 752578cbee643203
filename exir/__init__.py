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

# Reading and writing the files needs no torch.
from edgeshare.exir._serialize import PtdFile, PteFile, deserialize_ptd, deserialize_pte
from edgeshare.exir._serialize.ptd import read_ptd_index

if _PIPELINE:
    from edgeshare.exir._pipeline import check_out_dir
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
    from edgeshare.exir.export_options import AdapterOptions, ExportOptions, OptionError, QuantizationOptions
    from edgeshare.exir.fc_formats import FC_FORMATS, FcFormat, fc_format
    from edgeshare.exir.hf import (
        BatchExportResult,
        CausalLMLogits,
        HfInputError,
        UnsupportedAdapterError,
        export_hf_batch,
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
    "FC_FORMATS",
    "AdapterMismatchError",
    "AdapterNameError",
    "AdapterOptions",
    "BackendDetails",
    "BatchExportResult",
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
    "ExportOptions",
    "FcFormat",
    "FoundationDataPolicy",
    "HfInputError",
    "InlineDataPolicy",
    "LoraDataPolicy",
    "LoweringError",
    "NamedDataError",
    "NamedDataStore",
    "NamedDataStoreOutput",
    "OptionError",
    "PartitionResult",
    "Partitioner",
    "PatternDataPolicy",
    "PreprocessResult",
    "PtdFile",
    "PteFile",
    "QuantizationOptions",
    "SerializationError",
    "SwappableDataPolicy",
    "SwappableExportResult",
    "UnsupportedAdapterError",
    "UnsupportedModelError",
    "canonical_name",
    "check_out_dir",
    "deserialize_ptd",
    "deserialize_pte",
    "export_hf_batch",
    "export_hf_lora",
    "export_hf_swappable",
    "export_swappable",
    "fc_format",
    "load_hf_model",
    "load_peft_adapter",
    "read_ptd_index",
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
