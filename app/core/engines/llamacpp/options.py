"""Helpers for the llama.cpp engine: load keyword arguments, grammars, streamed text, memory.

Nothing here imports llama_cpp at module level; callers pass the module in.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from app.core.engines.base import GenerateRequest, LoadSpec, SamplingParams
from app.core.engines.decoding.stops import StopScanner
from app.core.engines.errors import EngineError
from app.core.engines.llamacpp.log import stderr_excerpt
from app.core.native import import_native
from app.core.tools.schema_grammar import check_gbnf, schema_to_gbnf
from app.core.tools.schema_limits import SchemaTooComplex

logger = logging.getLogger(__name__)

_CACHE_TYPES = {"f32": "GGML_TYPE_F32", "f16": "GGML_TYPE_F16", "q8_0": "GGML_TYPE_Q8_0", "q4_0": "GGML_TYPE_Q4_0"}


THREADS_ENV = "HEARTH_THREADS"  # the engine's CPU threads, where the user (or a parallel test run) sets them


def default_threads() -> int:
    """The CPU threads a load uses unless told: HEARTH_THREADS where set to a whole number, else the physical
    cores. Two engines in two processes on the same cores (a test run with two workers, a second app) each
    spinning on all of them wait on each other's barriers; the variable gives each its share."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            logger.warning("%s=%r is not a whole number; using the physical cores", THREADS_ENV, value)
    return physical_cores()


FIXED_THREADS_ENV = "HEARTH_FIXED_THREADS"  # "1": every step on all the load's threads, however busy the cores


def adaptive_threads() -> bool:
    """Whether a step's threads follow the cores the machine's other work leaves (llamacpp.cpu_share);
    HEARTH_FIXED_THREADS=1 turns it off (the bench compares the two)."""
    return os.environ.get(FIXED_THREADS_ENV, "").strip() not in ("1", "true", "yes")


def physical_cores() -> int:
    """Physical cores; llama-cpp-python's own default (logical // 2) is 1 on a 2-vCPU machine."""
    try:
        import psutil

        count = psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or unable to read the topology
        count = None
    return max(1, count or os.cpu_count() or 1)


def cache_type_id(llama_cpp: ModuleType, name: str) -> int:
    key = name.strip().lower()
    if key not in _CACHE_TYPES:
        raise EngineError(f"unknown KV cache type {name!r}; use one of {', '.join(_CACHE_TYPES)}")
    return int(getattr(llama_cpp, _CACHE_TYPES[key]))


def llama_kwargs(llama_cpp: ModuleType, spec: LoadSpec) -> dict[str, Any]:
    """Keyword arguments for `llama_cpp.Llama`, every performance knob explicit."""
    threads = spec.n_threads or default_threads()
    kwargs: dict[str, Any] = {
        "model_path": str(spec.path),
        "n_ctx": spec.n_ctx,
        "n_gpu_layers": spec.n_gpu_layers,
        "n_threads": threads,
        "n_threads_batch": threads,
        "n_batch": min(spec.n_batch, spec.n_ctx),
        "n_ubatch": min(spec.n_ubatch, spec.n_batch, spec.n_ctx),
        "flash_attn": spec.flash_attn,
        "type_k": cache_type_id(llama_cpp, spec.cache_type_k),
        "type_v": cache_type_id(llama_cpp, spec.cache_type_v),
        "use_mmap": spec.use_mmap,
        "use_mlock": spec.use_mlock,
        "embedding": spec.embedding,
        "verbose": False,
    }
    if spec.seed is not None:
        kwargs["seed"] = spec.seed
    return kwargs


def supports_extra_bufts_switch(llama_cpp: ModuleType) -> bool:
    """Whether this llama-cpp-python's model params carry `use_extra_bufts` (llama.cpp's --no-repack); an older
    one would take the attribute silently and change nothing."""
    params = getattr(llama_cpp, "llama_model_params", None)
    return any(name == "use_extra_bufts" for name, *_ in getattr(params, "_fields_", ()))


_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def model_params_for(llama_cpp: ModuleType, spec: LoadSpec) -> Iterator[None]:
    """While `Llama(...)` runs, its model params follow `spec` where its keyword arguments cannot reach:
    `Llama` takes no `use_extra_bufts`, and builds its params from `llama_model_default_params()`, so that
    function answers with the switch set for the duration (serialised: another load must not see it)."""
    if spec.extra_bufts or not supports_extra_bufts_switch(llama_cpp):
        yield
        return
    bindings: Any = import_native(f"{llama_cpp.__name__}.llama_cpp")
    original = bindings.llama_model_default_params

    def without_extra_bufts():
        params = original()
        params.use_extra_bufts = False
        return params

    with _PARAMS_LOCK:
        bindings.llama_model_default_params = without_extra_bufts
        try:
            yield
        finally:
            bindings.llama_model_default_params = original


