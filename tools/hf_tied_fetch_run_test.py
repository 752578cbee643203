"""A tiny Llama whose lm_head is tied to the embedding, exported by export_hf_lora (XNNPACK): the
tied key is one entry of foundation.ptd and leaves it once for the adapter program and the bare
foundation together, although the lm_head (delegated linear) and the embedding (portable kernel)
both read it."""

import numpy as np
import pytest
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import export_hf_lora, load_hf_model
from edgeshare.exir.hf import tied_keys
from edgeshare.models import hf_tiny
from edgeshare.testing.run_binary import run_programs


def test_tied_embedding_and_lm_head_key_is_fetched_once(tmp_path):
    files = hf_tiny.save_tiny_lora("llama", str(tmp_path / "in"))
    assert "model.embed_tokens.weight" in tied_keys(load_hf_model(files.model_dir))
    adapters = {"a": files.adapter_dirs["a"]}
    result = export_hf_lora(files.model_dir, adapters, str(tmp_path / "out"), 8, XnnpackPartitioner())
    ids = np.arange(4, dtype=np.int64).reshape(1, 4)
    programs = [result.program_paths["a"], result.foundation_program]
    # "forward" (forward_cached, beside it, takes a start position too).
    run = run_programs(programs, [result.foundation_path], [ids], extra_args=["--method", "forward"])
    assert run.stats["data_map_fetches"]["model.embed_tokens.weight"] == 1, run.stats["data_map_fetches"]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
