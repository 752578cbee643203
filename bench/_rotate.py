"""A Llama model moved off its weights' quantization grid without changing its function.

A model published quantized (e.g. a Q4_1 GGUF) and dequantized has weights that sit exactly on a
4-bit grid, which flatters any 4-bit format that happens to share the grid. Rotating the residual
stream by an orthogonal Q keeps the function and spreads every weight off the grid:

- each RMSNorm weight g is folded into the Linear layers that read the norm's output
  (input_layernorm into q, k, v; post_attention_layernorm into gate, up; the final norm into
  lm_head: W <- W diag(g)) and set to 1, since an RMSNorm commutes with an orthogonal matrix only
  when its weight is uniform;
- lm_head is untied from the embedding (the two are rotated on different sides once folded);
- the embedding and every Linear reading the residual stream (q, k, v, gate, up, lm_head) take
  W <- W Q, and every Linear writing it (o, down) takes W <- Q^T W (its bias b <- b Q).

A PEFT LoRA adapter (delta = B A, A [r, in], B [out, r]) follows the same rules: lora_A of q, k, v,
gate and up takes A <- A diag(g) Q; lora_B of o and down takes B <- Q^T B. Arithmetic is float64;
the files are float32 again, so logits move by float32 rounding only.
"""

import json
import os
import re
import shutil
from typing import Dict, Tuple

import torch
import transformers
from safetensors.torch import load_file, save_file

__all__ = ["RotationError", "random_orthogonal", "rotate_adapter", "rotate_model"]

# The Linear layers reading the residual stream, and the norm whose weight each one folds in.
_READS = {"q_proj": "input_layernorm", "k_proj": "input_layernorm", "v_proj": "input_layernorm"}
_READS.update({"gate_proj": "post_attention_layernorm", "up_proj": "post_attention_layernorm"})
_WRITES = ("o_proj", "down_proj")
_LAYER = re.compile(r"layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<proj>\w+_proj)\.")
_ADAPTER_WEIGHTS = "adapter_model.safetensors"


class RotationError(ValueError):
    """A model or adapter this transform does not cover (it names the file, key or model type)."""


