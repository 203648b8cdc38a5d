"""A model that calls the user's MCP tools: generate, run the calls it makes (each only once approved), give it
the results, and go on until it answers without a call or the step limit is reached.

The tools reach the model through its family's template, with the same planning and parsers as the API
(app.core.tools): "required" or a named tool is forced by a grammar on the first step, later steps are
"auto" so the loop can end. A tool's result is data: it is cut to a size (servers.py) and its text cannot
close the template's markup (`inert`) before it is put in the prompt. Denied or failed calls go back to the
model as tool errors, so it can answer without them.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.core.engines.base import Capabilities, ChatMessage, Chunk, GenerateRequest, ModelInfo, SamplingParams
from app.core.errors import HearthError
from app.core.mcp.servers import McpError, McpServers, McpTool, ToolResult
from app.core.runtime.job_host import JobHost
from app.core.runtime.jobs import ChunkEvent, CountJob, GenerateJob
from app.core.tools.plan import ToolPlan, plan_tools
from app.core.tools.types import ToolCall

logger = logging.getLogger(__name__)

MAX_STEPS = 10  # Settings' default: model turns in one reply
COUNT_TIMEOUT_S = 5.0  # counting the prompt without its tools, once a reply used none: a tokenization
SEPARATOR = "__"  # server__tool: one function name per tool, whichever server it comes from
Approval = Literal["once", "always", "deny"]

# Markup a chat template puts around turns and tool results (ChatML, Llama 3, DeepSeek, Gemma, Mistral):
# broken by an invisible word joiner in a tool's text, so a result can never end its turn or start another.
_MARKUP = re.compile(
    r"<(?=[|｜/!]|start_of_turn|end_of_turn|tool_|function)|\[(?=/?(INST|TOOL_|AVAILABLE_TOOLS|SYSTEM_PROMPT))"
)


def inert(text: str) -> str:
    """A tool's text as data: every opening of template markup broken by U+2060 (the model still reads it)."""
    return _MARKUP.sub(lambda m: m.group(0) + "\u2060", text)


@dataclass(frozen=True)
class PendingCall:
    """A call the model made, waiting for approval: which server's tool, with what arguments."""

    id: str
    server: str
    tool: str
    arguments: dict[str, Any]


@dataclass
class ToolStep:
    call: PendingCall
    result: ToolResult | None = None  # None when the call was denied or failed
    error: str = ""

    def for_model(self) -> str:
        """The result as the model reads it: an error says so."""
        if self.result is not None and not self.result.is_error:
            return inert(self.result.text)
        return inert(f"Error: {self.result.text if self.result is not None else self.error}")


@dataclass(frozen=True)
class UnusedTools:
    """A reply that was offered tools and called none: how many, and how many prompt tokens offering them
    cost (their descriptions ride in every prompt), so the user can see what the tools' being on costs."""

    offered: int
    prompt_tokens: int | None = None  # None: not counted (an engine that reports no prompt tokens)

    def as_stats(self) -> dict[str, int]:
        """Kept with the reply's stats (stats_json), so a reopened chat still shows the note."""
        out = {"tools_offered": self.offered, "tools_used": 0}
        if self.prompt_tokens is not None:
            out["tools_prompt_tokens"] = self.prompt_tokens
        return out

    @property
    def line(self) -> str:
        return unused_tools_line(self.offered, self.prompt_tokens)


def unused_tools_line(offered: int, prompt_tokens: int | None) -> str:
    """'3 tools offered (≈700 prompt tokens), none used'."""
    cost = f" (≈{prompt_tokens:,} prompt tokens)" if prompt_tokens else ""
    return f"{offered} tool{'s' if offered != 1 else ''} offered{cost}, none used"


@dataclass
class ToolRun:
    """The whole exchange: `messages` are the request's with every call, result and the final answer after."""

    messages: list[ChatMessage]
    reply: str
    steps: list[ToolStep] = field(default_factory=list)
    final: Chunk | None = None
    hit_limit: bool = False
    stopped: bool = False
    unused: UnusedTools | None = None  # tools were offered and the reply called none


