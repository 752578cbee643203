"""@rules_python//python:defs.bzl for Bazel 4.2.3: the native Python rules under rules_python's names."""

# buildifier: disable=native-python
py_binary = native.py_binary

# buildifier: disable=native-python
py_library = native.py_library

# buildifier: disable=native-python
py_runtime = native.py_runtime

# buildifier: disable=native-python
py_test = native.py_test
