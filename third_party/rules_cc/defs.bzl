"""@rules_cc//cc:defs.bzl for Bazel 4.2.3: the native C++ rules under the names rules_cc gives them.

@bazel_tools//tools/cpp loads cc_toolchain and cc_toolchain_suite from here, so both are exported.
"""

# buildifier: disable=native-cc
cc_binary = native.cc_binary

# buildifier: disable=native-cc
cc_import = native.cc_import

# buildifier: disable=native-cc
cc_library = native.cc_library

# buildifier: disable=native-cc
cc_test = native.cc_test

# buildifier: disable=native-cc
cc_toolchain = native.cc_toolchain

# buildifier: disable=native-cc
cc_toolchain_suite = native.cc_toolchain_suite