def function_name(server: str, tool: str) -> str:
    """The function name the model calls for `server`'s `tool` (OpenAI's rule: 64 of [A-Za-z0-9_-])."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}{SEPARATOR}{tool}")[:64]


def as_functions(tools: Sequence[McpTool]) -> tuple[list[dict[str, Any]], dict[str, McpTool]]:
    """The tools as the template's function list, and which tool each function name stands for."""
    specs, by_name = [], {}
    for tool in tools:
        name = function_name(tool.server, tool.name)
        if name in by_name:
            continue  # two servers' names that differ only in characters a function name cannot hold
        by_name[name] = tool
        schema = tool.input_schema if tool.input_schema.get("type") == "object" else {"type": "object"}
        specs.append(
            {"type": "function", "function": {"name": name, "description": tool.description, "parameters": schema}}
        )
    return specs, by_name


class TurnSink(Protocol):
    """What a caller keeps of the loop as it goes (the chat writes each turn down): every method runs on the
    loop's thread, and the loop waits for it."""

    def turn_ended(
        self, content: str, calls: list[PendingCall], final: Chunk | None, unused: UnusedTools | None = None
    ) -> None: ...

    def step_done(self, step: ToolStep) -> None: ...

    def next_turn(self) -> None: ...


class ToolLoop:
    """`approve(call)` decides each call not yet allowed for good ("always" covers that tool from then on); it
    runs on the loop's thread (a UI hands it to its own and waits). `on_step(step)` reports each call's end."""

    def __init__(
        self,
        host: JobHost,
        servers: McpServers,
        approve: Callable[[PendingCall], Approval],
        *,
        max_steps: int = MAX_STEPS,
        source: str = "chat",
        on_step: Callable[[ToolStep], None] | None = None,
    ) -> None:
        self.host, self.servers, self.approve = host, servers, approve
        self.max_steps, self.source, self.on_step = max_steps, source, on_step
        self.allowed: set[tuple[str, str]] = set()  # "Always allow this tool"

    def tools(self, names: Sequence[str]) -> list[McpTool]:
        """The tools of these servers, each started if it is not (McpError names one that fails)."""
        out: list[McpTool] = []
        for name in names:
            out.extend(self.servers.start(name).result(self.servers.start_timeout_s + 5).tools)
        return out

    def run(
        self,
        messages: list[ChatMessage],
        sampling: SamplingParams,
        servers: Sequence[str],
        *,
        tool_choice: str | dict[str, Any] = "auto",
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
        sink: TurnSink | None = None,
    ) -> ToolRun:
        """Any thread but the host's: the model's turns until it answers without a call (HearthError when the
        host refuses or the model fails). `on_text`: each model turn's text as it streams (host thread)."""
        specs, by_name = as_functions(self.tools(servers))
        cancel = cancel or threading.Event()
        run = ToolRun(list(messages), "")
        choice: str | dict[str, Any] = tool_choice
        for turn in range(self.max_steps + 1):
            last = turn == self.max_steps
            plan_holder: list[ToolPlan] = []
            request = GenerateRequest(messages=run.messages, sampling=sampling)
            prepare = self._preparer(request, specs, "none" if last else choice, plan_holder)
            text, final = self._generate(request, prepare, cancel, on_text)
            run.final = final
            parsed = (
                plan_holder[0].parser().parse(text, truncated=final is not None and final.finish_reason == "length")
            )
            calls = [] if last else list(parsed.tool_calls)
            run.messages.append(ChatMessage(role="assistant", content=parsed.content, tool_calls=calls or None))
            pending = [self._resolve(call, by_name)[0] for call in calls]
            if not calls and turn == 0 and not last and specs and not cancel.is_set():
                run.unused = UnusedTools(len(specs), self._tools_cost(messages, sampling, final))
            if sink is not None:
                sink.turn_ended(parsed.content, pending, final, run.unused)
            if cancel.is_set():
                run.reply, run.stopped = parsed.content, True
                return run
            if not calls:
                run.reply, run.hit_limit = parsed.content, last
                return run
            for call in calls:
                step = self._run_call(*self._resolve(call, by_name), cancel)
                run.steps.append(step)
                run.messages.append(ChatMessage(role="tool", content=step.for_model(), tool_call_id=call.id))
                if self.on_step is not None:
                    self.on_step(step)
                if sink is not None:
                    sink.step_done(step)
                if cancel.is_set():
                    run.stopped = True
                    return run
            choice = "auto"  # forced once: the model answers with what the tools gave it
            if sink is not None:
                sink.next_turn()
        return run

    def _preparer(
        self, request: GenerateRequest, specs: list[dict[str, Any]], choice: str | dict[str, Any], out: list[ToolPlan]
    ) -> Callable[[ModelInfo, Capabilities], GenerateRequest]:
        def prepare(info: ModelInfo, capabilities: Capabilities) -> GenerateRequest:
            """Host thread: the tools in this model's format, a grammar when a call is forced."""
            plan = plan_tools(
                specs or None, choice if specs else None, chat_template=info.chat_template, grammar=capabilities.grammar
            )
            out.append(plan)
            update: dict[str, Any] = {"tools": plan.template_tools}
            if plan.grammar is not None:
                update["grammar"] = plan.grammar
            return request.model_copy(update=update)

        return prepare

    def _generate(
        self,
        request: GenerateRequest,
        prepare: Callable[[ModelInfo, Capabilities], GenerateRequest],
        cancel: threading.Event,
        on_text: Callable[[str], None] | None,
    ) -> tuple[str, Chunk | None]:
        def sink(event: object) -> None:
            """Host thread."""
            if on_text is not None and isinstance(event, ChunkEvent) and event.chunk.text:
                on_text(event.chunk.text)

        handle = self.host.submit(GenerateJob(request=request, source=self.source, prepare=prepare), sink)
        while not handle.wait(0.1):
            if cancel.is_set():
                handle.cancel()
                handle.wait()
                break
        if handle.error is not None:
            raise HearthError(handle.error)
        return handle.result.text, handle.result.final

    def _tools_cost(self, messages: list[ChatMessage], sampling: SamplingParams, final: Chunk | None) -> int | None:
        """The prompt tokens the tools added: the first turn's prompt as the engine counted it, less the same
        messages counted without tools (None when either count is missing)."""
        with_tools = final.stats.prompt_tokens if final is not None and final.stats is not None else 0
        if with_tools <= 0:
            return None
        handle = self.host.submit(CountJob(GenerateRequest(messages=messages, sampling=sampling)))
        if not handle.wait(COUNT_TIMEOUT_S):  # the engine is busy: the note goes without its number
            handle.cancel()
            return None
        if handle.error is not None:
            logger.debug("could not count the prompt without tools: %s", handle.error)
            return None
        cost = with_tools - int(handle.result.prompt_tokens)
        return cost if cost > 0 else None

    @staticmethod
    def _resolve(call: ToolCall, by_name: dict[str, McpTool]) -> tuple[PendingCall, str]:
        """The call as a server's tool with its arguments, and why it cannot run ('' when it can)."""
        tool = by_name.get(call.name)
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            arguments = None
        if tool is None:
            return PendingCall(call.id, "", call.name, {}), f"there is no tool named {call.name}"
        if not isinstance(arguments, dict):
            return PendingCall(call.id, tool.server, tool.name, {}), "the arguments are not a JSON object"
        return PendingCall(call.id, tool.server, tool.name, arguments), ""

    def _run_call(self, pending: PendingCall, why: str, cancel: threading.Event) -> ToolStep:
        if why:
            return ToolStep(pending, error=why)
        if (pending.server, pending.tool) not in self.allowed:
            answer = self.approve(pending)
            if answer == "deny":
                return ToolStep(pending, error="the user denied this call")
            if answer == "always":
                self.allowed.add((pending.server, pending.tool))
        future = self.servers.call(pending.server, pending.tool, pending.arguments)
        while True:
            try:
                return ToolStep(pending, result=future.result(0.1))
            except TimeoutError:
                if cancel.is_set():
                    future.cancel()
                    return ToolStep(pending, error="stopped by the user")
            except McpError as exc:
                return ToolStep(pending, error=str(exc))
