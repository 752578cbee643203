"""The LoRA options PEFT saves in adapter_config.json: which export, and what some of them need.

Exported as PEFT computes them (the LoRA layers run as PEFT's own code): rsLoRA (use_rslora),
rank_pattern / alpha_pattern, layers_to_transform / layers_pattern, lora_bias, fan_in_fan_out,
modules_to_save (the adapter's copy of a module replaces the foundation's in its program only),
and trained base biases (bias "lora_only" / "all"). A trained bias of a foundation layer is kept
apart from the foundation's bias (models.lora.LinearWithBiasDelta): the layer's weight and bias stay
the foundation's, packed once for every program, and the adapter adds the difference.

DoRA (use_dora) on linear layers exports folded (fold_dora): its magnitude over the column norm is
a constant at inference, folded into the adapter's data at export. LoRA on embeddings exports as
PEFT computes it.

Refused before anything is exported, naming the option: the ones in REFUSED_OPTIONS, LoRA on
convolution layers and DoRA other than on nn.Linear layers (found when the adapter is loaded,
before any lowering).

    check_lora_options("chat", "chat/adapter_config.json", config)    # before loading
    protect_foundation(copy, saved_keys)    # before peft loads the file into a shared copy
    keep_foundation_bias(model, base)       # after
"""

from typing import Any, Dict, Iterable, Mapping

import torch
from edgeshare.exir.errors import ExportError
from edgeshare.models.lora import FoldedDoraLinear, LinearWithBiasDelta
from torch import nn

__all__ = [
    "REFUSED_OPTIONS",
    "UnsupportedOptionError",
    "check_lora_layers",
    "check_lora_options",
    "fold_dora",
    "keep_foundation_bias",
    "protect_foundation",
]

# adapter_config.json key -> why it is refused (when its value is set).
REFUSED_OPTIONS: Dict[str, str] = {
    "layer_replication": "layer_replication (layers repeated by the adapter) cannot be exported",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens) cannot be exported",
    "trainable_token_indices": "trainable_token_indices (trained embedding rows) cannot be exported",
    "target_parameters": "LoRA on parameters (target_parameters) cannot be exported",
    "use_qalora": "QALoRA (use_qalora) cannot be exported",
}


class UnsupportedOptionError(ExportError):
    """A PEFT LoRA option the exporter cannot export, naming the adapter and the option."""


def check_lora_options(name: str, config_path: str, config: Mapping[str, Any]) -> None:
    """Refuses the options of REFUSED_OPTIONS that are set, before anything is loaded.

    Raises:
      UnsupportedOptionError: naming the adapter, its adapter_config.json and the option.
    """
    for key, why in REFUSED_OPTIONS.items():
        if config.get(key):
            raise UnsupportedOptionError(f"adapter '{name}' ({config_path}): {why}")


def _uses_dora(module: nn.Module) -> bool:
    from peft.tuners import lora  # noqa: PLC0415

    return isinstance(module, lora.LoraLayer) and any(bool(module.use_dora.get(a)) for a in module.active_adapters)


def check_lora_layers(name: str, model: nn.Module) -> None:
    """Refuses LoRA layers other than on linear and embedding layers (convolutions), and DoRA other
    than on nn.Linear layers, after loading.

    Raises:
      UnsupportedOptionError: naming the adapter, the module and its kind.
    """
    from peft.tuners import lora  # noqa: PLC0415 (only the HF path needs peft)

    for path, module in model.named_modules():
        if not isinstance(module, lora.LoraLayer):
            continue
        kind = type(module).__name__
        if not isinstance(module, (lora.Linear, lora.Embedding)):
            raise UnsupportedOptionError(
                f"adapter '{name}': LoRA on '{path}' ({kind} layer) cannot be exported yet; only LoRA on linear "
                "and embedding layers"
            )
        if _uses_dora(module) and (
            not isinstance(module, lora.Linear) or type(module.get_base_layer()) is not nn.Linear
        ):
            raise UnsupportedOptionError(
                f"adapter '{name}': DoRA (use_dora) on '{path}' ({kind} over "
                f"{type(module.get_base_layer()).__name__}) cannot be exported; only on nn.Linear layers"
            )


def _base_name(saved_key: str) -> str:
    """A saved PEFT key ("base_model.model.model.layers.0.q_proj.base_layer.bias") -> the bare
    model's parameter name ("model.layers.0.q_proj.bias")."""
    name = saved_key[len("base_model.model.") :] if saved_key.startswith("base_model.model.") else saved_key
    return name.replace(".base_layer.", ".")


def protect_foundation(model: nn.Module, saved_keys: Iterable[str]) -> None:
    """Gives model (a shared_copy of the foundation) its own copy of every foundation tensor the
    adapter file holds besides LoRA weights (trained biases, an embedding saved with it), so that
    loading the file writes into the copy, never into the foundation other models share.

    Args:
      model: the shared copy peft will load the adapter into.
      saved_keys: the keys of the adapter's safetensors file.
    """
    for key in saved_keys:
        if "lora_" in key:
            continue
        module_name, _, leaf = _base_name(key).rpartition(".")
        try:
            module = model.get_submodule(module_name)
        except AttributeError:
            continue  # peft reports keys the model lacks
        tensor = module._parameters.get(leaf)
        if tensor is not None:
            setattr(module, leaf, nn.Parameter(tensor.detach().clone(), requires_grad=False))


def keep_foundation_bias(model: nn.Module, base: nn.Module) -> None:
    """Replaces each linear layer of model whose weight is the foundation's but whose bias the adapter
    trained by a LinearWithBiasDelta over the foundation's weight and bias; a bias the adapter left
    equal to the foundation's becomes the foundation's tensor again.

    Args:
      model: the loaded adapter model (its foundation weights are base's tensors).
      base: the foundation model.
    """
    by_weight = {id(m.weight): m for m in base.modules() if type(m) is nn.Linear and m.bias is not None}
    for path, module in list(model.named_modules()):
        found = by_weight.get(id(getattr(module, "weight", None)))
        if type(module) is not nn.Linear or found is None or module.bias is found.bias or module.bias is None:
            continue
        if torch.equal(module.bias, found.bias):
            module.bias = found.bias
            continue
        parent_name, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LinearWithBiasDelta(found.weight, found.bias, module.bias))


def fold_dora(model: nn.Module) -> None:
    """Replaces each DoRA layer of model (PEFT lora.Linear with use_dora) by a FoldedDoraLinear over
    the same foundation layer: DoRA's magnitude over its column norm is a constant at inference.

    Args:
      model: the loaded adapter model (check_lora_layers passed).

    Raises:
      UnsupportedOptionError: a DoRA layer whose lora_B has a bias (lora_bias), naming it.
    """
    for path, module in list(model.named_modules()):
        if not _uses_dora(module):
            continue
        adapter = module.active_adapters[0]
        base = module.get_base_layer()
        lora_a, lora_b = module.lora_A[adapter], module.lora_B[adapter]
        if lora_b.bias is not None:
            raise UnsupportedOptionError(f"DoRA with lora_bias on '{path}' cannot be exported")
        scaling = float(module.scaling[adapter])
        with torch.no_grad():
            a, b = lora_a.weight.double(), lora_b.weight.double()
            norm = torch.linalg.norm(base.weight.double() + scaling * (b @ a), dim=1)
            scale = module.lora_magnitude_vector[adapter].weight.double().reshape(-1) / norm
            folded = FoldedDoraLinear(base, a.float(), (b * (scale * scaling)[:, None]).float(), scale.float())
        parent_name, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, folded)
