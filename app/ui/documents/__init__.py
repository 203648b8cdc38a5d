"""The Documents page (page.py) and its parts: a collection's files (collection_view.py, file_table.py),
indexing's progress (progress_strip.py), the models recommended for this machine (suggestions.py)."""
