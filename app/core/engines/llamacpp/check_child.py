"""The canary's child process: load one model with the given LoadSpec and run what real use will run on it.

A chat model reads a prompt of one full batch (`prompt_tokens`: the batch the load decodes prompts in, so the
batched matrix kernels run, where llama.cpp's AMX kernels crashed while a one-token decode passed), then
generates a few tokens one at a time; a model loaded for embeddings or ranking runs one input that fills its
batch through its pooled path. Run as `python -m app.core.engines.llamacpp.check_child` (or the bundled program
with `--hearth-native-check`) with `{"spec": {...}, "prompt_tokens": n, "generate": k}` on stdin. It exits 0
after printing its verdict line; a native crash kills it by a signal, which is the answer the parent wants.
It never runs the canary itself.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from app.core.engines.canary.guard import CHECK_GENERATE, RESULT_MARK
from app.core.engines.errors import ContextLengthExceeded, EngineError

# Test seam, read by this child only: with extra buffer types on, a decode of more than this many tokens
# crashes the process (a real invalid read), as llama.cpp's AMX kernels did on a full batch (#20824).
FAULT_ENV = "HEARTH_TEST_CHECK_CRASH_ABOVE"
# The prompt's words: ordinary ones, about a token each in any vocabulary.
FILL_WORDS = "the quick brown fox jumps over the lazy dog".split()
# A reranker's pair adds the query and the separators its format puts around them.
PAIR_QUERY = "Which animal jumps?"


def _say(result: dict) -> None:
    sys.stdout.write(RESULT_MARK + json.dumps(result) + "\n")
    sys.stdout.flush()


def check(payload: dict) -> dict:
    """Load, run a full batch through the path the load serves (a prompt then a few generated tokens, or an
    embedding or a ranking), unload; an ordinary failure comes back as {"ok": False, "error": ...}."""
    from app.core.engines.base import LoadSpec
    from app.core.engines.llamacpp.engine import LlamaCppEngine

    try:
        spec = LoadSpec(**payload["spec"])
        asked = payload.get("prompt_tokens")  # None: the whole batch the load opened
        prompt_tokens = max(1, int(asked)) if asked is not None else None
        generate = max(1, int(payload.get("generate", CHECK_GENERATE)))
    except Exception as exc:
        return {"ok": False, "error": f"bad check request: {exc}"}
    _inject_fault(spec.extra_bufts)
    engine = LlamaCppEngine(checked=False)
    try:
        info = engine.load(spec)
        room = min(int(info.extra.get("n_batch") or info.n_ctx), info.n_ctx)
        if prompt_tokens is None:
            prompt_tokens = room
        began = time.monotonic()
        # A model loaded for embeddings or ranking runs its own decode path: that is the one to try.
        if engine.capabilities.rerank:
            ran = _rank(engine, min(prompt_tokens, room))
        elif not engine.capabilities.chat:
            ran = _embed(engine, min(prompt_tokens, room))
        else:
            ran = _generate(engine, min(prompt_tokens, room, info.n_ctx - generate - 1), generate)
        return {"ok": True, "n_ctx": info.n_ctx, **ran, "seconds": round(time.monotonic() - began, 3)}
    except EngineError as exc:
        return {"ok": False, "error": str(exc)}
    finally:
        engine.unload()


def _generate(engine: Any, target: int, generate: int) -> dict[str, Any]:
    from app.core.engines.base import GenerateRequest, SamplingParams

    def request(text: str) -> GenerateRequest:
        return GenerateRequest(prompt=text, sampling=SamplingParams(temperature=0.0, max_tokens=generate))

    text = fill(lambda t: engine.count_tokens(request(t)), target)
    chunks = list(engine.generate(request(text), threading.Event()))
    final = chunks[-1]
    if final.finish_reason == "error":  # llama_decode said no (memory): the in-process load says the same
        raise EngineError(f"the check's generation failed: {final.error or 'no reason given'}")
    stats = final.stats
    return {
        "prompt_tokens": stats.prompt_tokens if stats else engine.count_tokens(request(text)),
        "generated": stats.generated_tokens if stats else len(chunks),
    }


def _embed(engine: Any, target: int) -> dict[str, Any]:
    # Two tokens of room for the specials the embedding adds (BOS, or BERT's CLS and SEP).
    for _ in range(4):
        text = fill(lambda t: len(engine.tokenize(t)) + 2, target)
        try:
            return {"prompt_tokens": engine.embed([text]).prompt_tokens, "vectors": 1}
        except ContextLengthExceeded as exc:  # raised before any decode: shrink by what it was over
            target = _shrunk(target, exc)
    raise EngineError("the check could not fit an input to the embeddings context")


def _rank(engine: Any, target: int) -> dict[str, Any]:
    query = len(engine.tokenize(PAIR_QUERY))
    for _ in range(4):
        document = fill(lambda t: len(engine.tokenize(t)) + query + 4, target)
        try:
            return {"prompt_tokens": engine.rerank(PAIR_QUERY, [document]).prompt_tokens, "scores": 1}
        except ContextLengthExceeded as exc:  # a pair longer than the context is refused before any decode
            target = _shrunk(target, exc)
    raise EngineError("the check could not fit a pair to the reranker's context")


def fill(count: Callable[[str], int], target: int) -> str:
    """Words whose tokens, by `count`, are at most `target` and as near it as whole words allow (one word at
    least)."""
    words = max(1, target)
    while True:
        text = " ".join(FILL_WORDS[i % len(FILL_WORDS)] for i in range(words))
        n = count(text)
        if n <= target or words == 1:
            return text
        words = max(1, min(words - 1, words * target // n))


def _shrunk(target: int, exc: EngineError) -> int:
    over = int(exc.details.get("prompt_tokens", target)) - int(exc.details.get("n_ctx", target))
    return max(1, target - max(over, 1))


def _inject_fault(extra_bufts: bool) -> None:
    """The FAULT_ENV seam: wrap llama.cpp's decode and encode so that a batch over the limit crashes, while
    extra buffer types are on (the AMX crash's condition). Nothing is wrapped when the variable is unset."""
    raw = os.environ.get(FAULT_ENV, "")
    if not raw or not extra_bufts:
        return
    limit = int(raw)
    from app.core.native import import_native

    # The engine calls both: the package's names (the batch runner) and the bindings' (llama-cpp-python's
    # own context, the embeddings path).
    for module in (import_native("llama_cpp"), import_native("llama_cpp.llama_cpp")):
        for name in ("llama_decode", "llama_encode"):
            setattr(module, name, _faulting(getattr(module, name), limit))


def _faulting(native: Callable[..., Any], limit: int) -> Callable[..., Any]:
    def call(ctx: Any, batch: Any) -> Any:
        if int(batch.n_tokens) > limit:
            ctypes.string_at(0)  # a read of address 0: the process dies by SIGSEGV, as in native code
        return native(ctx, batch)

    return call


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
