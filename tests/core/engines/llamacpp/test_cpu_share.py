"""CpuShare: a step's threads follow the cores the machine's other work leaves (idle cores plus what this
process got), a thread at a time, looked at once a window; and the batched runner sets them on its context."""

from __future__ import annotations

import pytest

from app.core.engines.llamacpp import options
from app.core.engines.llamacpp.cpu_share import CpuSample, CpuShare


class Machine:
    """Counters that advance as told: each `run(seconds, idle_cores, own_cores)` adds that much."""

    def __init__(self) -> None:
        self.wall = self.idle = self.own = 0.0
        self.broken = False

    def run(self, seconds: float, idle_cores: float, own_cores: float) -> None:
        self.wall += seconds
        self.idle += seconds * idle_cores
        self.own += seconds * own_cores

    def clock(self) -> float:
        return self.wall

    def sample(self) -> CpuSample:
        if self.broken:
            raise OSError("no /proc")
        return CpuSample(self.wall, self.idle, self.own)


@pytest.fixture
def machine() -> Machine:
    return Machine()


def test_a_quiet_machine_keeps_every_thread(machine):
    share = CpuShare(4, machine.sample, clock=machine.clock)
    for _ in range(10):
        assert share.threads_now() == 4
        machine.run(0.6, idle_cores=0.1, own_cores=3.9)  # the threads spin at their barriers: all theirs


def test_busy_neighbours_take_threads_away_one_window_at_a_time_and_settle(machine):
    share = CpuShare(2, machine.sample, clock=machine.clock)
    assert share.threads_now() == 2
    machine.run(0.2, idle_cores=0.0, own_cores=1.0)
    assert share.threads_now() == 2  # less than a window: not looked at yet
    machine.run(0.4, idle_cores=0.0, own_cores=1.0)  # two busy loops: the two threads got one core
    assert share.threads_now() == 1 and share.free == pytest.approx(1.0)
    for _ in range(5):  # one thread beside them gets two thirds of a core: it stays at one
        machine.run(0.6, idle_cores=0.0, own_cores=0.67)
        assert share.threads_now() == 1


def test_one_busy_neighbour_on_two_cores_leaves_one_thread(machine):
    share = CpuShare(2, machine.sample, clock=machine.clock)
    share.threads_now()
    machine.run(0.6, idle_cores=0.0, own_cores=1.33)  # three runnable threads on two cores
    assert share.threads_now() == 1
    machine.run(0.6, idle_cores=0.0, own_cores=1.0)  # a core each: no core idle, so no second thread
    assert share.threads_now() == 1


def test_threads_come_back_when_the_machine_goes_quiet(machine):
    share = CpuShare(3, machine.sample, clock=machine.clock)
    share.threads_now()
    for _ in range(2):
        machine.run(0.6, idle_cores=0.0, own_cores=0.5)
        share.threads_now()
    assert share.threads == 1
    machine.run(0.6, idle_cores=2.0, own_cores=1.0)
    assert share.threads_now() == 2  # one thread more a window, never a jump
    machine.run(0.6, idle_cores=1.0, own_cores=2.0)
    assert share.threads_now() == 3
    machine.run(0.6, idle_cores=1.0, own_cores=3.0)  # more cores than the load's threads: still three
    assert share.threads_now() == 3


def test_a_share_between_the_thresholds_does_not_flap(machine):
    share = CpuShare(2, machine.sample, clock=machine.clock)
    share.threads_now()
    machine.run(0.6, idle_cores=0.0, own_cores=1.7)  # above 2 - DROP_AT: kept
    assert share.threads_now() == 2
    machine.run(0.6, idle_cores=0.0, own_cores=1.0)
    assert share.threads_now() == 1
    machine.run(0.6, idle_cores=0.5, own_cores=1.0)  # below 1 + ADD_AT: not yet back
    assert share.threads_now() == 1


def test_the_counters_are_read_once_a_window_not_every_step(machine):
    reads = []
    share = CpuShare(2, lambda: reads.append(1) or machine.sample(), clock=machine.clock)
    for _ in range(100):  # a hundred tokens in 0.5 s
        share.threads_now()
        machine.run(0.005, idle_cores=0.0, own_cores=2.0)
    assert len(reads) == 1
    share.threads_now()
    assert len(reads) == 2


def test_unreadable_counters_leave_the_count_where_it_is(machine):
    share = CpuShare(2, machine.sample, clock=machine.clock)
    machine.broken = True
    assert share.threads_now() == 2
    assert CpuShare(1, machine.sample, clock=machine.clock).threads_now() == 1


def test_the_real_counters_read(machine):
    from app.core.engines.llamacpp.cpu_share import sample_cpu

    first = sample_cpu()
    sum(i * i for i in range(200_000))  # some CPU of our own
    second = sample_cpu()
    assert second.wall > first.wall and second.own > first.own and second.idle >= first.idle


def test_hearth_fixed_threads_turns_it_off(monkeypatch):
    monkeypatch.delenv(options.FIXED_THREADS_ENV, raising=False)
    assert options.adaptive_threads()
    monkeypatch.setenv(options.FIXED_THREADS_ENV, "1")
    assert not options.adaptive_threads()


@pytest.fixture(scope="module")
def two_thread_smollm2(smollm2_gguf):
    from tests.core.engines.fixtures import load_llamacpp

    engine = load_llamacpp(smollm2_gguf, n_ctx=1024, n_threads=2, slots=2)
    yield engine
    engine.unload()


def test_the_runner_sets_the_share_on_its_context_and_the_reply_is_the_same(two_thread_smollm2, machine):
    from app.core.engines import generate_all
    from tests.core.engines.fixtures import chat_request

    runner = two_thread_smollm2.sequences.runner
    assert runner.cpu_share is not None and runner.cpu_share.most == 2  # on by default
    runner.cpu_share = CpuShare(2, machine.sample, window_s=0.0)  # looked at every step
    lib, ctx = runner._lib, runner._ctx.ctx
    request = chat_request("Name a colour.", max_tokens=12)

    def reply_with(idle: float, own: float) -> str:
        def step_cores():  # every step, the counters advance as on a machine this busy
            machine.run(0.01, idle_cores=idle, own_cores=own)
            return CpuSample(machine.wall, machine.idle, machine.own)

        runner.cpu_share._sample = step_cores
        two_thread_smollm2.forget_cache()
        text, _final = generate_all(two_thread_smollm2, request)
        return text

    quiet = reply_with(idle=0.0, own=2.0)
    assert lib.llama_n_threads(ctx) == lib.llama_n_threads_batch(ctx) == 2
    busy = reply_with(idle=0.0, own=0.6)
    assert lib.llama_n_threads(ctx) == lib.llama_n_threads_batch(ctx) == 1
    assert busy == quiet and quiet  # a row's dot products are one thread's whichever count: same tokens
    reply_with(idle=1.5, own=1.0)
    assert lib.llama_n_threads(ctx) == 2
