"""What context a JIT load asks for: the app's default (8k), the model's trained length (0, what agents
need), or a cap; the planner then lowers it to what fits this machine."""

from __future__ import annotations

from app.core.library import Library, import_path
from app.core.models.devices import GiB
from app.core.runtime.resolve import ModelResolver
from tests.core.runtime.test_preflight import machine
from tests.fixtures.tiny_gguf import write_tiny_llama_gguf


def test_jit_context_setting(tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "long.gguf", n_ctx=65536)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, path).imported[0]
    roomy = lambda: machine(64 * GiB)  # noqa: E731
    try:
        assert ModelResolver(library, roomy).context_length(model) == 8192  # the chat's default
        largest = ModelResolver(library, roomy, max_context=0)
        assert largest.context_length(model) == 65536  # the trained length, since it fits
        # ... which it grows to when a request needs it: it loads at the chat's usual context.
        job = largest(model.name)
        assert (job.spec.n_ctx, job.grow_to) == (8192, 65536)
        largest.max_context = 16384  # a setting change applies to the next plan, not a stale cached one
        assert largest.context_length(model) == 16384
        assert largest(model.name).grow_to == 0  # a context set is the context: it never grows
        tight = ModelResolver(library, lambda: machine(int(0.05 * GiB)), max_context=0)
        assert tight.context_length(model) < 65536  # the planner lowers it to what fits
    finally:
        library.close()


def test_loads_plan_parallel_slots_beside_the_context(tmp_path):
    from app.core.models.memory import LoadOptions
    from app.core.models.planner import plan_load
    from app.core.runtime.preflight import check_model

    path = write_tiny_llama_gguf(tmp_path / "slots.gguf", n_ctx=8192)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, path).imported[0]
    spec = check_model(path, "gguf")
    one = plan_load(spec, machine(64 * GiB), n_ctx=8192, options=LoadOptions(n_ctx=8192))
    two = plan_load(spec, machine(64 * GiB), n_ctx=8192, options=LoadOptions(n_ctx=8192, n_seq=2, kv_unified=False))
    room_for_two = two.estimate.total + (two.estimate.total - one.estimate.total) // 2  # not for a third
    try:
        roomy = ModelResolver(library, lambda: machine(64 * GiB))
        load = roomy.load_spec(model)
        assert (load.slots, load.kv_unified, load.n_ctx) == (8, False, 8192)  # the default, auto: 8, own cells
        roomy.max_slots = 1  # Parallel requests 1: the single-stream path, planned anew
        assert roomy.load_spec(model).slots == 1
        assert load.prompt_cache_mib == 1024  # RAM to spare: the whole prompt cache budget
        tight = ModelResolver(library, lambda: machine(room_for_two), max_slots=4).load_spec(model)
        assert (tight.slots, tight.n_ctx) == (2, 8192)  # fewer slots, the same context
        # Auto keeps half of what one slot leaves free: here that holds no second slot.
        assert ModelResolver(library, lambda: machine(room_for_two)).load_spec(model).slots == 1
        # The RAM cache of evicted conversations gets only what the two slots leave free.
        assert tight.prompt_cache_mib == (room_for_two - two.estimate.total) // (1024 * 1024) < 1024
    finally:
        library.close()


def test_an_mlx_load_plans_slots_too(tmp_path, tiny_mlx_model):
    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, tiny_mlx_model).imported[0]
    try:
        assert model.format == "mlx"
        resolver = ModelResolver(library, lambda: machine(64 * GiB))
        # Auto, as memory allows; mlx-lm's BatchGenerator runs them (app.core.engines.mlx.batch).
        assert resolver.load_spec(model).slots == 8
        resolver.max_slots = 1
        assert resolver.load_spec(model).slots == 1
        # No n-gram drafting on MLX, whatever is asked: as the chat's load plan and `hearth run` say.
        assert resolver.load_spec(model).speculative == "off"
        resolver.speculative = "ngram"
        assert resolver.load_spec(model).speculative == "off"
    finally:
        library.close()


def test_speculative_decoding_is_planned_auto_for_gguf_and_a_setting_overrides_it(tmp_path):
    path = write_tiny_llama_gguf(tmp_path / "spec.gguf", n_ctx=2048)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    model = import_path(library, path).imported[0]
    try:
        # "auto" on a CPU too: it measures there whether drafts pay, and drafts nothing where they do not.
        assert ModelResolver(library, lambda: machine(64 * GiB)).load_spec(model).speculative == "auto"
        asked = ModelResolver(library, lambda: machine(64 * GiB), speculative="ngram")  # hearth serve --speculative
        assert asked.load_spec(model).speculative == "ngram"
        asked.speculative = "off"  # Settings: Speculative decoding off
        assert asked.load_spec(model).speculative == "off"
    finally:
        library.close()


def test_same_answer_every_time_loads_gguf_deterministic_and_leaves_mlx_as_it_is(tmp_path, tiny_mlx_model):
    path = write_tiny_llama_gguf(tmp_path / "same.gguf", n_ctx=2048)
    library = Library(tmp_path / "models", tmp_path / "library.db")
    gguf = import_path(library, path).imported[0]
    mlx = import_path(library, tiny_mlx_model).imported[0]
    try:
        resolver = ModelResolver(library, lambda: machine(64 * GiB))
        assert not resolver.load_spec(gguf).deterministic
        resolver.deterministic = True  # Settings → Same answer every time: the next plan follows it
        load = resolver.load_spec(gguf)
        assert load.deterministic and not load.kv_unified and load.speculative == "off" and load.slots == 8
        assert not resolver.load_spec(mlx).deterministic  # llama.cpp's option; mlx-lm has none
    finally:
        library.close()
