"""Using edgeshare's runtime from Python (edgeshare.extension.python)."""
