"""A chat request fitted to the model that runs it, decided when its job starts: the tools in that model's
template format (with a grammar when a call is forced and the engine takes grammars), the control tokens the
output parser reads, and whether the rendered prompt already opens a reasoning block. A JIT load is then served
in its own model's format, which no one knew when the request arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.engines.base import Capabilities, GenerateRequest, ModelInfo, check_prompt_size
from app.core.engines.chat_templates.render import render_chat
from app.core.tools import OUTPUT_MARKERS, ToolError, ToolPlan, plan_tools, prompt_opens_reasoning


@dataclass
class FittedRequest:
    """`prepare` is what a job carries (GenerateJob.prepare, CountJob.prepare): it runs on the engine host's
    thread as the job starts, before the job's Started event. `plan` and `starts_in_reasoning` are read after
    that event, on the caller's thread (the Started event is the hand-over)."""

    base: GenerateRequest
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    parallel: bool
    # The reply's reasoning is kept in its text (no split): the prompt need not be rendered to find out.
    inline_reasoning: bool = False
    plan: ToolPlan | None = field(default=None, init=False)
    starts_in_reasoning: bool = field(default=False, init=False)

    def prepare(self, info: ModelInfo, capabilities: Capabilities) -> GenerateRequest:
        """Engine host thread: the request as the model that runs it needs it."""
        check_prompt_size(self.base)  # before the template renders it (a previous_response_id grows it here)
        plan = plan_tools(
            self.tools,
            self.tool_choice,
            parallel_tool_calls=self.parallel,
            chat_template=info.chat_template,
            grammar=capabilities.grammar,
        )
        if plan.grammar is not None and self.base.json_schema is not None:
            raise ToolError("response_format cannot be combined with a tool call that is forced", "tool_choice")
        update: dict[str, Any] = {"tools": plan.template_tools, "visible_tokens": list(OUTPUT_MARKERS)}
        if plan.grammar is not None:
            update["grammar"] = plan.grammar
        request = self.base.model_copy(update=update)
        if not self.inline_reasoning and request.messages is not None:
            prompt = render_chat(info.chat_template, request.messages, tools=plan.template_tools).text
            self.starts_in_reasoning = prompt_opens_reasoning(prompt)
        self.plan = plan
        return request
