"""Hearth's Qt views: the only package that imports PySide6."""
