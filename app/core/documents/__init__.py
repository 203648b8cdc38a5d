"""Your documents: collections of files, indexed for search, and what the chat cites."""
