"""The export pipeline's shared steps: a structure lowered once serves its other adapters byte for byte,
identities are computed once, the shared data file is streamed, and files appear all at once or not at all."""

import hashlib
import io
import os

import pytest
import torch
from edgeshare.backends.xnnpack import XnnpackPartitioner
from edgeshare.exir import _pipeline
from edgeshare.exir._pipeline import OutputFiles, check_out_dir, structure_signature
from edgeshare.exir._serialize import serialize_ptd, write_ptd
from edgeshare.exir.errors import ExportError
from edgeshare.exir.lora import export_lora
from edgeshare.exir.tensor_layout import TensorLayout, digest_cache, tensor_bytes, tensor_digest
from edgeshare.models import make_foundation, with_lora


def _files(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


@pytest.fixture(scope="module")
def three_of_one_structure():
    foundation = make_foundation()
    adapters = {name: with_lora(foundation, 4, 8.0, seed, 0.05) for name, seed in (("x", 1), ("y", 2))}
    adapters["z"] = with_lora(foundation, 4, 16.0, 3, 0.05)  # another alpha: another graph
    return foundation, adapters, (torch.randn(2, 256, generator=torch.Generator().manual_seed(0)),)


def test_adapters_of_one_structure_have_equal_signatures_and_another_alpha_does_not(three_of_one_structure):
    _, adapters, _ = three_of_one_structure
    assert structure_signature(adapters["x"]) == structure_signature(adapters["y"])
    assert structure_signature(adapters["x"]) != structure_signature(adapters["z"])


def test_reused_lowering_writes_the_files_a_fresh_lowering_writes(three_of_one_structure, tmp_path):
    foundation, adapters, inputs = three_of_one_structure
    lines = []
    export_lora(foundation, adapters, inputs, str(tmp_path / "all"), XnnpackPartitioner(), progress=lines.append)
    # y reused x's lowered program over its own weights; z (another alpha) was exported itself.
    assert sum("exporting" in line for line in lines) == 2, lines
    assert "lowering adapter 'y'" not in lines and "lowering adapter 'z'" in lines, lines
    together = _files(tmp_path / "all")
    for name in ("y", "z"):
        alone = str(tmp_path / name)
        export_lora(foundation, {name: adapters[name]}, inputs, alone, XnnpackPartitioner())
        files = _files(alone)
        assert files[f"{name}.pte"] == together[f"{name}.pte"]
        assert files["foundation.ptd"] == together["foundation.ptd"]


def test_a_structure_whose_weights_share_bytes_is_lowered_again_to_the_same_files(three_of_one_structure, tmp_path):
    foundation, adapters, inputs = three_of_one_structure
    # All-zero A and B: equal weights share one segment, so y's bytes cannot simply replace them.
    zero = with_lora(foundation, 4, 8.0, 1, 0.05)
    with torch.no_grad():
        for name, tensor in zero.state_dict().items():
            if ".lora_" in name:
                tensor.zero_()
    lines = []
    export_lora(foundation, {"w": zero, "y": adapters["y"]}, inputs, str(tmp_path / "all"), XnnpackPartitioner(),
                progress=lines.append)
    assert sum("exporting" in line for line in lines) == 1 and "lowering adapter 'y'" in lines, lines
    alone = str(tmp_path / "y")
    export_lora(foundation, {"y": adapters["y"]}, inputs, alone, XnnpackPartitioner())
    assert _files(alone)["y.pte"] == _files(tmp_path / "all")["y.pte"]


def test_write_ptd_streams_the_bytes_serialize_ptd_returns():
    tensors = {"b": torch.arange(12, dtype=torch.float32).reshape(3, 4), "a": torch.ones(5), "c": torch.ones(5)}
    entries = {k: (tensor_bytes(t), 64, TensorLayout.of(t)) for k, t in tensors.items()}
    out = io.BytesIO()
    assert write_ptd(out, entries, 4096) == len(out.getvalue())
    assert out.getvalue() == serialize_ptd(entries, 4096)
    assert write_ptd(io.BytesIO(), {}, 4096) == len(serialize_ptd({}, 4096))


def test_tensor_digest_is_sha256_once_per_tensor_and_follows_in_place_writes():
    t = torch.randn(64)
    with digest_cache():
        first = tensor_digest(t)
        assert first == hashlib.sha256(tensor_bytes(t)).digest()
        assert tensor_digest(t.detach()) is first  # same elements of one storage: not hashed again
        t.add_(1)
        assert tensor_digest(t) == hashlib.sha256(tensor_bytes(t)).digest() != first


def test_output_files_appear_only_on_commit(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(RuntimeError):
        with OutputFiles(out) as files:
            files.write_bytes("a.pte", b"1234")
            raise RuntimeError("a later step failed")
    assert not os.path.exists(out)  # made for the export, removed with its failure
    with OutputFiles(out) as files:
        path = files.write_bytes("a.pte", b"1234")
        assert sorted(os.listdir(out)) != ["a.pte"]  # a temporary name until commit
        assert files.commit() == {path: 4}
    assert os.listdir(out) == ["a.pte"]


def test_check_out_dir_refuses_a_file(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"")
    with pytest.raises(ExportError, match="is a file"):
        check_out_dir(str(path))
    with pytest.raises(ExportError, match="is a file"):
        check_out_dir(str(path / "below"))
    check_out_dir(str(tmp_path / "new" / "folder"))


def test_a_full_disk_is_one_error_naming_the_file_and_leaves_nothing(three_of_one_structure, tmp_path, monkeypatch):
    foundation, adapters, inputs = three_of_one_structure
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.pte").write_bytes(b"an earlier export")

    def full(f, entries, alignment):
        f.write(b"\0" * 1000)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_pipeline, "write_ptd", full)
    with pytest.raises(ExportError, match=r"cannot write .*foundation.ptd: No space left on device"):
        export_lora(foundation, {"x": adapters["x"]}, inputs, str(out), XnnpackPartitioner())
    assert os.listdir(out) == ["x.pte"] and (out / "x.pte").read_bytes() == b"an earlier export"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
