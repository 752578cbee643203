"""edgeshare's ahead-of-time pipeline: export, partition, lower, emit and serialize .pte/.ptd."""

from edgeshare.exir._pipeline import check_out_dir
from edgeshare.exir._serialize import PtdFile, PteFile, deserialize_ptd, deserialize_pte
from edgeshare.exir._serialize.ptd import read_ptd_index
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
    "FC_FORMATS",
    "AdapterMismatchError",
    "AdapterNameError",
    "AdapterOptions",
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
    "export_hf_lora",
    "export_hf_swappable",
    "export_swappable",
    "fc_format",
    "load_hf_model",
    "load_peft_adapter",
    "read_ptd_index",
    "to_edge",
]
