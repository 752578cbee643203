"""The wheel's requirement ranges (wheel_requirements.txt), and the constraints that pin their lowest end.

    wheel_requirements.py --lowest-constraints lowest_constraints.txt --requirements wheel_requirements.txt

Each line of the ranges file is `NAME>=LOWEST,<BOUND`: LOWEST is a version the low-end wheel test
installs and passes with, BOUND the first version not vouched for. Only this one shape is accepted,
so that a range's ends are plain release versions the tests can install and compare (standard
library only: build_wheel.py runs it before any venv exists).
"""

import argparse
import dataclasses
import re
import sys
from typing import Dict, Sequence, Tuple

__all__ = ["Range", "lowest_constraints", "normalize", "parse_version", "read_lock", "read_ranges"]

_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9.]*)\s*,\s*<\s*([0-9][0-9.]*)$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_version(text: str) -> Tuple[int, ...]:
    """A release version's numbers, trailing zeros dropped (2.13 == 2.13.0); a local label ("+cpu")
    is ignored, as pip ignores it against a range.

    Raises:
      ValueError: text is not a release version (no pre-, post- or dev-releases).
    """
    release = text.strip().split("+", 1)[0]
    if not _VERSION.match(release):
        raise ValueError(f"'{text}' is not a release version such as 2.13.0")
    numbers = [int(part) for part in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


@dataclasses.dataclass(frozen=True)
class Range:
    """One requirement: NAME>=lowest,<bound.

    Attributes:
      name: the distribution's name as written.
      lowest: the lowest version allowed (and tested).
      bound: the first version not allowed.
    """

    name: str
    lowest: str
    bound: str

    def __str__(self) -> str:
        return f"{self.name}>={self.lowest},<{self.bound}"

    def contains(self, version: str) -> bool:
        """Whether version lies in the range."""
        return parse_version(self.lowest) <= parse_version(version) < parse_version(self.bound)


def read_ranges(path: str) -> Dict[str, Range]:
    """The ranges file's requirements by normalized name.

    Raises:
      ValueError: a line is not NAME>=LOWEST,<BOUND, its LOWEST is not below its BOUND, or a name
        comes twice; the message names the file and line.
    """
    ranges: Dict[str, Range] = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            where = f"{path}:{number}"
            match = _LINE.match(line)
            if match is None:
                raise ValueError(f"{where}: '{line}' is not NAME>=LOWEST,<BOUND")
            requirement = Range(*match.groups())
            try:
                lowest, bound = parse_version(requirement.lowest), parse_version(requirement.bound)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            if lowest >= bound:
                raise ValueError(f"{where}: {requirement} allows no version")
            key = normalize(requirement.name)
            if key in ranges:
                raise ValueError(f"{where}: {requirement.name} has a range already")
            ranges[key] = requirement
    return ranges


def read_lock(path: str) -> Dict[str, str]:
    """The lock's NAME==VERSION pins: version by normalized name."""
    pins = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[normalize(name)] = version.strip()
    return pins


def lowest_constraints(ranges: Dict[str, Range]) -> str:
    """A pip constraints file pinning every range to its lowest version."""
    header = "# Made from the wheel's ranges (wheel_requirements.txt): each at its lowest version.\n"
    return header + "".join(f"{r.name}=={r.lowest}\n" for r in sorted(ranges.values(), key=lambda r: normalize(r.name)))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requirements", required=True, help="the ranges file")
    parser.add_argument("--lowest-constraints", required=True, help="the constraints file to write")
    args = parser.parse_args(argv)
    try:
        ranges = read_ranges(args.requirements)
    except ValueError as e:
        print(f"wheel_requirements: {e}", file=sys.stderr)
        return 1
    with open(args.lowest_constraints, "w", encoding="utf-8") as f:
        f.write(lowest_constraints(ranges))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
