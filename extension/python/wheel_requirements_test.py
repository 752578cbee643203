"""The wheel's requirement ranges: they parse, the low-end test's constraints pin each one's lowest
version, the lock's versions (what Bazel and wheel_test install) lie in every range, and the built
wheel asks pip for exactly these ranges.
"""

import os
import sys
import zipfile
from typing import Dict, List

import pytest
from edgeshare.extension.python import wheel_requirements
from edgeshare.extension.python.wheel_requirements import Range, normalize, parse_version, read_lock, read_ranges
from packaging.specifiers import SpecifierSet
from packaging.version import Version

RANGES = os.environ["WHEEL_REQUIREMENTS"]
LOWEST = os.environ["LOWEST_CONSTRAINTS"]
LOCK = os.environ["LOCK"]
WHEEL = os.environ["WHEEL"]


@pytest.fixture(scope="module")
def ranges() -> Dict[str, Range]:
    return read_ranges(RANGES)


def _requires_dist(wheel: str) -> List[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].split(";", 1)[0].strip() for line in lines if line.startswith("Requires-Dist:")]


def test_every_range_parses_with_room_for_a_version(ranges):
    assert {"numpy", "flatbuffers", "torch", "transformers", "peft"} <= set(ranges)
    for requirement in ranges.values():
        # pip's own reading of the line agrees with ours.
        specifier = SpecifierSet(str(requirement)[len(requirement.name):])
        assert Version(requirement.lowest) in specifier, requirement
        assert Version(requirement.bound) not in specifier, requirement
        assert requirement.contains(requirement.lowest) and not requirement.contains(requirement.bound)


def test_the_lowest_constraints_pin_each_range_at_its_lowest(ranges):
    pins = read_lock(LOWEST)
    assert pins == {name: requirement.lowest for name, requirement in ranges.items()}


def test_the_locked_versions_lie_in_every_range(ranges):
    locked = read_lock(LOCK)
    for name, requirement in ranges.items():
        assert name in locked, f"{requirement.name} is not in the lock"
        lock = f"{requirement.name}=={locked[name]}"
        assert requirement.contains(locked[name]), f"the lock's {lock} is outside {requirement}"
        assert Version(locked[name]) in SpecifierSet(str(requirement)[len(requirement.name):])


def test_the_wheel_asks_for_exactly_the_ranges(ranges):
    asked = _requires_dist(WHEEL)
    assert sorted(asked) == sorted(str(r) for r in ranges.values())


@pytest.mark.parametrize(
    "line, message",
    [
        ("numpy==2.3.5", "is not NAME>=LOWEST,<BOUND"),
        ("numpy>=2", "is not NAME>=LOWEST,<BOUND"),
        ("numpy>=2.0,<2", "allows no version"),
        ("numpy>=1..2,<3", "is not a release version"),
    ],
)
def test_a_bad_line_is_one_error_naming_the_file_and_line(tmp_path, line, message):
    path = tmp_path / "ranges.txt"
    path.write_text(f"# a comment\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as error:
        read_ranges(str(path))
    assert str(error.value).startswith(f"{path}:2: ")


def test_a_name_given_twice_is_refused(tmp_path):
    path = tmp_path / "ranges.txt"
    path.write_text("Jinja2>=3.1,<4\njinja2>=3.0,<4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="jinja2 has a range already"):
        read_ranges(str(path))


def test_versions_compare_as_releases_and_ignore_local_labels():
    assert parse_version("2.13") == parse_version("2.13.0") == parse_version("2.13.0+cpu")
    assert parse_version("0.9") < parse_version("0.21.2") < parse_version("0.22")
    assert Range("torch", "2.13.0", "2.14").contains("2.13.0+cpu")
    assert not Range("torch", "2.13.0", "2.14").contains("2.14.0")
    assert normalize("Typing_Extensions") == normalize("typing.extensions") == "typing-extensions"


def test_the_writer_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "ranges.txt"
    path.write_text("torch\n", encoding="utf-8")
    out = tmp_path / "lowest.txt"
    assert wheel_requirements.main(["--requirements", str(path), "--lowest-constraints", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'torch' is not NAME>=LOWEST,<BOUND" in err
    assert not out.exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
