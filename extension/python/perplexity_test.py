"""program_perplexity and score over the text fixture (//testing:text_files: the tiny Llama with std 0.2
weights, a byte-level BPE tokenizer and adapters a and b, exported at max_seq_len 160):

- the windows score every token but the first once with stride < ctx, and skip each disjoint
  window's first token with stride == ctx, as transformers' strided perplexity does;
- the fp32 programs' perplexity equals transformers' over the same model (rebuilt here from the
  fixture's seeds), computed with the Hugging Face guide's windows and labels, within 0.1%, for
  stride == ctx and stride < ctx;
- a program against itself has KL 0 and top-1 agreement 1; an int8 export of the same model has
  KL > 0 and a perplexity within a few % of fp32's;
- the API's errors (ctx past the method's bound, stride past ctx, too few tokens, another
  vocabulary, a method without token ids in) are ValueErrors naming the value.
"""

import math
import os
import sys
from typing import List, Optional, Tuple

import numpy as np
import pytest
from edgeshare.extension.python import (
    DataFile,
    EdgeshareError,
    PerplexityError,
    Program,
    program_perplexity,
    score,
)
from edgeshare.extension.python.perplexity import windows

FILES = os.path.dirname(os.environ["TEXT_EXPECTED_JSON"])
GENERATION = os.path.dirname(os.environ["GENERATION_EXPECTED_JSON"])
# The text fixture's model (testing/export_text_files.py).
MAX_SEQ_LEN = 160
INIT_STD = 0.2
TOKENS = 400


@pytest.fixture(scope="module")
def ids() -> np.ndarray:
    from edgeshare.extension.python.text import Tokenizer  # noqa: PLC0415
    from edgeshare.models import tiny_tokenizer  # noqa: PLC0415

    text = "\n\n".join(tiny_tokenizer.CORPUS + tiny_tokenizer.HELD_OUT)
    tokens = np.asarray(Tokenizer.from_folder(FILES).encode(text), dtype=np.int64)
    assert tokens.size >= TOKENS
    return tokens[:TOKENS]


@pytest.fixture(scope="module")
def foundation() -> DataFile:
    return DataFile.open(os.path.join(FILES, "foundation.ptd"))


def _program(name: str, foundation: DataFile) -> Program:
    return Program.load(os.path.join(FILES, f"{name}.pte"), [foundation], methods=["forward"])


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """The fixture's model and adapters, saved again from the same seeds."""
    from edgeshare.models import hf_tiny, tiny_tokenizer  # noqa: PLC0415

    root = str(tmp_path_factory.mktemp("hf"))
    files = hf_tiny.save_tiny_lora("llama", root, initializer_range=INIT_STD, vocab_size=tiny_tokenizer.VOCAB)
    return files


def _transformers_perplexity(model_dir: str, adapter_dir: Optional[str], ids: np.ndarray, ctx: int,
                             stride: int) -> Tuple[float, int]:
    """Perplexity as the transformers guide computes it: labels -100 over each window's context,
    the model's shifted loss, averaged over the tokens each window scores."""
    import peft  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    if adapter_dir is not None:
        model = peft.PeftModel.from_pretrained(model, adapter_dir).eval()
    sequence = torch.tensor(ids).reshape(1, -1)
    total, count, prev_end = 0.0, 0, 0
    for begin in range(0, sequence.shape[1], stride):
        end = min(begin + ctx, sequence.shape[1])
        target_len = end - prev_end
        window = sequence[:, begin:end]
        labels = window.clone()
        labels[:, :-target_len] = -100
        scored = int((labels[:, 1:] != -100).sum())
        if scored:
            with torch.no_grad():
                loss = model(input_ids=window, labels=labels).loss
            total += float(loss) * scored
            count += scored
        prev_end = end
        if end == sequence.shape[1]:
            break
    return math.exp(total / count), count


def test_windows_score_every_token_but_the_first_once_with_a_stride_below_ctx():
    for tokens, ctx, stride in [(10, 4, 2), (11, 4, 3), (5, 8, 1), (160, 64, 24)]:
        scored: List[int] = []
        for begin, end, first in windows(tokens, ctx, stride):
            assert end - begin <= ctx and begin < first
            scored += range(first, end)
        assert scored == list(range(1, tokens)), (tokens, ctx, stride)


def test_disjoint_windows_leave_each_windows_first_token_unscored():
    assert windows(10, 4) == [(0, 4, 1), (4, 8, 5), (8, 10, 9)]
    assert windows(9, 4) == [(0, 4, 1), (4, 8, 5)]  # a last window of one token scores nothing


def test_uniform_logits_give_the_vocabulary_size_and_no_divergence():
    uniform = lambda window: np.zeros((1, window.shape[1], 50), np.float32)  # noqa: E731
    result = score(np.arange(30) % 50, 8, uniform, stride=3, reference=uniform)
    assert result.perplexity == pytest.approx(50.0, rel=1e-12)
    assert result.perplexity_stderr == pytest.approx(0.0, abs=1e-9) and result.tokens_scored == 29
    assert result.kl_divergence == 0.0 and result.top1_agreement == 1.0
    assert result.reference_perplexity == pytest.approx(50.0, rel=1e-12)


