"""Tiny Hugging Face causal LMs and PEFT LoRA adapters, made from configs (random seeded weights).

Nothing is downloaded: each family's config is built here (2 layers, hidden 64, vocab 256) and the
weights come from a seeded generator. save_tiny_lora writes what a user has on disk after
`save_pretrained`: a model directory (config.json + model.safetensors) and one PEFT adapter
directory per adapter (adapter_config.json + adapter_model.safetensors), the adapters of different
target modules and ranks, with non-zero lora_B so that each adapter changes the logits.

    from edgeshare.models.hf_tiny import save_tiny_lora

    files = save_tiny_lora("llama", "/tmp/tiny")   # /tmp/tiny/model, /tmp/tiny/a, /tmp/tiny/b
    # export_lora --hf-model files.model_dir --adapter a=files.adapter_dirs["a"] ...
"""

import copy
import dataclasses
import os
from typing import Callable, Dict, Optional, Sequence, Tuple

import peft
import torch
import transformers
from torch import nn

__all__ = [
    "FAMILIES",
    "AdapterSpec",
    "TinyLoraFiles",
    "make_tiny_model",
    "save_peft_adapter",
    "save_tiny_lora",
    "tiny_config",
]

VOCAB = 256
HIDDEN = 64

_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


@dataclasses.dataclass(frozen=True)
class AdapterSpec:
    """One PEFT LoRA adapter of a family: what it adapts and how.

    Attributes:
      target_modules: the module names PEFT wraps (e.g. ["q_proj", "v_proj"]).
      rank: the LoRA rank r.
      alpha: the LoRA alpha (the update is scaled by alpha / r).
    """

    target_modules: Tuple[str, ...]
    rank: int
    alpha: float


@dataclasses.dataclass(frozen=True)
class _Family:
    config: Callable[[], transformers.PretrainedConfig]
    adapters: Dict[str, AdapterSpec]
    fan_in_fan_out: bool = False  # GPT-2's Conv1D stores weights [in, out]


def _gpt2() -> transformers.PretrainedConfig:
    return transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=2,
        n_head=4,
        n_positions=256,
        n_inner=128,
        bos_token_id=0,
        eos_token_id=0,
    )


_LLAMA_LIKE = {
    "a": AdapterSpec(("q_proj", "v_proj"), 4, 8.0),
    "b": AdapterSpec(("k_proj", "o_proj", "gate_proj", "down_proj"), 8, 8.0),
}

FAMILIES: Dict[str, _Family] = {
    "llama": _Family(lambda: transformers.LlamaConfig(**_COMMON, tie_word_embeddings=True), _LLAMA_LIKE),
    "qwen2": _Family(lambda: transformers.Qwen2Config(**_COMMON, tie_word_embeddings=True), _LLAMA_LIKE),
    "mistral": _Family(lambda: transformers.MistralConfig(**_COMMON), _LLAMA_LIKE),
    "phi3": _Family(
        lambda: transformers.Phi3Config(**_COMMON, pad_token_id=0, eos_token_id=2),
        {"a": AdapterSpec(("qkv_proj",), 4, 8.0), "b": AdapterSpec(("o_proj", "gate_up_proj"), 8, 8.0)},
    ),
    "gemma": _Family(lambda: transformers.GemmaConfig(**_COMMON, head_dim=16), _LLAMA_LIKE),
    "gpt2": _Family(
        _gpt2,
        {"a": AdapterSpec(("c_attn",), 4, 8.0), "b": AdapterSpec(("c_proj", "c_fc"), 8, 8.0)},
        fan_in_fan_out=True,
    ),
}


def _family(name: str) -> _Family:
    family = FAMILIES.get(name)
    if family is None:
        raise ValueError(f"unknown model family '{name}' (families: {', '.join(sorted(FAMILIES))})")
    return family


def tiny_config(family: str) -> transformers.PretrainedConfig:
    """The tiny config of a family ("llama", "qwen2", "mistral", "phi3", "gemma", "gpt2")."""
    return _family(family).config()


