"""Hearth's domain: pure Python, no Qt, no web stack (enforced by import-linter)."""
