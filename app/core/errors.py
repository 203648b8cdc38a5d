"""User-facing error types: each message is written to be shown as-is."""


class HearthError(Exception):
    """Base for errors a user may see; `str(err)` is the message to show."""