def make_tiny_model(
    family: str,
    seed: int = 0,
    initializer_range: Optional[float] = None,
    vocab_size: Optional[int] = None,
    layers: Optional[int] = None,
) -> nn.Module:
    """A causal LM of the family with seeded random weights, in eval mode, float32.

    vocab_size (None: VOCAB) widens the vocabulary, e.g. to fit a trained tokenizer (tiny_tokenizer).
    layers (None: 2) sets the number of decoder layers.

    initializer_range (None: the config's 0.02) sets the weights' std: with 0.02 the tiny models
    repeat one token when generating; about 0.2 makes greedy generation attend to its history and
    give varied tokens (generation tests need that).

    transformers initialises every bias to zeros and every norm weight to ones (or zeros): equal
    bytes a trained checkpoint never has, which the identity policy would store under one key. Each
    1-D parameter gets seeded noise so that every weight is distinct, as in a real model.
    """
    config = tiny_config(family)
    if initializer_range is not None:
        config.initializer_range = initializer_range
    if vocab_size is not None:
        config.vocab_size = vocab_size
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=g) * 0.05)
    return model


def _seed_lora(model: nn.Module, seed: int) -> None:
    """Draws every lora_A / lora_B weight from a seeded normal (PEFT's default leaves lora_B zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.1)


def save_peft_adapter(
    base: nn.Module,
    adapter_dir: str,
    target_modules: Sequence[str],
    rank: int,
    alpha: float,
    seed: int,
    fan_in_fan_out: bool = False,
) -> nn.Module:
    """Writes a PEFT LoRA adapter of base (adapter_config.json + adapter_model.safetensors).

    Args:
      base: the model the adapter is made for (not modified: PEFT wraps a copy).
      adapter_dir: the directory to write.
      target_modules: the modules to adapt.
      rank: the LoRA rank.
      alpha: the LoRA alpha.
      seed: seeds the low-rank weights (lora_B is non-zero).
      fan_in_fan_out: True for layers storing [in, out] weights (GPT-2's Conv1D).

    Returns:
      The PEFT model the adapter was saved from (eval mode).
    """
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=list(target_modules),
        fan_in_fan_out=fan_in_fan_out,
        task_type="CAUSAL_LM",
    )
    model = peft.get_peft_model(copy.deepcopy(base), config).eval()
    _seed_lora(model, seed)
    model.save_pretrained(adapter_dir)
    return model


@dataclasses.dataclass(frozen=True)
class TinyLoraFiles:
    """What save_tiny_lora wrote.

    Attributes:
      model_dir: the model (config.json + model.safetensors).
      adapter_dirs: adapter name -> its PEFT directory.
    """

    model_dir: str
    adapter_dirs: Dict[str, str]


def save_tiny_lora(
    family: str,
    out_dir: str,
    seed: int = 0,
    initializer_range: Optional[float] = None,
    vocab_size: Optional[int] = None,
    layers: Optional[int] = None,
) -> TinyLoraFiles:
    """Writes a tiny model of the family and its two LoRA adapters "a" and "b" under out_dir.

    "a" and "b" adapt different modules with different ranks (see FAMILIES).

    Args:
      family: the model family.
      out_dir: the directory to write model/, a/ and b/ in.
      seed: seeds the model; the adapters use seed + 1 and seed + 2.
      initializer_range: the model weights' std (see make_tiny_model).
      vocab_size: the vocabulary (None: VOCAB; see make_tiny_model).
      layers: the decoder layers (None: 2).

    Returns:
      The directories written.
    """
    spec = _family(family)
    model = make_tiny_model(family, seed, initializer_range, vocab_size, layers)
    model_dir = os.path.join(out_dir, "model")
    model.save_pretrained(model_dir)
    adapter_dirs: Dict[str, str] = {}
    for i, (name, adapter) in enumerate(sorted(spec.adapters.items())):
        path = os.path.join(out_dir, name)
        save_peft_adapter(
            model, path, adapter.target_modules, adapter.rank, adapter.alpha, seed + 1 + i, spec.fan_in_fan_out
        )
        adapter_dirs[name] = path
    return TinyLoraFiles(model_dir, adapter_dirs)


def save_twin_adapter(
    family: str,
    out_dir: str,
    name: str = "c",
    seed: int = 0,
    initializer_range: Optional[float] = None,
    vocab_size: Optional[int] = None,
) -> str:
    """Writes adapter `name` with adapter "a"'s structure (modules, rank, alpha) and other weights.

    The two can be exported for swapping on one loaded program (exir.export_hf_swappable). The
    model is rebuilt from (family, seed, initializer_range, vocab_size): pass what save_tiny_lora was
    given.

    Returns:
      The adapter's directory, out_dir/name.
    """
    spec = _family(family)
    a = spec.adapters["a"]
    path = os.path.join(out_dir, name)
    model = make_tiny_model(family, seed, initializer_range, vocab_size)
    save_peft_adapter(model, path, a.target_modules, a.rank, a.alpha, seed + 7, spec.fan_in_fan_out)
    return path
