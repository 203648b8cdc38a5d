"""Errors about model files on disk or on the Hub."""

from app.core.errors import HearthError


class ModelFileError(HearthError):
    """A model file is malformed, hostile or unreadable; the message says what is wrong."""
