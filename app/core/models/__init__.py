"""Model files: reading and validating GGUF headers, model specs, fit and speed estimates."""
