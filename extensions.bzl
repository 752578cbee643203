"""Module extension for Bazel >= 7: the same repository rules WORKSPACE uses, for MODULE.bazel."""

load("//third_party/python:venv.bzl", "python_venv")

def _edgeshare_deps_impl(_module_ctx):
    python_venv(
        name = "edgeshare_python",
        requirements = Label("//third_party/python:requirements.lock"),
    )

edgeshare_deps = module_extension(
    implementation = _edgeshare_deps_impl,
    doc = "Makes @edgeshare_python, the pinned Python environment and flatc.",
)