def build_grammar(llama_cpp: ModuleType, request: GenerateRequest, vocab: Any):
    """A LlamaGrammar from the request's JSON schema or GBNF, bounded (schema_grammar) and checked by
    llama.cpp's parser, or None. A schema or grammar that cannot be used is SchemaTooComplex (a 400)."""
    if request.json_schema is not None and request.grammar is not None:
        raise EngineError("give either a JSON schema or a grammar, not both")
    if request.json_schema is None and request.grammar is None:
        return None
    what = "JSON schema" if request.json_schema is not None else "grammar"
    if request.json_schema is not None:
        gbnf = schema_to_gbnf(request.json_schema, request.schema_field)
    else:
        gbnf = str(request.grammar)
        check_gbnf(gbnf, "grammar")
    grammar = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)
    # llama-cpp-python does not parse the GBNF; a NULL sampler added to a chain would crash later. llama.cpp's
    # parser prints a grammar it rejects whole to stderr: caught, and logged as an excerpt.
    with stderr_excerpt(what) as caught:
        probe = llama_cpp.llama_sampler_init_grammar(
            vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        caught.failed = not probe
    if not probe:
        param = request.schema_field if request.json_schema is not None else "grammar"
        raise SchemaTooComplex(f"the {what} could not be parsed as a llama.cpp grammar", param)
    llama_cpp.llama_sampler_free(probe)
    return grammar


def plain_greedy(sp: SamplingParams, grammar: Any) -> bool:
    """Whether the token is simply the first largest logit: temperature 0 with no grammar, bias or penalty.
    The engine then takes the argmax of the logits row itself, as llama.cpp's greedy sampler picks it,
    without the sampler copying every vocabulary entry into a candidate array first."""
    return (
        sp.temperature == 0.0
        and grammar is None
        and not sp.logit_bias
        and sp.repeat_penalty == 1.0
        and sp.frequency_penalty == 0.0
        and sp.presence_penalty == 0.0
    )


def add_shaping(chain: Any, llm: Any, sp: SamplingParams) -> None:
    """The stages before any choice: the logit bias first (llama-server's order: every later stage, a grammar
    included, sees the biased logits), then the penalties. Built here because `Llama._init_sampler` takes
    no bias."""
    if sp.logit_bias:
        chain.add_logit_bias(llm.n_vocab(), sp.logit_bias)  # llama.cpp copies the array
    chain.add_penalties(
        n_vocab=llm.n_vocab(),
        penalty_last_n=llm.last_n_tokens_size,
        penalty_repeat=sp.repeat_penalty,
        penalty_freq=sp.frequency_penalty,
        penalty_present=sp.presence_penalty,
    )


def add_picking(chain: Any, sp: SamplingParams, seed: int) -> None:
    """The stages that choose the token: greedy at temperature 0, else top-k, top-p, min-p, temperature, draw."""
    if sp.temperature == 0.0:
        chain.add_greedy()
    else:
        chain.add_top_k(sp.top_k)
        chain.add_top_p(sp.top_p, 1)
        chain.add_min_p(sp.min_p, 1)
        chain.add_temp(sp.temperature)
        chain.add_dist(seed)


def build_sampler(llama_cpp: ModuleType, llm: Any, sp: SamplingParams, seed: int) -> Any:
    """The sampler chain for one generation without a grammar (llamacpp.grammar.GrammarSampler runs the same
    stages around one): the stages `Llama._init_sampler` builds for the knobs we expose, and the bias."""
    chain = import_native(f"{llama_cpp.__name__}._internals").LlamaSampler()
    add_shaping(chain, llm, sp)
    add_picking(chain, sp, seed)
    return chain


class TextStream:
    """Token bytes in, safe text out: buffers split UTF-8 sequences and text that may begin a stop string."""

    def __init__(self, stop: list[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = StopScanner(stop)

    @property
    def stopped(self) -> bool:
        return self._stops.hit is not None

    @property
    def hit(self) -> str | None:
        """The stop string that ended the text, if one did."""
        return self._stops.hit

    def push(self, data: bytes) -> str:
        """The text that can be shown now; `stopped` turns true when a stop string appeared."""
        return self._stops.feed(self._decoder.decode(data))

    def flush(self) -> str:
        """The rest, at the end of a generation that did not hit a stop string."""
        tail = self._stops.feed(self._decoder.decode(b"", final=True))
        return tail + self._stops.flush()


def peak_memory_bytes() -> int:
    """Process resident-set high-water mark, in bytes (0 when unknown)."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux
    except ImportError:  # Windows
        pass
    try:
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss))
    except Exception:
        return 0
