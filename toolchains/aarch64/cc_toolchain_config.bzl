"""cc_toolchain_config for Debian's aarch64 cross compiler (g++-aarch64-linux-gnu) and the sysroot of
Debian arm64 libraries that setup.sh unpacks (see BUILD.bazel)."""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
    "with_feature_set",
)

_COMPILE_ACTIONS = [
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
    ACTION_NAMES.c_compile,
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
    ACTION_NAMES.cpp_module_compile,
    ACTION_NAMES.cpp_module_codegen,
    ACTION_NAMES.linkstamp_compile,
]

_LINK_ACTIONS = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

def _impl(ctx):
    sysroot = ctx.attr.sysroot
    lib_dir = sysroot + "/usr/lib/aarch64-linux-gnu"
    tool_paths = [
        tool_path(name = name, path = "/usr/bin/aarch64-linux-gnu-" + tool)
        for name, tool in [
            ("gcc", "gcc"),
            ("ld", "ld"),
            ("ar", "ar"),
            ("cpp", "cpp"),
            ("gcov", "gcov"),
            ("nm", "nm"),
            ("objdump", "objdump"),
            ("strip", "strip"),
        ]
    ]
    features = [
        # No supports_dynamic_linker: tests link their libraries statically (alwayslink ones whole),
        # as GCC's default --as-needed would drop the shared libraries that only register kernels.
        feature(name = "supports_pic", enabled = True),
        feature(
            name = "default_compile_flags",
            enabled = True,
            flag_sets = [
                flag_set(
                    actions = _COMPILE_ACTIONS,
                    flag_groups = [flag_group(flags = [
                        "-U_FORTIFY_SOURCE",
                        "-fstack-protector",
                        "-Wall",
                        "-fno-omit-frame-pointer",
                        # The arm64 libraries' headers: OpenSSL's configuration.h is in the
                        # multiarch directory, the rest in usr/include.
                        "-isystem",
                        sysroot + "/usr/include/aarch64-linux-gnu",
                        "-isystem",
                        sysroot + "/usr/include",
                        # Same file, same object: no build paths or times in the output.
                        "-Wno-builtin-macro-redefined",
                        "-D__DATE__=\"redacted\"",
                        "-D__TIMESTAMP__=\"redacted\"",
                        "-D__TIME__=\"redacted\"",
                    ])],
                ),
                flag_set(
                    actions = _COMPILE_ACTIONS,
                    flag_groups = [flag_group(flags = ["-g0", "-O2", "-DNDEBUG", "-ffunction-sections", "-fdata-sections"])],
                    with_features = [with_feature_set(features = ["opt"])],
                ),
                flag_set(
                    actions = _COMPILE_ACTIONS,
                    flag_groups = [flag_group(flags = ["-g"])],
                    with_features = [with_feature_set(features = ["dbg"])],
                ),
            ],
        ),
        feature(
            name = "default_link_flags",
            enabled = True,
            flag_sets = [
                flag_set(
                    actions = _LINK_ACTIONS,
                    flag_groups = [flag_group(flags = [
                        "-L" + lib_dir,
                        "-Wl,-rpath-link," + lib_dir,
                        "-Wl,-no-as-needed",
                        "-Wl,-z,relro,-z,now",
                        "-pass-exit-codes",
                        "-lstdc++",
                        "-lm",
                    ])],
                ),
                flag_set(
                    actions = _LINK_ACTIONS,
                    flag_groups = [flag_group(flags = ["-Wl,--gc-sections"])],
                    with_features = [with_feature_set(features = ["opt"])],
                ),
            ],
        ),
        feature(name = "opt"),
        feature(name = "dbg"),
        feature(name = "fastbuild"),
    ]

    # buildifier: disable=native-cc-common
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        cxx_builtin_include_directories = [
            "/usr/aarch64-linux-gnu/include",
            "/usr/lib/gcc-cross/aarch64-linux-gnu/12/include",
            "/usr/lib/gcc-cross/aarch64-linux-gnu/12/include-fixed",
            sysroot + "/usr/include",
        ],
        toolchain_identifier = "aarch64-linux-gnu",
        host_system_name = "x86_64-unknown-linux-gnu",
        target_system_name = "aarch64-unknown-linux-gnu",
        target_cpu = "aarch64",
        target_libc = "glibc",
        compiler = "gcc",
        abi_version = "aarch64",
        abi_libc_version = "glibc",
        tool_paths = tool_paths,
    )

aarch64_cc_toolchain_config = rule(
    implementation = _impl,
    attrs = {
        "sysroot": attr.string(mandatory = True),
    },
    provides = [CcToolchainConfigInfo],
)
