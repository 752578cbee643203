"""Ways to use edgeshare's C++ runtime from other languages (extension/python: from Python)."""