def random_orthogonal(size: int, seed: int) -> torch.Tensor:
    """A seeded random orthogonal [size, size] float64 matrix: Q of the QR of a Gaussian matrix, its
    columns' signs fixed by R's diagonal so that Q is uniformly distributed."""
    gaussian = torch.randn(size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    q, r = torch.linalg.qr(gaussian)
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def _check_llama(config: transformers.PretrainedConfig, where: str) -> None:
    if config.model_type != "llama":
        raise RotationError(f"{where}: model_type '{config.model_type}' is not llama (the only one rotate covers)")


def _norms(state: Dict[str, torch.Tensor], layers: int) -> Dict[Tuple[int, str], torch.Tensor]:
    return {
        (i, norm): state[f"model.layers.{i}.{norm}.weight"].double()
        for i in range(layers)
        for norm in ("input_layernorm", "post_attention_layernorm")
    }


def _rotated_state(state: Dict[str, torch.Tensor], layers: int, q: torch.Tensor) -> Dict[str, torch.Tensor]:
    norms = _norms(state, layers)
    out: Dict[str, torch.Tensor] = {}
    embedding = state["model.embed_tokens.weight"].double()
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"]).double()
    out["model.embed_tokens.weight"] = embedding @ q
    out["lm_head.weight"] = (head * state["model.norm.weight"].double()) @ q
    out["model.norm.weight"] = torch.ones_like(state["model.norm.weight"], dtype=torch.float64)
    for key, value in state.items():
        if key in out or key in ("lm_head.weight",):
            continue
        match = _LAYER.search(key)
        w = value.double()
        if key.endswith("layernorm.weight"):
            out[key] = torch.ones_like(w)
        elif match and match["proj"] in _READS and key.endswith(".weight"):
            out[key] = (w * norms[(int(match["layer"]), _READS[match["proj"]])]) @ q
        elif match and match["proj"] in _WRITES and key.endswith(".weight"):
            out[key] = q.T @ w
        elif match and match["proj"] in _WRITES and key.endswith(".bias"):
            out[key] = w @ q
        elif match and match["proj"] in _READS and key.endswith(".bias"):
            out[key] = w
        elif key.endswith("rotary_emb.inv_freq"):
            continue
        else:
            raise RotationError(f"rotate_model: no rule for weight '{key}'")
    return {k: v.float().contiguous() for k, v in out.items()}


def rotate_model(model_dir: str, out_dir: str, seed: int) -> None:
    """Writes the folded, untied and rotated copy of the Llama HF model in model_dir to out_dir
    (safetensors, config with tie_word_embeddings false, and model_dir's tokenizer files).

    Args:
      model_dir: a LlamaForCausalLM saved with save_pretrained (float32 or wider weights).
      out_dir: the folder to write (created).
      seed: seeds Q (random_orthogonal).

    Raises:
      RotationError: not a Llama model, or a weight no rule covers.
    """
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = model.config
    _check_llama(config, model_dir)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    del model
    q = random_orthogonal(config.hidden_size, seed)
    rotated = _rotated_state(state, config.num_hidden_layers, q)
    config.tie_word_embeddings = False
    with torch.device("meta"):
        skeleton = transformers.AutoModelForCausalLM.from_config(config)
    missing = set(skeleton.state_dict()) - set(rotated)
    if missing:
        raise RotationError(f"rotate_model: {model_dir} lacks weights {sorted(missing)[:3]}")
    os.makedirs(out_dir, exist_ok=True)
    save_file(rotated, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out_dir)
    for name in os.listdir(model_dir):
        if name.endswith((".safetensors", ".bin")) or name in ("config.json", "model.safetensors.index.json"):
            continue
        source = os.path.join(model_dir, name)
        if os.path.isfile(source):
            shutil.copyfile(source, os.path.join(out_dir, name))


def rotate_adapter(adapter_dir: str, model_dir: str, out_dir: str, seed: int) -> None:
    """Writes the PEFT LoRA adapter in adapter_dir, made for the (unrotated) model in model_dir, as
    the adapter of rotate_model(model_dir, ..., seed) to out_dir.

    Args:
      adapter_dir: a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) over
        q/k/v/o/gate/up/down projections.
      model_dir: the model it was made for (its norm weights fold into lora_A).
      out_dir: the folder to write (created).
      seed: the seed given to rotate_model.

    Raises:
      RotationError: the adapter adapts something else (embeddings, lm_head, DoRA magnitudes), or
        the model is not a Llama.
    """
    config = transformers.AutoConfig.from_pretrained(model_dir)
    _check_llama(config, model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    norms = _norms({k: v.detach() for k, v in model.state_dict().items()}, config.num_hidden_layers)
    del model
    q = random_orthogonal(config.hidden_size, seed)
    path = os.path.join(adapter_dir, _ADAPTER_WEIGHTS)
    if not os.path.exists(path):
        raise RotationError(f"rotate_adapter: {adapter_dir} has no {_ADAPTER_WEIGHTS}")
    out: Dict[str, torch.Tensor] = {}
    for key, value in load_file(path).items():
        match = _LAYER.search(key)
        w = value.double()
        if match and match["proj"] in _READS and ".lora_A." in key:
            out[key] = (w * norms[(int(match["layer"]), _READS[match["proj"]])]) @ q
        elif match and match["proj"] in _WRITES and ".lora_B." in key:
            out[key] = q.T @ w if key.endswith(".weight") else w @ q
        elif (
            match and (match["proj"] in _READS or match["proj"] in _WRITES) and (".lora_A." in key or ".lora_B." in key)
        ):
            out[key] = w  # the side of the adapter inside the attention or MLP block: unchanged
        else:
            raise RotationError(f"rotate_adapter: {path}: no rule for '{key}'")
        out[key] = out[key].to(value.dtype).contiguous()
    os.makedirs(out_dir, exist_ok=True)
    save_file(out, os.path.join(out_dir, _ADAPTER_WEIGHTS), metadata={"format": "pt"})
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        adapter_config = json.load(f)
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(adapter_config, f, indent=2)
