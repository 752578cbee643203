"""export_lora --calibration end to end on a tiny Llama with its own tokenizer: the text's tokens are
the model tokenizer's, a calibrated int4 (or int5k) foundation differs from an uncalibrated one and
is the same on every export; bad calibration flags and files are refused in one line before anything is
written."""

import os
import sys
from typing import List

import pytest
import torch
import transformers
from edgeshare.exir._serialize import deserialize_ptd
from edgeshare.exir.calibration import CalibrationError, calibration_ids
from edgeshare.models import hf_tiny, tiny_tokenizer
from edgeshare.tools import export_lora


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("tiny"))
    transformers.logging.set_verbosity_error()
    files = hf_tiny.save_tiny_lora("llama", root, initializer_range=0.2, vocab_size=tiny_tokenizer.VOCAB)
    tiny_tokenizer.save_tokenizer(files.model_dir, 64)
    return files.model_dir


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("text") / "calibration.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tiny_tokenizer.CORPUS))
    return path


def _export(model_dir: str, out: str, *flags: str) -> int:
    return export_lora.main(["--hf-model", model_dir, "--out", out, "--max-seq-len", "16", *flags])


def _scales_entries(out: str, suffix: str) -> List[bytes]:
    with open(os.path.join(out, "foundation.ptd"), "rb") as f:
        ptd = deserialize_ptd(f.read(), out)
    return [ptd.named_data[k].data for k in sorted(ptd.named_data) if k.endswith(suffix)]


@pytest.mark.parametrize("quantize, suffix", [("int4", ".qc4w.scales"), ("int5k", ".qb5w.scales")])
def test_a_calibrated_export_differs_from_a_plain_one_and_repeats_itself(
    model_dir, text, tmp_path, capsys, quantize, suffix
):
    assert _export(model_dir, str(tmp_path / "plain"), "--quantize", quantize) == 0
    assert _export(model_dir, str(tmp_path / "one"), "--quantize", quantize, "--calibration", text) == 0
    assert _export(model_dir, str(tmp_path / "two"), "--quantize", quantize, "--calibration", text) == 0
    plain, one, two = (_scales_entries(str(tmp_path / d), suffix) for d in ("plain", "one", "two"))
    assert plain and len(plain) == len(one)
    assert one == two
    assert one != plain


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--quantize", "int8", "--calibration", "TEXT"], "applies to --quantize int4 or int5, not int8"),
        (["--calibration", "TEXT"], "applies to --quantize int4 or int5, not none"),
        (["--quantize", "int4", "--calibration", "MISSING"], "no such file"),
    ],
)
def test_bad_calibration_is_one_line_and_writes_nothing(model_dir, text, tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    flags = [text if f == "TEXT" else str(tmp_path / "missing.txt") if f == "MISSING" else f for f in flags]
    assert _export(model_dir, str(out), *flags) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_calibration_without_a_hugging_face_model_is_refused(text, tmp_path, capsys):
    out = tmp_path / "out"
    assert export_lora.main(["--out", str(out), "--quantize", "int4", "--calibration", text]) == 1
    assert "--calibration needs --hf-model" in capsys.readouterr().err
    assert not out.exists()


def test_calibration_ids_are_the_texts_tokens(model_dir, text):
    ids = calibration_ids(model_dir, text, max_tokens=50)
    assert ids.dtype == torch.int64 and ids.numel() == 50
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    with open(text, encoding="utf-8") as f:
        assert ids.tolist() == tokenizer(f.read(), add_special_tokens=False)["input_ids"][:50]


def test_undecodable_text_is_refused(model_dir, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9 " * 10)
    with pytest.raises(CalibrationError, match="not UTF-8"):
        calibration_ids(model_dir, str(path))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
