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

# The compiler flags of each group of kernel files, by what their intrinsics need. A group is a
# set of flags rather than an Isa: with -mfma on, GCC may contract any x * s + b into an FMA, so a
# file whose result must equal XNNPACK's bit for bit (the int8 quantizer) builds with "avx2", not
# "avx2_fma", although the config picks it for the same CPUs. The x86 groups' files build for
# x86-64 only, the aarch64 groups' (ARM_KERNEL_GROUPS) for --config=aarch64 only.
KERNEL_COPTS = {
    "avx2": ["-mavx2"],
    "avx2_fma": [
        "-mavx2",
        "-mfma",
    ],
    "avx2_fma_f16c": [
        "-mavx2",
        "-mfma",
        "-mf16c",
    ],
    "avx512f": ["-mavx512f"],
    "avx512vnni": [
        "-mavx512f",
        "-mavx512bw",
        "-mavx512vl",
        "-mavx512vnni",
    ],
    "avxvnni": [
        "-mavx2",
        "-mavxvnni",
        "-mfma",
    ],
    "avxvnni_f16c": [
        "-mavx2",
        "-mavxvnni",
        "-mfma",
        "-mf16c",
    ],
    # aarch64's baseline (ARMv8.0 with Advanced SIMD): what the cross compiler emits by default.
    "neon": [],
    # The dot product is ARMv8.2's optional FEAT_DotProd; i8mm (FEAT_I8MM, optional from ARMv8.2)
    # comes with it on every core that has it, and the config asks the CPU for both.
    "neondot": ["-march=armv8.2-a+dotprod"],
    "neoni8mm": ["-march=armv8.2-a+dotprod+i8mm"],
}

ARM_KERNEL_GROUPS = ["neon", "neondot", "neoni8mm"]

def x86_only(values):
    """`values` on x86-64, nothing when building for aarch64 (--config=aarch64).

    For the srcs and copts of x86 kernel files: on aarch64 their libraries are empty, and the
    kernel-set tables, whose x86 rows are under `#if defined(__x86_64__)`, hold the other sets.

    Args:
      values: a list of labels or flags.

    Returns:
      A select() of `values` or [].
    """
    return select({
        str(Label("//toolchains/aarch64:aarch64")): [],
        "//conditions:default": values,
    })

def arm_only(values):
    """`values` when building for aarch64 (--config=aarch64), nothing on x86-64.

    For the srcs and copts of aarch64 kernel files, as x86_only() for x86 ones.

    Args:
      values: a list of labels or flags.

    Returns:
      A select() of `values` or [].
    """
    return select({
        str(Label("//toolchains/aarch64:aarch64")): values,
        "//conditions:default": [],
    })

def edgeshare_kernel_libraries(name, kernels, deps = [], visibility = None, **kwargs):
    """One edgeshare_cc_library per kernel file, each built with its group's KERNEL_COPTS.

    A file of an x86 group is compiled for x86-64 only, one of an aarch64 group
    (ARM_KERNEL_GROUPS) for aarch64 (--config=aarch64) only; elsewhere its library is empty.

    A file "foo_avx2.cc" becomes ":foo_avx2"; `name` is a cc_library of all of them, for the
    config that picks among them.

        edgeshare_kernel_libraries(
            name = "gemm_nt_x86_kernels",
            kernels = {
                "avx2_fma_f16c": ["gemm_nt_avx2.cc"],
                "avx512f": ["gemm_nt_avx512.cc"],
            },
            deps = [":gemm_nt_headers"],
        )

    Args:
      name: the target that links every file's library.
      kernels: a dict from a KERNEL_COPTS group to the .cc files built with its flags.
      deps: what the files include (the kind's header, shared blocks), for each file's library.
      visibility: of the target `name`; each file's library keeps the package's default.
      **kwargs: passed to every library (testonly, for one).
    """
    libraries = []
    for group, srcs in kernels.items():
        if group not in KERNEL_COPTS:
            fail("edgeshare_kernel_libraries(%s): unknown group '%s' (one of %s)" %
                 (name, group, ", ".join(sorted(KERNEL_COPTS.keys()))))
        for src in srcs:
            if not src.endswith(".cc"):
                fail("edgeshare_kernel_libraries(%s): '%s' is not a .cc file" % (name, src))
            library = src[:-len(".cc")]
            only = arm_only if group in ARM_KERNEL_GROUPS else x86_only
            edgeshare_cc_library(
                name = library,
                srcs = only([src]),
                copts = only(KERNEL_COPTS[group]),
                deps = deps,
                **kwargs
            )
            libraries.append(":" + library)
    cc_library(
        name = name,
        deps = libraries,
        visibility = visibility,
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
