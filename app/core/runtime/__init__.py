"""The engine host: one thread owns the loaded engine; jobs in, chunks out, cancel any time."""
