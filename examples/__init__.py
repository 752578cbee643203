"""Examples of using edgeshare (examples/embed is a workspace of its own, not a package)."""
