"""The OpenAI-compatible HTTP API (FastAPI + uvicorn on its own thread). Imports core, never ui."""
