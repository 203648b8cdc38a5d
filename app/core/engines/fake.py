"""A deterministic engine for tests and demos: whitespace tokens, scripted or pseudo-random words,
a configurable speed, prefill delay and fault injection. Never in `default_registry()`."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from app.core.engines.base import (
    Capabilities,
    ChatMessage,
    Chunk,
    Embeddings,
    FinishReason,
    GenerateRequest,
    GenerationStats,
    LoadSpec,
    Logprobs,
    ModelInfo,
    Rankings,
    TokenLogprob,
    check_logit_bias,
    check_prompt_size,
)
from app.core.engines.embed_limits import check_cancel, check_embed_texts, check_embed_tokens
from app.core.engines.errors import ContextLengthExceeded, EngineError, Unsupported
from app.core.engines.fill_in_middle import not_trained_for_it
from app.core.engines.images import decode_image, no_vision
from app.core.engines.registry import EngineRegistry
from app.core.engines.rerank_limits import check_pair_tokens, check_rerank_texts
from app.core.engines.stops import StopScanner

logger = logging.getLogger(__name__)

FAKE_VOCAB = 50_000
WORDS = (
    "the a hearth fire warm stone kettle night lamp river bread window quiet tale old road "
    "small bright wind door candle winter book garden ember song"
).split()


def _token_id(word: str) -> int:
    return zlib.crc32(word.encode("utf-8")) % FAKE_VOCAB


IMAGE_WORDS = 4  # the prompt words one image becomes
UNLIKELY = -30.0  # the fake model's logit for a token outside its word list (a bias can still force it)


class _FakeDistribution:
    """The fake model's logits at each step, made only when a request asks for logprobs or a logit_bias:
    the word it would emit scores 0, the other words -g, -2g, … (g and their order fixed by the step and that word),
    and any other biased id UNLIKELY. The chosen word is the argmax after the bias (the fake is greedy)."""

    def __init__(self, bias: dict[int, float], seed: int) -> None:
        self.bias = bias
        self.seed = seed
        self.words = {_token_id(w): w for w in WORDS}

    def step(self, natural: str, n: int) -> tuple[int, dict[int, float]]:
        """(the token to emit, raw logits by id) for the step whose own choice is `natural`."""
        others = [w for w in WORDS if w != natural]
        rng = random.Random(self.seed ^ zlib.crc32(f"{n}:{natural}".encode()))
        rng.shuffle(others)
        gap = 0.5 + rng.random()  # so the chosen word's probability differs from step to step
        logits = {_token_id(natural): 0.0}
        for rank, word in enumerate(others):
            logits.setdefault(_token_id(word), -gap * (1 + rank))
        for token in self.bias:
            logits.setdefault(token, UNLIKELY)
        chosen = max(logits, key=lambda t: (logits[t] + self.bias.get(t, 0.0), -t))
        return chosen, logits

    def word(self, token: int, natural: str) -> str:
        if token == _token_id(natural):
            return natural
        return self.words.get(token, f"tok{token}")


def _fake_logprobs(
    dist: _FakeDistribution, logits: dict[int, float], token: int, n_top: int, natural: str, space: str
) -> Logprobs:
    top = max(logits.values())
    lse = top + math.log(sum(math.exp(v - top) for v in logits.values()))

    def entry(t: int) -> TokenLogprob:
        return TokenLogprob(t, (space + dist.word(t, natural)).encode(), logits[t] - lse)

    ranked = sorted(logits, key=lambda t: (-logits[t], t))[:n_top]
    return Logprobs(entry(token), tuple(entry(t) for t in ranked))


class FakeEngine:
    """Loads any path. Prompt tokens are whitespace-separated words of the rendered prompt.

    tok_s: decode rate (0 = as fast as possible); script: words to emit, then finish "stop";
    prompt_batch / prompt_batch_delay_s: prefill in batches with a delay each (cancel between);
    fail_on_load: True, a message, or a predicate on the path; raise_on_token: fail at that index.
    embed_delay_s: each embeddings input takes that long, without looking at cancel (a native decode);
    `embedded` counts the inputs embedded. An input may have at most n_ctx words.
    rerank: whether a loaded model ranks (True, or a predicate on the path): a document scores the share of the
    query's words it holds, and a pair (query, document and 3 markers) may have at most n_ctx words;
    `ranked` counts the documents scored, each taking embed_delay_s. fim: whether `suffix` (fill in the
    middle) is taken; its prompt is the words of "<fim_prefix> PROMPT <fim_suffix> SUFFIX <fim_middle>".
    logit_bias and logprobs follow `_FakeDistribution`: greedy over fixed logits, so tests know the answer.
    """

    name = "fake"
    format = "fake"

    def __init__(
        self,
        *,
        tok_s: float = 0.0,
        script: list[str] | str | Callable[[GenerateRequest], str] | None = None,
        prompt_batch: int = 8,
        prompt_batch_delay_s: float = 0.0,
        fail_on_load: bool | str | Callable[[Path], bool] = False,
        raise_on_token: int | None = None,
        load_delay_s: float = 0.0,
        embed_delay_s: float = 0.0,
        rerank: bool | Callable[[Path], bool] = True,
        seed: int = 0,
        fim: bool = True,
        vision: bool | Callable[[Path], bool] = False,
    ) -> None:
        self.tok_s = tok_s
        self.fim = fim  # whether it has fill-in-the-middle tokens (`suffix`)
        # Whether it takes images (each is IMAGE_WORDS prompt words); a callable answers for each model it loads.
        self.vision_models = vision
        self.vision = bool(vision) if not callable(vision) else False
        # Words to emit; a callable writes each request's reply (a model that calls a tool, then answers).
        self.script = script.split() if isinstance(script, str) else script
        self.prompt_batch = max(1, prompt_batch)
        self.prompt_batch_delay_s = prompt_batch_delay_s
        self.fail_on_load = fail_on_load
        self.raise_on_token = raise_on_token
        self.load_delay_s = load_delay_s
        self.embed_delay_s = embed_delay_s
        self.embedded = 0
        self.rerank_models = rerank
        self.ranked = 0
        self.seed = seed
        self.capabilities = Capabilities(chat=True, completion=True, embeddings=True, logprobs=True, vision=self.vision)
        self.info: ModelInfo | None = None
        self._cache: list[str] = []  # words whose "KV" is cached: prompt + generated
        self.loads = 0
        self.unloads = 0
        self.generations: list[GenerateRequest] = []

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self, spec: LoadSpec) -> ModelInfo:
        fail = self.fail_on_load(spec.path) if callable(self.fail_on_load) else self.fail_on_load
        if self.load_delay_s:
            time.sleep(self.load_delay_s)
        if fail:
            raise EngineError(fail if isinstance(fail, str) else f"fake engine failed to load {spec.path.name}")
        self.loads += 1
        self._cache = []
        ranks = self.rerank_models(spec.path) if callable(self.rerank_models) else self.rerank_models
        if callable(self.vision_models):
            self.vision = bool(self.vision_models(spec.path))
        self.capabilities = self.capabilities.model_copy(update={"rerank": bool(ranks), "vision": self.vision})
        self.info = ModelInfo(
            path=spec.path,
            format="fake",
            n_ctx=spec.n_ctx,
            n_vocab=FAKE_VOCAB,
            chat_template=None,
            template_notice=None,
            extra={"projector": "fake-mmproj" if self.vision else ""},
        )
        return self.info

    def unload(self) -> None:
        if self.info is not None:
            self.unloads += 1
        self.info = None
        self._cache = []

    # -- tokens ----------------------------------------------------------------------------------
    def render(self, request: GenerateRequest) -> str:
        if request.messages is not None:
            return "\n".join(f"{m.role}: {self._seen(m)}" for m in request.messages) + "\nassistant:"
        if request.suffix is not None:
            if not self.fim:
                raise not_trained_for_it(self.info.path.name if self.info is not None else "this model")
            return f"<fim_prefix> {request.prompt or ''} <fim_suffix> {request.suffix} <fim_middle>"
        return request.prompt or ""

    def _seen(self, message: ChatMessage) -> str:
        """A message's text with each image as IMAGE_WORDS words naming its first bytes' hash."""
        if not message.images:
            return message.content
        if not self.vision:
            raise no_vision(self.info.path.name if self.info is not None else "this model")
        text, pos, parts = message.content, 0, []
        for image in sorted(message.images, key=lambda i: i.offset):
            decoded = decode_image(image.data)
            parts += [text[pos : image.offset], f" {' '.join([f'img:{decoded.digest[:8]}'] * IMAGE_WORDS)} "]
            pos = image.offset
        return "".join([*parts, text[pos:]])

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        return [_token_id(w) for w in text.split()]

    def count_tokens(self, request: GenerateRequest) -> int:
        check_prompt_size(request)
        return len(self.render(request).split())

    def embed(self, texts: list[str], cancel: threading.Event | None = None) -> Embeddings:
        info = self._require_loaded()
        check_embed_texts(texts)  # as the llama.cpp engine refuses them, before tokenizing
        words = [text.lower().split() for text in texts]
        check_embed_tokens([len(w) for w in words], info.n_ctx)
        out: list[list[float]] = []
        for ws in words:
            check_cancel(cancel, len(out), len(words))
            if self.embed_delay_s:
                time.sleep(self.embed_delay_s)
            vec = [0.0] * 16
            for w in ws:
                vec[_token_id(w) % 16] += 1.0
            norm = sum(v * v for v in vec) ** 0.5 or 1.0
            out.append([v / norm for v in vec])
            self.embedded += 1
        return Embeddings(out, sum(len(w) for w in words))

    def rerank(self, query: str, documents: list[str], cancel: threading.Event | None = None) -> Rankings:
        info = self._require_loaded()
        if not self.capabilities.rerank:
            raise Unsupported("this model is a chat model, not a reranker")
        check_rerank_texts(query, documents)  # as the llama.cpp engine refuses them, before tokenizing
        asked = query.lower().split()
        words = [document.lower().split() for document in documents]
        lengths = [len(asked) + len(w) + 3 for w in words]
        check_pair_tokens(len(asked), lengths, info.n_ctx)
        scores: list[float] = []
        for ws in words:
            check_cancel(cancel, len(scores), len(words), "documents")
            if self.embed_delay_s:
                time.sleep(self.embed_delay_s)
            scores.append(len(set(asked) & set(ws)) / len(set(asked)))
            self.ranked += 1
        return Rankings(scores, sum(lengths))

    def _require_loaded(self) -> ModelInfo:
        if self.info is None:
            raise EngineError("no model is loaded")
        return self.info

    # -- generation ------------------------------------------------------------------------------
    def _words(self, prompt: list[str], request: GenerateRequest) -> Iterator[str]:
        if callable(self.script):
            yield from self.script(request).split()
            return
        if self.script is not None:
            yield from self.script
            return
        rng = random.Random(self.seed ^ zlib.crc32(" ".join(prompt).encode("utf-8")))
        while True:
            yield rng.choice(WORDS)

    def generate(self, request: GenerateRequest, cancel: threading.Event) -> Iterator[Chunk]:
        """Request problems raise here, before anything runs (as the real engines do)."""
        info = self._require_loaded()
        self.generations.append(request)
        check_prompt_size(request)
        prompt = self.render(request).split()
        if len(prompt) >= info.n_ctx:
            raise ContextLengthExceeded(len(prompt), info.n_ctx)
        check_logit_bias(request.sampling.logit_bias, info.n_vocab)
        return self._stream(request, cancel, info, prompt)

    def _stream(
        self, request: GenerateRequest, cancel: threading.Event, info: ModelInfo, prompt: list[str]
    ) -> Iterator[Chunk]:
        reuse = 0
        while reuse < min(len(prompt), len(self._cache)) and prompt[reuse] == self._cache[reuse]:
            reuse += 1
        reuse = min(reuse, len(prompt) - 1) if prompt else 0  # llama.cpp re-evaluates the last token
        self._cache = prompt[:reuse]
        stats = GenerationStats(prompt_tokens=len(prompt), prompt_tokens_evaluated=len(prompt) - reuse)
        t0 = time.perf_counter()
        for start in range(reuse, len(prompt), self.prompt_batch):
            if cancel.is_set():
                stats.prompt_tokens_evaluated = start - reuse
                yield Chunk(finish_reason="cancelled", stats=stats)
                return
            if self.prompt_batch_delay_s and cancel.wait(self.prompt_batch_delay_s):
                stats.prompt_tokens_evaluated = start - reuse
                yield Chunk(finish_reason="cancelled", stats=stats)
                return
            self._cache.extend(prompt[start : start + self.prompt_batch])
        t_prompt = time.perf_counter()
        stats.prompt_tok_s = stats.prompt_tokens_evaluated / max(t_prompt - t0, 1e-9)
        limit = info.n_ctx - len(prompt)
        if request.sampling.max_tokens is not None:
            limit = min(limit, request.sampling.max_tokens)
        stops = StopScanner(request.sampling.stop)
        finish: FinishReason = "stop"
        n = 0
        t_first = t_prompt
        words = self._words(prompt, request)
        sp = request.sampling
        dist = _FakeDistribution(sp.logit_bias, self.seed) if sp.logit_bias or sp.logprobs is not None else None
        while True:
            if cancel.is_set():
                finish = "cancelled"
                break
            if n >= limit:
                finish = "length"
                break
            word = next(words, None)
            if word is None:
                break
            if self.raise_on_token is not None and n == self.raise_on_token:
                raise EngineError(f"fake engine failed at token {n}")
            if self.tok_s > 0 and cancel.wait(1.0 / self.tok_s):
                finish = "cancelled"
                break
            n += 1
            if n == 1:
                t_first = time.perf_counter()
                stats.time_to_first_token_s = t_first - t0
            token, logprobs = _token_id(word), None
            if dist is not None:
                natural = word
                token, logits = dist.step(natural, n)
                word = dist.word(token, natural)
                if sp.logprobs is not None:
                    space = "" if n == 1 else " "
                    logprobs = _fake_logprobs(dist, logits, token, sp.logprobs, natural, space)
            self._cache.append(word)
            text = stops.feed(word if n == 1 else " " + word)
            yield Chunk(text=text, token=token, logprobs=logprobs)
            if stops.hit is not None:
                break
        t_end = time.perf_counter()
        stats.generated_tokens = n
        stats.decode_tok_s = (n - 1) / (t_end - t_first) if n > 1 and t_end > t_first else 0.0
        yield Chunk(text=stops.flush(), finish_reason=finish, stats=stats, stop_sequence=stops.hit)


def registry_with_fake(engines: list[FakeEngine] | None = None, **engine_kwargs) -> EngineRegistry:
    """A registry with only "fake" → FakeEngine(**engine_kwargs); created engines go to `engines`."""

    def factory() -> FakeEngine:
        engine = FakeEngine(**engine_kwargs)
        if engines is not None:
            engines.append(engine)
        return engine

    registry = EngineRegistry()
    registry.register("fake", "fake engine", factory)
    return registry
