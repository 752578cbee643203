"""The tiny-LLM benchmark's model: a Llama-family causal LM from a config (seeded random weights,
nothing downloaded; optionally trained for a few steps on offline text, bench/_llm_train.py) and
NUM_ADAPTERS PEFT LoRA adapters (seeded random, or fine-tuned each on its own text when the model
is trained), written as a user has them on disk."""

import copy
import dataclasses
import os
from typing import Dict, Optional, Tuple

import peft
import torch
import transformers
from edgeshare.bench._llm_train import Training, train_llm, train_lora
from edgeshare.models.hf_tiny import save_peft_adapter

__all__ = ["LlmFiles", "LlmSpec", "save_llm"]


@dataclasses.dataclass(frozen=True)
class LlmSpec:
    """What the tiny-LLM case measures (the defaults are the reference case).

    Attributes:
      layers, hidden, intermediate, heads, kv_heads, vocab: the LlamaConfig (grouped-query
        attention: kv_heads < heads).
      tied: the lm_head is the token embedding (SmolLM2) or its own weight (TinyLlama).
      max_seq_len: the programs' token bound (memory is planned for it).
      rank, alpha, targets: every adapter's LoRA structure.
      adapters: how many adapters (seeds 1..adapters).
      trained_steps: AdamW steps on the standard library's docstrings before saving (0: the
        seeded random weights as they are, and seeded random adapters); each adapter is then
        fine-tuned lora_steps() steps on its own part of the text (train_lora).
    """

    layers: int = 4
    hidden: int = 1024
    intermediate: int = 2816
    heads: int = 16
    kv_heads: int = 4
    vocab: int = 32000
    tied: bool = False
    max_seq_len: int = 128
    rank: int = 16
    alpha: float = 32.0
    targets: Tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    adapters: int = 8
    trained_steps: int = 0

    def lora_steps(self) -> int:
        """Each adapter's fine-tuning steps: trained_steps // 5, at least 1 (0: seeded random adapters)."""
        return max(1, self.trained_steps // 5) if self.trained_steps else 0

    def describe(self) -> str:
        """One line for the table."""
        return (
            f"Llama {self.layers} layers, hidden {self.hidden}, intermediate {self.intermediate}, "
            f"{self.heads} heads / {self.kv_heads} kv, vocab {self.vocab}{' tied' if self.tied else ''}, "
            f"max_seq_len {self.max_seq_len}; "
            f"{self.adapters} LoRA r{self.rank} on {','.join(t.split('_')[0] for t in self.targets)}"
            + (
                f"; trained {self.trained_steps} steps on stdlib docstrings, adapters {self.lora_steps()} each"
                if self.trained_steps
                else ""
            )
        )


@dataclasses.dataclass(frozen=True)
class LlmFiles:
    """What save_llm wrote.

    Attributes:
      model_dir: config.json + model.safetensors.
      adapter_dirs: "adapter1".. -> its PEFT directory (adapter_config.json + adapter_model.safetensors).
      training: what the training did (spec.trained_steps > 0), else None.
      adapter_training: adapter name -> its fine-tuning (empty for seeded random adapters).
    """

    model_dir: str
    adapter_dirs: Dict[str, str]
    training: Optional[Training] = None
    adapter_training: Dict[str, Training] = dataclasses.field(default_factory=dict)


def _config(spec: LlmSpec) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        vocab_size=spec.vocab,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=max(2048, spec.max_seq_len),
        tie_word_embeddings=spec.tied,
    )


def save_llm(spec: LlmSpec, out_dir: str, seed: int = 0) -> LlmFiles:
    """Writes the model (seed) and its adapters (seeds seed+1..) under out_dir/model, out_dir/adapterN.

    Norm weights get seeded noise (as models.hf_tiny does) so that no two weights share bytes; then,
    if spec.trained_steps, the model trains that many steps (train_llm, batches seeded by seed)
    before it is written, and each adapter starts as PEFT starts one (lora_B zero, lora_A seeded by
    seed+i) and is fine-tuned on its own part of the text (train_lora). Untrained, the adapters are
    seeded random (models.hf_tiny.save_peft_adapter): a large update that tests see, not one a
    fine-tune makes.
    """
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(_config(spec)).eval()
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn(param.shape, generator=g) * 0.05)
    training = None
    if spec.trained_steps:
        training = train_llm(model, spec.vocab, spec.trained_steps, min(128, spec.max_seq_len), seed)
    model_dir = os.path.join(out_dir, "model")
    model.save_pretrained(model_dir)
    adapter_dirs: Dict[str, str] = {}
    adapter_training: Dict[str, Training] = {}
    for i in range(1, spec.adapters + 1):
        name, path = f"adapter{i}", os.path.join(out_dir, f"adapter{i}")
        if spec.lora_steps():
            adapter_training[name] = _save_trained_adapter(model, path, spec, seed + i, i - 1)
        else:
            save_peft_adapter(model, path, spec.targets, spec.rank, spec.alpha, seed + i)
        adapter_dirs[name] = path
    return LlmFiles(model_dir, adapter_dirs, training, adapter_training)


def _save_trained_adapter(model: torch.nn.Module, path: str, spec: LlmSpec, seed: int, part: int) -> Training:
    config = peft.LoraConfig(
        r=spec.rank, lora_alpha=spec.alpha, target_modules=list(spec.targets), task_type="CAUSAL_LM"
    )
    torch.manual_seed(seed)  # lora_A's initialization
    tuned = peft.get_peft_model(copy.deepcopy(model), config)
    training = train_lora(tuned, spec.vocab, spec.lora_steps(), min(128, spec.max_seq_len), part, spec.adapters)
    tuned.save_pretrained(path)
    return training
