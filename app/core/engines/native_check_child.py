"""The canary's child process: load one model with the given LoadSpec and decode from a one-token prompt.

Run as `python -m app.core.engines.native_check_child` (or the bundled program with `--hearth-native-check`)
with `{"spec": {...}}` on stdin. It exits 0 after printing its verdict line; a native crash kills it by a
signal, which is the answer the parent wants. It never runs the canary itself.
"""

from __future__ import annotations

import json
import logging
import sys
import threading

from app.core.engines.native_guard import RESULT_MARK


def _say(result: dict) -> None:
    sys.stdout.write(RESULT_MARK + json.dumps(result) + "\n")
    sys.stdout.flush()


def check(payload: dict) -> dict:
    """Load, decode two tokens (or embed or score one input), unload; an ordinary failure comes back as
    {"ok": False, "error": ...}."""
    from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
    from app.core.engines.errors import EngineError
    from app.core.engines.llamacpp import LlamaCppEngine

    try:
        spec = LoadSpec(**payload["spec"])
    except Exception as exc:
        return {"ok": False, "error": f"bad check request: {exc}"}
    engine = LlamaCppEngine(checked=False)
    try:
        info = engine.load(spec)
        # A model loaded for embeddings or ranking runs its own decode path: that is the one to try.
        if engine.capabilities.rerank:
            return {"ok": True, "n_ctx": info.n_ctx, "chars": len(engine.rerank("Hi", ["Hi"]).scores)}
        if not engine.capabilities.chat:
            return {"ok": True, "n_ctx": info.n_ctx, "chars": len(engine.embed(["Hi"]).vectors)}
        request = GenerateRequest(prompt="Hi", sampling=SamplingParams(temperature=0.0, max_tokens=2))
        text = "".join(chunk.text for chunk in engine.generate(request, threading.Event()))
        return {"ok": True, "n_ctx": info.n_ctx, "chars": len(text)}
    except EngineError as exc:
        return {"ok": False, "error": str(exc)}
    finally:
        engine.unload()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        payload = json.loads(sys.stdin.read() or "{}")
    except ValueError as exc:
        _say({"ok": False, "error": f"bad check request: {exc}"})
        return 2
    result = check(payload)
    _say(result)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
