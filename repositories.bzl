"""edgeshare_dependencies(): every repository edgeshare needs, for this workspace and for embedders.

An embedder adds, in its WORKSPACE:

    local_repository(name = "edgeshare", path = "...")  # or any other repository rule
    load("@edgeshare//:repositories.bzl", "edgeshare_dependencies")
    edgeshare_dependencies()
    register_toolchains("@edgeshare_python//:python_toolchain")  # only to build edgeshare's Python

Each repository is wrapped in maybe(), so one the embedder already defines is left alone.
"""

load("@bazel_tools//tools/build_defs/repo:utils.bzl", "maybe")
load("//third_party:shim_repository.bzl", "shim_repository")
load("//third_party/python:venv.bzl", "python_venv")

def edgeshare_dependencies():
    """Defines @rules_cc, @rules_python, @rules_java, @remote_coverage_tools and @edgeshare_python."""
    maybe(
        shim_repository,
        name = "rules_cc",
        files = {
            Label("//third_party:empty.BUILD"): "BUILD.bazel",
            Label("//third_party/rules_cc:cc.BUILD"): "cc/BUILD.bazel",
            Label("//third_party/rules_cc:defs.bzl"): "cc/defs.bzl",
        },
    )
    maybe(
        shim_repository,
        name = "rules_python",
        files = {
            Label("//third_party:empty.BUILD"): "BUILD.bazel",
            Label("//third_party/rules_python:python.BUILD"): "python/BUILD.bazel",
            Label("//third_party/rules_python:defs.bzl"): "python/defs.bzl",
        },
    )
    maybe(
        shim_repository,
        name = "remote_coverage_tools",
        files = {
            Label("//third_party/coverage:coverage.BUILD"): "BUILD.bazel",
        },
    )

    # Debian's bazel-rules-java package; installed by ./bazelw.
    maybe(
        native.local_repository,
        name = "rules_java",
        path = "/usr/share/bazel/rules/java",
    )
    maybe(
        python_venv,
        name = "edgeshare_python",
        requirements = Label("//third_party/python:requirements.lock"),
    )
