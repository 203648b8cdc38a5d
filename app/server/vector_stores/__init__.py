"""OpenAI's Files and Vector Stores API over the app's document collections (app/core/documents/vector_stores.py)."""
