"""The wheel outside Bazel, as README.md's "With pip" section tells a Python user to use it, at one
end of its requirement ranges.

The section's shell and Python blocks run as written, in order, in a fresh folder holding the built
wheel where the README says Bazel writes it: a fresh venv, pip install of the wheel with [export]
(pip from the machine's configured sources; torch pinned, so the CPU build), the console entry points
(edgeshare-tiny-lora, edgeshare-export, edgeshare-generate), then the Python tour (run, generate,
swap). Lines that run ./bazelw are Bazel's side and are skipped. Then a second fresh venv gets the
wheel alone: it installs nothing but numpy and flatbuffers beside it, the same Python tour prints the
same tokens there, and edgeshare-inspect reads the exported files without torch.

pip installs under the constraints file CONSTRAINTS: the lock (wheel_test, the ranges' top end as
Bazel tests it) or every range at its lowest version (wheel_lowest_test). Each venv's packages that
the file names are at its versions.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Dict, List, Set, Tuple

README = os.environ["README_MD"]
WHEEL = os.environ["WHEEL"]
CONSTRAINTS = os.path.abspath(os.environ["CONSTRAINTS"])  # the scripts run in another folder
# Guards against a hang; installing torch into a fresh venv takes minutes on a loaded 2-core machine.
TIMEOUT_S = 3000


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _blocks(section: str) -> List[Tuple[str, str]]:
    return re.findall(r"```(sh|python)\n(.*?)```", section, flags=re.S)


def _run(script: str, cwd: str, env: dict) -> str:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"{script}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    return proc.stdout


def _pins(path: str) -> Dict[str, str]:
    pins = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[_normalize(name)] = version.strip()
    return pins


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _check_versions(venv: str, cwd: str, env: dict) -> Set[str]:
    """Asserts that the venv's packages named in CONSTRAINTS are at its versions; returns their names.
    pip and setuptools are left out: the venv comes with its own."""
    listed = json.loads(_run(f"{venv}/bin/pip list --format=json", cwd, env))
    installed = {_normalize(p["name"]): p["version"].split("+", 1)[0] for p in listed}
    installed = {name: version for name, version in installed.items() if name not in ("pip", "setuptools")}
    pins = _pins(CONSTRAINTS)
    wrong = {name: (v, pins[name]) for name, v in installed.items() if name in pins and v != pins[name]}
    assert not wrong, f"{venv}: installed (version, constraint): {wrong}"
    return set(installed)


def _python_tour(blocks: List[Tuple[str, str]]) -> str:
    return "\n".join(code for kind, code in blocks if kind == "python")


def test_the_readme_pip_tour_runs_from_a_fresh_venv():
    with open(README, encoding="utf-8") as f:
        blocks = _blocks(_section(f.read(), "With pip"))
    assert [kind for kind, _ in blocks].count("python") >= 1
    # Bazel's per-test folder, which it empties itself (deleting two venvs takes a minute).
    work = tempfile.mkdtemp(prefix="edgeshare_wheel_", dir=os.environ.get("TEST_TMPDIR"))
    wheel_dir = os.path.join(work, "bazel-bin", "extension", "python")
    os.makedirs(wheel_dir)
    shutil.copy(WHEEL, wheel_dir)
    # A clean environment: no Bazel runfiles, no PYTHONPATH; HOME in the folder (the venv's ~).
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8"}
    # pip's configured sources and the network's proxy, where the environment sets them.
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.lower().endswith("_proxy")})
    # Bytecode for torch's thousands of files is most of an install's time here and tests nothing.
    env["PIP_NO_COMPILE"] = "1"
    # In place of the machine's own constraints file, if any: this one pins torch as well.
    env["PIP_CONSTRAINT"] = CONSTRAINTS

    script = []
    for kind, code in blocks:
        if kind == "sh":
            script += [line for line in code.splitlines() if not line.startswith("./bazelw")]
    tour = _python_tour(blocks)
    script.append(f"python - <<'EDGESHARE_TOUR'\n{tour}\nEDGESHARE_TOUR")
    with_export = _run("\n".join(script), work, env)
    exported_with = _check_versions(os.path.join(work, "edgeshare-venv"), work, env)
    assert {"numpy", "flatbuffers", "torch", "transformers", "peft"} <= exported_with, exported_with

    # The wheel alone: numpy is all it pulls, and the tour runs on the files exported above.
    runtime_only = (
        "python3 -m venv runtime_venv\n"
        f"runtime_venv/bin/pip install -q {os.path.join('bazel-bin/extension/python', os.path.basename(WHEEL))}\n"
        "runtime_venv/bin/pip list --format=json > installed.json\n"
        "runtime_venv/bin/edgeshare-inspect --json hf_out/a.pte hf_out/foundation.ptd > inspected.json\n"
        f"runtime_venv/bin/python - <<'EDGESHARE_TOUR'\n{tour}\nEDGESHARE_TOUR"
    )
    alone = _run(runtime_only, work, env)
    with open(os.path.join(work, "installed.json"), encoding="utf-8") as f:
        installed = {p["name"].lower() for p in json.load(f)}
    assert installed - {"pip", "setuptools"} == {"edgeshare", "numpy", "flatbuffers"}, installed
    _check_versions(os.path.join(work, "runtime_venv"), work, env)
    with open(os.path.join(work, "inspected.json"), encoding="utf-8") as f:
        inspected = json.load(f)
    assert sorted(os.path.basename(p) for p in inspected) == ["a.pte", "foundation.ptd"]
    tour_lines = with_export.strip().splitlines()[-len(alone.strip().splitlines()) :]
    assert alone.strip().splitlines() == tour_lines


if __name__ == "__main__":
    import pytest

    raise SystemExit(pytest.main([__file__, "-q"]))
