"""Thin macros for edgeshare's targets: copts and include prefix for C++, and one rule per schema.

Labels into this repo are written Label("//...") so that they resolve when an embedder loads this
file as @edgeshare//tools:build_defs.bzl.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("@rules_python//python:defs.bzl", "py_library")

# The runtime throws nothing: errors travel as Error / Result<T>.
RUNTIME_COPTS = [
    "-fno-exceptions",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
]

def _prefix():
    return "edgeshare/" + native.package_name()

def edgeshare_cc_library(name, copts = [], **kwargs):
    """A runtime cc_library whose headers are included as "edgeshare/<package>/<header>".

    Args:
      name: the target name, after its main header.
      copts: extra compiler options, after RUNTIME_COPTS.
      **kwargs: passed to cc_library.
    """
    cc_library(
        name = name,
        copts = RUNTIME_COPTS + copts,
        include_prefix = _prefix(),
        **kwargs
    )

def edgeshare_cc_binary(name, copts = [], **kwargs):
    """A cc_binary built with the runtime's copts.

    Args:
      name: the target name.
      copts: extra compiler options, after RUNTIME_COPTS.
      **kwargs: passed to cc_binary.
    """
    cc_binary(
        name = name,
        copts = RUNTIME_COPTS + copts,
        **kwargs
    )

def edgeshare_cc_test(name, deps = [], **kwargs):
    """A GoogleTest cc_test (gtest_main is added to deps).

    Args:
      name: the target name, after the file it tests ("foo_test" for foo_test.cc).
      deps: the code under test and its helpers.
      **kwargs: passed to cc_test.
    """
    cc_test(
        name = name,
        deps = deps + [Label("//third_party/googletest:gtest_main")],
        **kwargs
    )

def edgeshare_flatbuffer_library(name, srcs, deps = [], visibility = None):
    """Generates C++ and Python code for one FlatBuffers schema with the flatc of the Python venv.

    Makes ":<name>_cc_fbs" (a cc_library of "<schema>_generated.h", included as
    "edgeshare/<package>/<schema>_generated.h"), ":<name>_py_fbs" (a py_library of
    "<schema>_generated.py", imported as edgeshare.<package path>.<schema>_generated) and
    ":<name>_includes" (the schema and those it includes, for schemas that include this one).
    Schemas include one another by workspace-relative path: include "schema/scalar_type.fbs";

    Args:
      name: the schema's name.
      srcs: the one .fbs file.
      deps: edgeshare_flatbuffer_library names of the schemas that srcs includes.
      visibility: visibility of the generated targets.
    """
    if len(srcs) != 1 or not srcs[0].endswith(".fbs"):
        fail("edgeshare_flatbuffer_library(%s): srcs must be one .fbs file" % name)
    src = srcs[0]
    base = src[:-len(".fbs")]
    flatc = Label("@edgeshare_python//:flatc")
    root = Label("//:BUILD.bazel").workspace_root or "."

    native.filegroup(
        name = name + "_includes",
        srcs = srcs + [dep + "_includes" for dep in deps],
        visibility = visibility,
    )
    native.genrule(
        name = name + "_cc_gen",
        srcs = [src, name + "_includes"],
        outs = [base + "_generated.h"],
        tools = [flatc],
        cmd = ("$(location {flatc}) --cpp --gen-object-api --keep-prefix --include-prefix edgeshare " +
               "-I {root} -o $(@D) $(location {src})").format(flatc = flatc, root = root, src = src),
    )
    cc_library(
        name = name + "_cc_fbs",
        hdrs = [base + "_generated.h"],
        include_prefix = _prefix(),
        deps = [dep + "_cc_fbs" for dep in deps] + [Label("@edgeshare_python//:flatbuffers")],
        visibility = visibility,
    )
    native.genrule(
        name = name + "_py_gen",
        srcs = [src, name + "_includes"],
        outs = [base + "_generated.py"],
        tools = [flatc],
        cmd = ("$(location {flatc}) --python --gen-object-api --gen-onefile --gen-all " +
               "-I {root} -o $(@D) $(location {src})").format(flatc = flatc, root = root, src = src),
    )
    py_library(
        name = name + "_py_fbs",
        srcs = [base + "_generated.py"],
        deps = [dep + "_py_fbs" for dep in deps],
        visibility = visibility,
    )
