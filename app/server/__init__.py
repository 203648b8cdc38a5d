"""The local HTTP API (FastAPI + uvicorn on its own thread). Imports core, never ui.

One package per dialect (openai, responses, anthropic, ollama) and one for the routes about models
(models); the modules at this level are what they all share."""
