"""Discover: models recommended for this machine, Hub search, and a model's variants."""
