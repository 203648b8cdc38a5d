"""Hugging Face Hub: search, metadata, and grouping a repo's files into what a user chooses."""