@pytest.mark.parametrize("name,adapter", [("foundation", None), ("a", "a")])
@pytest.mark.parametrize("ctx,stride", [(64, 64), (64, 24)])
def test_fp32_perplexity_equals_transformers(name, adapter, ctx, stride, ids, foundation, hf_dirs):
    result = program_perplexity(_program(name, foundation), ids, ctx=ctx, stride=stride)
    adapter_dir = hf_dirs.adapter_dirs[adapter] if adapter else None
    want, count = _transformers_perplexity(hf_dirs.model_dir, adapter_dir, ids, ctx, stride)
    print(f"{name} ctx {ctx} stride {stride}: edgeshare {result.perplexity:.4f} +/- "
          f"{result.perplexity_stderr:.4f}, transformers {want:.4f} over {count} tokens")
    assert result.tokens_scored == count
    assert result.windows == len(windows(TOKENS, ctx, stride))
    assert result.perplexity == pytest.approx(want, rel=1e-3)
    assert result.mean_nll == pytest.approx(math.log(result.perplexity))


def test_ctx_defaults_to_the_methods_bound(ids, foundation):
    result = program_perplexity(_program("foundation", foundation), ids)
    assert result.windows == len(windows(TOKENS, MAX_SEQ_LEN))


def test_a_program_against_itself_has_no_divergence(ids, foundation):
    program = _program("a", foundation)
    result = program_perplexity(program, ids, ctx=64, stride=32, reference=program)
    assert result.kl_divergence == pytest.approx(0.0, abs=1e-12) and result.kl_divergence_max < 1e-9
    assert result.top1_agreement == 1.0
    assert result.reference_perplexity == pytest.approx(result.perplexity, rel=1e-12)


def test_int8_export_diverges_a_little(tmp_path, ids, foundation, hf_dirs):
    from edgeshare.tools import export_lora  # noqa: PLC0415

    out = str(tmp_path / "int8")
    assert export_lora.main(["--hf-model", hf_dirs.model_dir, "--out", out, "--max-seq-len", "64",
                             "--quantize", "int8"]) == 0
    int8 = Program.load(os.path.join(out, "foundation.pte"), [os.path.join(out, "foundation.ptd")], methods=["forward"])
    fp32 = _program("foundation", foundation)
    result = program_perplexity(int8, ids, ctx=64, stride=32, reference=fp32)
    print(f"int8: PPL {result.perplexity:.4f}, fp32 {result.reference_perplexity:.4f}, KL {result.kl_divergence:.6f} "
          f"+/- {result.kl_divergence_stderr:.6f} (max {result.kl_divergence_max:.6f}, p99 "
          f"{result.kl_divergence_p99:.6f}), top-1 {result.top1_agreement:.4f}")
    assert result.kl_divergence > 0
    assert result.kl_divergence_max >= result.kl_divergence_p99 >= result.kl_divergence_median >= 0
    assert 0.85 <= result.top1_agreement < 1.0
    assert result.perplexity == pytest.approx(result.reference_perplexity, rel=0.03)
    alone = program_perplexity(fp32, ids, ctx=64, stride=32)
    assert alone.perplexity == pytest.approx(result.reference_perplexity, rel=1e-12)


def test_progress_is_a_bar_or_else_a_counter_on_stderr(capsys, monkeypatch):
    uniform = lambda window: np.zeros((1, window.shape[1], 8), np.float32)  # noqa: E731
    score(np.arange(20) % 8, 4, uniform, progress=True)
    assert "window" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as without the [text] extra
    score(np.arange(20) % 8, 4, uniform, progress=True)
    err = capsys.readouterr().err
    assert "\rperplexity: 5/5 windows" in err and err.endswith("\r\033[K")
    score(np.arange(20) % 8, 4, uniform)
    assert capsys.readouterr().err == ""


def test_errors_name_the_value(ids, foundation):
    program = _program("foundation", foundation)
    with pytest.raises(PerplexityError, match=f"ctx 161 is more than the {MAX_SEQ_LEN} tokens method 'forward'"):
        program_perplexity(program, ids, ctx=MAX_SEQ_LEN + 1)
    with pytest.raises(PerplexityError, match=r"stride is 65; it must be in 1..ctx \(64\)"):
        program_perplexity(program, ids, ctx=64, stride=65)
    with pytest.raises(PerplexityError, match="ctx is 1"):
        program_perplexity(program, ids, ctx=1)
    with pytest.raises(PerplexityError, match="at least 2 tokens; the text has 1"):
        program_perplexity(program, ids[:1])
    with pytest.raises(PerplexityError, match="shape"):
        program_perplexity(program, np.zeros((2, 3), np.int64))
    with pytest.raises(EdgeshareError, match="forward_cached"):
        program_perplexity(program, ids, method="forward_cached")
    other = Program.load(os.path.join(GENERATION, "foundation.pte"), [os.path.join(GENERATION, "foundation.ptd")])
    with pytest.raises(PerplexityError, match="takes 2 inputs"):
        program_perplexity(other, ids, method="forward_cached")
    with pytest.raises(PerplexityError, match="vocabulary of 256 tokens .* one of 384"):
        program_perplexity(program, ids, reference=other)
    small = lambda window: np.zeros((1, window.shape[1], 10), np.float32)  # noqa: E731
    big = lambda window: np.zeros((window.shape[1], 12), np.float32)  # noqa: E731
    with pytest.raises(PerplexityError, match="reference's vocabulary has 12 tokens and the model's 10"):
        score(np.arange(5), 4, small, reference=big)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-s"]))
