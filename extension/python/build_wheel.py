"""Writes a wheel (PEP 427) from a manifest of files, with the standard library only.

    build_wheel.py --manifest M --out edgeshare-0.1.0-cp311-cp311-linux_x86_64.whl \\
        --distribution edgeshare --version 0.1.0 --tag cp311-cp311-linux_x86_64 \\
        --requirements wheel_requirements.txt --requires numpy --extra export:torch \\
        --entry-point edgeshare-generate=edgeshare.x:main

The manifest has one "path in the wheel<TAB>file" line per file. Requirements are the ranges of the
requirements file ("numpy" -> "numpy>=1.26.4,<3"), so that the wheel installs beside other packages;
the lock stays exact for Bazel. The archive is reproducible: entries sorted, one fixed timestamp.
The tag's Python part must be the running interpreter's (the extension module was built against its
headers).
"""

import argparse
import base64
import hashlib
import sys
import zipfile
from typing import Dict, List, Sequence, Tuple

from edgeshare.extension.python.wheel_requirements import Range, normalize, read_ranges

# Zip entries carry this time (the earliest a zip can hold), so that equal inputs give equal bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _range(name: str, ranges: Dict[str, Range]) -> str:
    if normalize(name) not in ranges:
        raise SystemExit(f"build_wheel: {name} has no range in the requirements file")
    return str(ranges[normalize(name)])


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _entry(archive: zipfile.ZipFile, path: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(path, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o755 if executable else 0o644) << 16
    archive.writestr(info, data)


def _metadata(args: argparse.Namespace, ranges: Dict[str, Range]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {args.distribution}",
        f"Version: {args.version}",
        f"Summary: {args.summary}",
        f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*",
    ]
    lines += [f"Requires-Dist: {_range(name, ranges)}" for name in args.requires]
    extras: Dict[str, List[str]] = {}
    for spec in args.extra:
        extra, name = spec.split(":", 1)
        extras.setdefault(extra, []).append(name)
    for extra, names in sorted(extras.items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {_range(name, ranges)} ; extra == "{extra}"' for name in names]
    return "\n".join(lines) + "\n"


def _files(manifest: str) -> List[Tuple[str, str]]:
    with open(manifest, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip()]  # type: ignore[misc]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--distribution", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--summary", default="")
    parser.add_argument("--requirements", required=True, help="NAME>=LOWEST,<BOUND lines")
    parser.add_argument("--requires", action="append", default=[])
    parser.add_argument("--extra", action="append", default=[], help="EXTRA:NAME")
    parser.add_argument("--entry-point", action="append", default=[], help="SCRIPT=MODULE:FUNCTION")
    args = parser.parse_args(argv)

    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if not args.tag.startswith(f"{python}-{python}-"):
        raise SystemExit(f"build_wheel: tag {args.tag} is not for this interpreter ({python}); change the tag")
    try:
        ranges = read_ranges(args.requirements)
    except ValueError as e:
        raise SystemExit(f"build_wheel: {e}") from None
    dist_info = f"{args.distribution}-{args.version}.dist-info"
    contents: Dict[str, bytes] = {}
    for dest, src in _files(args.manifest):
        with open(src, "rb") as f:
            contents[dest] = f.read()
    # The top-level package: Bazel's runfiles make `edgeshare` a namespace package; installed, it is
    # a regular one that knows its version.
    contents.setdefault(
        f"{args.distribution}/__init__.py",
        f'"""edgeshare: many programs over one copy of the foundation weights."""\n\n__version__ = "{args.version}"\n'.encode(),
    )
    contents[f"{dist_info}/METADATA"] = _metadata(args, ranges).encode()
    contents[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: edgeshare build_wheel\nRoot-Is-Purelib: false\nTag: {args.tag}\n"
    ).encode()
    if args.entry_point:
        scripts = "".join(f"{spec.split('=', 1)[0]} = {spec.split('=', 1)[1]}\n" for spec in sorted(args.entry_point))
        contents[f"{dist_info}/entry_points.txt"] = ("[console_scripts]\n" + scripts).encode()
    record = f"{dist_info}/RECORD"
    with zipfile.ZipFile(args.out, "w") as archive:
        lines = []
        for path in sorted(contents):
            _entry(archive, path, contents[path], executable=path.endswith(".so"))
            lines.append(_record_line(path, contents[path]))
        lines.append(f"{record},,")
        _entry(archive, record, ("\n".join(lines) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
