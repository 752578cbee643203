"""NamedDataStore: dedupe, conflicts naming the key, tags, digests and alignment."""

import hashlib

import pytest
from edgeshare.exir.errors import NamedDataError
from edgeshare.exir.named_data_store import NamedDataStore
from edgeshare.exir.tensor_layout import TensorLayout


def test_same_key_same_bytes_is_stored_once():
    store = NamedDataStore()
    store.add_named_data("w", b"abcd", 16, "foundation")
    store.add_named_data("w", b"abcd", 64, "foundation")
    out = store.get_named_data_store_output()
    assert len(out.buffers) == 1
    assert list(out.external_data["foundation"]) == ["w"]
    assert out.buffers[0].alignment == 64
    assert out.buffers[0].digest == hashlib.sha256(b"abcd").digest()


def test_same_key_different_bytes_is_an_error_naming_the_key():
    store = NamedDataStore()
    store.add_named_data("layers.0.weight", b"abcd")
    with pytest.raises(NamedDataError, match="'layers.0.weight'"):
        store.add_named_data("layers.0.weight", b"abce")


def test_same_key_under_two_tags_is_an_error_not_first_wins():
    store = NamedDataStore()
    store.add_named_data("w", b"abcd", external_tag="foundation")
    with pytest.raises(NamedDataError, match="'w'.*'foundation'.*'other'"):
        store.add_named_data("w", b"abcd", external_tag="other")
    with pytest.raises(NamedDataError, match="the program"):
        store.add_named_data("w", b"abcd")


def test_different_keys_with_same_bytes_share_one_buffer():
    store = NamedDataStore()
    store.add_named_data("a", b"1234")
    store.add_named_data("b", b"1234", external_tag="t")
    out = store.get_named_data_store_output()
    assert len(out.buffers) == 1
    assert out.pte_data["a"].buffer_index == out.external_data["t"]["b"].buffer_index


def test_layout_and_alignment_are_recorded_and_checked():
    store = NamedDataStore()
    layout = TensorLayout(6, (1,), (0,))
    store.add_named_data("x", b"\0\0\0\0", 32, None, layout)
    assert store.get_named_data_store_output().pte_data["x"].tensor_layout == layout
    with pytest.raises(NamedDataError, match="'x'.*layouts"):
        store.add_named_data("x", b"\0\0\0\0", 32, None, TensorLayout(3, (1,), (0,)))
    with pytest.raises(NamedDataError, match="power of two"):
        store.add_named_data("y", b"", 3)
    with pytest.raises(TypeError):
        store.add_named_data("z", "not bytes")


def test_merge_keeps_rules_across_outputs():
    a, b = NamedDataStore(), NamedDataStore()
    a.add_named_data("shared", b"same", external_tag="foundation")
    b.add_named_data("shared", b"same", external_tag="foundation")
    b.add_named_data("mine", b"mine")
    total = NamedDataStore()
    total.merge(a.get_named_data_store_output())
    total.merge(b.get_named_data_store_output())
    out = total.get_named_data_store_output()
    assert sorted(out.external_data["foundation"]) == ["shared"]
    assert sorted(out.pte_data) == ["mine"]
    c = NamedDataStore()
    c.add_named_data("shared", b"diff", external_tag="foundation")
    with pytest.raises(NamedDataError, match="'shared'"):
        total.merge(c.get_named_data_store_output())


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
