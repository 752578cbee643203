"""Weights mapped from a file leave the process's resident memory after they are read, unchanged."""

import hashlib
import io
import os

import numpy as np
import pytest
import safetensors.torch
import torch
from edgeshare.exir._resident import read_once, release, resident_bytes
from edgeshare.exir._serialize import serialize_ptd, write_ptd
from edgeshare.exir.tensor_layout import TensorLayout, digest_cache, tensor_bytes, tensor_digest, tensor_view

_MIB = 1 << 20


def _mapped(tmp_path, rows=1024):
    """A weight of rows x 4 KiB saved with safetensors and mapped back as transformers maps a checkpoint."""
    saved = torch.from_numpy(np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32))
    path = str(tmp_path / "w.safetensors")
    safetensors.torch.save_file({"w": saved}, path)
    weight = safetensors.torch.load_file(path)["w"]
    return saved, weight


@pytest.fixture(autouse=True)
def _needs_pagemap():
    if resident_bytes(torch.ones(1024)) == 0:
        pytest.skip("this system does not expose /proc/self/pagemap")


def test_a_weight_read_from_a_mapped_file_is_released_and_keeps_its_bytes(tmp_path):
    saved, weight = _mapped(tmp_path)
    float(weight.sum())  # reads every page
    assert resident_bytes(weight) >= 4 * _MIB
    assert release(weight) >= 4 * _MIB
    assert resident_bytes(weight) == 0
    assert torch.equal(weight, saved)  # read again from the page cache


def test_a_page_written_since_it_was_mapped_keeps_its_value(tmp_path):
    saved, weight = _mapped(tmp_path)
    float(weight.sum())
    weight[0, 0] = 42.0  # a private copy of that page only
    release(weight)
    assert weight[0, 0] == 42.0
    assert resident_bytes(weight[:1]) > 0
    assert torch.equal(weight.reshape(-1)[1:], saved.reshape(-1)[1:])


def test_ordinary_memory_is_left_resident():
    tensor = torch.randn(1 << 20)
    copy = tensor.clone()
    assert release(tensor) == 0
    assert release(bytearray(tensor_bytes(tensor))) == 0
    assert resident_bytes(tensor) >= 4 * _MIB
    assert torch.equal(tensor, copy)


def test_a_digest_reads_a_mapped_weight_once_and_releases_it(tmp_path):
    saved, weight = _mapped(tmp_path)
    with digest_cache():
        digest = tensor_digest(weight)
        assert resident_bytes(weight) == 0
        assert tensor_digest(weight) is digest
        assert resident_bytes(weight) == 0  # the second ask reads nothing
    assert digest == hashlib.sha256(tensor_bytes(saved)).digest()


def test_a_view_of_a_mapped_weight_is_released_like_the_weight(tmp_path):
    saved, weight = _mapped(tmp_path)
    view = tensor_view(weight)
    assert hashlib.sha256(view).digest() == hashlib.sha256(tensor_bytes(saved)).digest()
    assert release(view) >= 4 * _MIB
    assert resident_bytes(weight) == 0
    assert bytes(view) == tensor_bytes(saved)


def test_writing_a_data_file_releases_the_weight_it_streamed(tmp_path):
    saved, weight = _mapped(tmp_path)
    entries = {"w": (tensor_view(weight), 4096, TensorLayout.of(weight))}
    out = io.BytesIO()
    write_ptd(out, entries, 4096)
    assert resident_bytes(weight) == 0
    assert out.getvalue() == serialize_ptd({"w": (tensor_bytes(saved), 4096, TensorLayout.of(saved))}, 4096)


def test_reading_a_mapped_weight_through_holds_one_slice_at_a_time(tmp_path):
    saved, weight = _mapped(tmp_path, rows=8192)  # 32 MiB
    pieces = []
    for piece in read_once(tensor_view(weight), slice_bytes=_MIB):
        pieces.append(bytes(piece))
        # This slice, and what the kernel maps around a fault (a large folio on either side).
        assert resident_bytes(weight) <= 5 * _MIB
    assert resident_bytes(weight) == 0
    assert b"".join(pieces) == tensor_bytes(saved) and len(pieces) == 32


def test_a_forked_child_judges_its_own_pages(tmp_path):
    saved, weight = _mapped(tmp_path)
    float(weight.sum())
    assert resident_bytes(weight) > 0  # the parent reads its page table: every page the file's
    pid = os.fork()
    if pid == 0:  # the child writes a page (its own copy now) and releases the weight
        ok = False
        try:
            # numpy, not torch: torch's thread pool does not survive fork().
            values, expected = weight.numpy(), saved.numpy()
            values[0, 0] = 42.0
            release(weight)
            ok = values[0, 0] == 42.0 and np.array_equal(values.reshape(-1)[1:], expected.reshape(-1)[1:])
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert torch.equal(weight, saved)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
