"""edgeshare's backends: each subpackage holds one backend's partitioner and preprocess."""

__all__ = []
