"""Ollama's API (`/api/...`): generation, embeddings, the model routes and pulls, in its shapes."""
