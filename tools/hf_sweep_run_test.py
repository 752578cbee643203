"""Architecture sweep: every causal LM family transformers ships (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
196 model types in transformers 5.24), as a tiny seeded config (common size names shrunk, per-layer
lists cut to 2 layers) with one PEFT LoRA adapter on its first layer's attention projections (else
its first two linear layers), exported by export_hf_lora (XNNPACK) and run by the C++ runtime (the
Python extension) at T=6: logits within 1e-4 of PEFT eager, or refused with an edgeshare
ExportError (one line naming what is missing). Families without a tiny decoder-only config are
skipped, saying why.

Heavy (one export per family, 15-60 s each on this machine): tagged manual; run it with
`./bazelw test //tools:hf_sweep_run_test`, or `--test_env=EDGESHARE_SWEEP=llama,qwen2` for some
families. Each family runs in a process of its own, so that one family's crash or hang is its own
outcome.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

OUTCOMES = ("matched", "refused", "skipped")
TOLERANCE = 1e-4
MAX_PARAMS = 5_000_000
_SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    max_position_embeddings=256,
    head_dim=16,
    n_embd=64,
    n_layer=2,
    n_head=4,
    n_positions=256,
    n_inner=128,
    ffn_dim=128,
    d_model=64,
    num_layers=2,
    moe_intermediate_size=64,
    num_experts=4,
    num_local_experts=4,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def families():
    """The model types of transformers' causal LM auto class (decoder-only ones are kept later)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: PLC0415

    wanted = os.environ.get("EDGESHARE_SWEEP")
    names = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    return [n for n in names if n in wanted.split(",")] if wanted else names


def tiny_config(family: str):
    """(a tiny config of the family, the modules to adapt), or (None, why it is skipped): built on
    the meta device, so no weight is allocated to decide."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    try:
        config = transformers.AutoConfig.for_model(family)
    except Exception as e:  # a config transformers cannot build without its hub files
        return None, f"no default config ({type(e).__name__})"
    if getattr(config, "is_encoder_decoder", False):
        return None, "encoder-decoder"
    layers = getattr(config, "num_hidden_layers", None)
    for key, value in _SMALL.items():
        if hasattr(config, key):
            setattr(config, key, value)
    for key, value in list(vars(config).items()):  # per-layer lists (layer_types, ...) follow the count
        if isinstance(value, list) and isinstance(layers, int) and len(value) == layers:
            setattr(config, key, value[: _SMALL["num_hidden_layers"]])
    try:
        with torch.device("meta"):
            meta = transformers.AutoModelForCausalLM.from_config(config)
    except Exception as e:
        return None, f"no model from its config ({type(e).__name__}: {' '.join(str(e).split())[:120]})"
    params = sum(p.numel() for p in meta.parameters())
    if params > MAX_PARAMS:
        return None, f"config not shrunk by the common size names ({params} parameters)"
    # One adapter on the first decoder layer's attention projections (else its first two linears).
    names = []
    for path, module in meta.named_modules():
        leaf = path.rsplit(".", 1)[-1]
        linear = isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"  # GPT-2's [in, out]
        if linear and ".0." in f".{path}." and leaf not in names:
            names.append(leaf)
    if not names:
        return None, "no linear layer in its first layer"
    attention = [n for n in names if n in ("q_proj", "v_proj", "query_key_value", "qkv_proj", "c_attn", "Wqkv")]
    return config, (attention or names)[:2]


def _one(family: str, root: str) -> dict:
    """Exports and runs one family; returns {"outcome", "detail"}."""
    import numpy as np  # noqa: PLC0415
    import peft  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from edgeshare.backends.xnnpack import XnnpackPartitioner  # noqa: PLC0415
    from edgeshare.exir import export_hf_lora  # noqa: PLC0415
    from edgeshare.exir.errors import ExportError  # noqa: PLC0415
    from edgeshare.extension.python import DataFile, Program  # noqa: PLC0415

    config, targets = tiny_config(family)
    torch.manual_seed(0)
    model_dir, adapter_dir = os.path.join(root, "model"), os.path.join(root, "adapter")
    try:
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        model.save_pretrained(model_dir)
    except Exception as e:  # the shrunk config breaks one of the family's own rules
        return {"outcome": "skipped", "detail": f"tiny config invalid ({type(e).__name__}: {' '.join(str(e).split())[:150]})"}
    conv1d = any(type(m).__name__ == "Conv1D" and p.rsplit(".", 1)[-1] in targets for p, m in model.named_modules())
    options = peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), fan_in_fan_out=conv1d)
    lora = peft.get_peft_model(model, options).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if ".lora_" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.1)
    lora.save_pretrained(adapter_dir)
    try:
        result = export_hf_lora(model_dir, {"a": adapter_dir}, os.path.join(root, "out"), 16, XnnpackPartitioner())
    except ExportError as e:
        return {"outcome": "refused", "detail": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    vocab = int(lora.get_input_embeddings().weight.shape[0])
    ids = np.random.default_rng(6).integers(3, vocab, size=(1, 6), dtype=np.int64)
    with torch.no_grad():
        want = lora(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()
    program = Program.load(result.program_paths["a"], [DataFile.open(result.foundation_path)])
    (got,) = program.method("forward").execute(ids)
    error = float(np.max(np.abs(got - want)))
    if error > TOLERANCE * max(1.0, float(np.max(np.abs(want)))):
        return {"outcome": "mismatch", "detail": f"max |got - want| {error:.3g}"}
    return {"outcome": "matched", "detail": f"max |got - want| {error:.3g}"}


def test_every_family_matches_or_is_refused(tmp_path):
    results = {}
    import warnings  # noqa: PLC0415

    warnings.filterwarnings("ignore")
    for family in families():
        start = time.time()
        try:
            config, why = tiny_config(family)
        except Exception as e:  # a config whose attributes cannot be set globally (per-layer configs)
            config, why = None, f"no tiny config ({type(e).__name__})"
        if config is None:
            results[family] = {"outcome": "skipped", "detail": why}
            print(family, json.dumps(results[family]), flush=True)
            continue
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--family", family, str(tmp_path / family)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            results[family] = (
                json.loads(lines[-1])
                if lines
                else {"outcome": "crashed", "detail": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
            )
        except subprocess.TimeoutExpired:
            results[family] = {"outcome": "timeout", "detail": "over 300 s"}
        results[family]["seconds"] = round(time.time() - start, 1)
        print(family, json.dumps(results[family]), flush=True)
    counts = {}
    for r in results.values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print("counts:", json.dumps(counts, sort_keys=True))
    bad = {f: r for f, r in results.items() if r["outcome"] not in OUTCOMES}
    assert not bad, bad


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--family":
        import warnings

        warnings.filterwarnings("ignore")
        os.makedirs(sys.argv[3], exist_ok=True)
        try:
            outcome = _one(sys.argv[2], sys.argv[3])
        except Exception as e:  # the sweep reports what fails late, one line per family
            outcome = {"outcome": "failed", "detail": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
        print(json.dumps(outcome), flush=True)
        raise SystemExit(0)
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
