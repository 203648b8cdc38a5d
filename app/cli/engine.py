"""`hearth run MODEL "prompt"` and `hearth chat MODEL`: the engine host from a terminal.

Tokens stream to stdout, the stats line and notices go to stderr. Ctrl-C during a generation
cancels it (not the program); Ctrl-C or Ctrl-D at the chat prompt exits.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.model_load import err, start_host

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.chat.reply_stream import ReplyResult
    from app.core.engines.base import Chunk, GenerateRequest, ModelInfo
    from app.core.runtime.engine_host import EngineHost

logger = logging.getLogger(__name__)

EXIT_INTERRUPTED = 130


def add_engine_commands(subparsers: Any) -> None:
    """Add `run` and `chat` to the `hearth` parser's subparsers (each sets `handler(ctx, args)`)."""
    from app.cli.images import add_image_argument
    from app.cli.tool_run import add_tool_arguments

    run = subparsers.add_parser("run", help="generate a reply to one prompt and print it")
    run.add_argument("model", help="a GGUF file, an MLX model folder, a library name or REMOTE/MODEL-ID")
    run.add_argument("prompt", help="the user message")
    _common(run)
    run.add_argument("--max-tokens", type=int, default=512, help="stop after this many tokens (default 512)")
    run.add_argument("--json-schema", type=Path, help="a JSON Schema file the reply must follow")
    run.add_argument(
        "--docs",
        metavar="NAME[,NAME]",
        help="answer from these document collections (`hearth docs ls`): passages found, cited as [1], [2]",
    )
    add_image_argument(run)
    add_tool_arguments(run)
    run.set_defaults(handler=cmd_run)
    chat = subparsers.add_parser("chat", help="chat with a model in the terminal")
    chat.add_argument("model", help="a GGUF file, an MLX model folder, a library name or REMOTE/MODEL-ID")
    _common(chat)
    chat.add_argument("--max-tokens", type=int, default=1024, help="longest reply (default 1024)")
    chat.add_argument(
        "--docs",
        metavar="NAME[,NAME]",
        help="answer each message from these document collections: passages found, cited as [1], [2]",
    )
    add_tool_arguments(chat)
    chat.set_defaults(handler=cmd_chat)


def _common(p: argparse.ArgumentParser) -> None:
    from app.cli.context import slot_count
    from app.core.settings import SPECULATIVE_FLAGS

    p.add_argument("--system", help="a system prompt")
    p.add_argument("--temp", type=float, default=0.7, help="temperature (0 = greedy)")
    p.add_argument("--ctx", type=int, default=4096, help="context length (default 4096)")
    p.add_argument("--seed", type=int, help="sampling seed")
    p.add_argument("--threads", type=int, help="CPU threads (default: physical cores)")
    # A terminal holds one conversation: slots (each with its own context's KV memory) are opt-in here.
    p.add_argument(
        "--parallel",
        type=slot_count,
        default=1,
        metavar="N",
        help="load with N parallel slots of --ctx tokens each (default 1: the single-stream path)",
    )
    p.add_argument(
        "--speculative",
        choices=SPECULATIVE_FLAGS,
        help="speculative decoding with n-gram drafts (lossless; GGUF): auto sizes each draft by what it "
        "measures to earn on this machine and drafts nothing where nothing pays; ngram always drafts; "
        "default: Settings → Speculative decoding (auto), as in the app and `hearth serve`",
    )
    p.add_argument(
        "--draft-model",
        metavar="MODEL",
        help="a smaller model of the same format (a path or a name from `hearth ls`) with the same tokenizer "
        "that drafts tokens for the model (speculative decoding, lossless)",
    )


def model_label(info: ModelInfo) -> str:
    if "remote" in info.extra:
        return f"{info.extra['remote']}/{info.extra['model']} on {info.extra['url']}"
    return Path(info.path).name


def format_stats(final: Chunk) -> str:
    s = final.stats
    if s is None:
        return f"[{final.finish_reason}]"
    return (
        f"[{s.prompt_tokens} prompt tokens ({s.prompt_tokens_evaluated} evaluated) at {s.prompt_tok_s:.1f} tok/s"
        f" · first token {s.time_to_first_token_s:.2f} s{_drafts(s)} · {s.generated_tokens} tokens at"
        f" {s.decode_tok_s:.1f} tok/s · {final.finish_reason}]"
    )


def _drafts(s) -> str:
    rate = s.acceptance_rate
    return "" if rate is None else f" · drafts {100 * rate:.0f} % of {s.draft_tokens} accepted"


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def generate(host: EngineHost, request: GenerateRequest) -> tuple[str, Chunk, bool]:
    """Stream a reply to stdout. Ctrl-C cancels the generation; returns (text, final, interrupted),
    where a stopped reply keeps the text it had."""
    from app.core.errors import HearthError
    from app.core.runtime.jobs import ChunkEvent, GenerateJob

    def sink(event) -> None:
        """Host thread: tokens go to stdout as they come."""
        if isinstance(event, ChunkEvent) and event.chunk.text:
            _write(event.chunk.text)

    handle = host.submit(GenerateJob(request=request, source="cli"), sink)
    try:
        # No grace limit: a cancelled generation stops within a token, and its partial reply is wanted.
        handle.wait_or_cancel(grace=None)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    if handle.error is not None:
        raise HearthError(handle.error)
    return handle.result.text, handle.result.final, interrupted


def _sampling(args: argparse.Namespace):
    from app.core.engines.base import SamplingParams

    return SamplingParams(temperature=args.temp, max_tokens=args.max_tokens, seed=args.seed)


def cmd_run(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.core.engines.base import ChatMessage, GenerateRequest
    from app.core.errors import HearthError

    schema = None
    if args.json_schema is not None:
        try:
            schema = json.loads(args.json_schema.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return ctx.fail(f"cannot read the JSON schema: {exc}", 2)
        from app.core.tools.schema_limits import SchemaTooComplex, check_schema

        try:
            check_schema(schema, "--json-schema")  # before the model loads
        except SchemaTooComplex as exc:
            return ctx.fail(exc, 2)
    from app.cli.images import read_images

    try:
        images = read_images(args.image or [])  # before the model loads
    except HearthError as exc:
        return ctx.fail(exc, 2)
    sources: list = []
    question = args.prompt
    if args.docs:
        try:
            sources = _document_sources(ctx, args)  # the embedding model loads and goes before the chat model
        except HearthError as exc:
            return ctx.fail(exc, 2)
        from app.core.chat.grounding import grounded_question

        question = grounded_question(args.prompt, sources)
    messages = [ChatMessage(role="system", content=args.system)] if args.system else []
    messages.append(ChatMessage(role="user", content=question, images=images or None))
    if args.tools is not None:
        return run_with_tools(ctx, args, messages)
    try:
        host, _info = start_host(ctx, args)
    except HearthError as exc:
        return ctx.fail(exc)
    try:
        reply, final, interrupted = generate(
            host,
            GenerateRequest(
                messages=messages, sampling=_sampling(args), json_schema=schema, schema_field="--json-schema"
            ),
        )
        _write("\n")
        if sources:
            _write_sources(reply, sources)
        err(format_stats(final))
        return EXIT_INTERRUPTED if interrupted else 0
    except HearthError as exc:
        return ctx.fail(exc, new_line=True)
    finally:
        host.shutdown(10)


# Passages a question from the terminal gets: as many as fit half the context, at most this many.
DOCS_PASSAGES = 6


def _document_sources(ctx: CliContext, args: argparse.Namespace) -> list:
    """The passages of `--docs` collections that best answer the prompt, within half the context."""
    from app.cli import docs
    from app.core.chat.grounding import sources_within
    from app.core.documents.embedding import EmbeddingFailed
    from app.core.documents.store import DocumentsError
    from app.core.errors import HearthError

    try:
        hits = docs.search(ctx, _doc_names(args), args.prompt, DOCS_PASSAGES)
    except (DocumentsError, EmbeddingFailed) as exc:
        raise HearthError(f"the documents could not be searched: {exc}") from exc
    if not hits:
        err("note: nothing in the documents matches the question; the model answers without them")
    return sources_within(hits, args.ctx // 2)


def _doc_names(args: argparse.Namespace) -> list[str]:
    return [n.strip() for n in args.docs.split(",") if n.strip()]


def _chat_sources(retriever: Any, question: str, args: argparse.Namespace) -> list:
    """A chat message's passages: a quarter of the context, so a few turns of them still fit."""
    from app.core.chat.grounding import sources_within
    from app.core.documents.embedding import EmbeddingFailed
    from app.core.documents.store import DocumentsError
    from app.core.errors import HearthError

    try:
        hits = retriever.search(question, DOCS_PASSAGES)
    except (EmbeddingFailed, DocumentsError, HearthError) as exc:  # the chat goes on without them
        err(f"(the documents could not be searched: {exc})")
        return []
    if not hits:
        err("(nothing in the documents matches; the model answers without them)")
    return sources_within(hits, args.ctx // 4)


def _write_sources(reply: str, sources: list) -> None:
    """Under the reply: the passages it cites, else (a reply that cites none) every passage it was given."""
    from app.core.chat.grounding import cited, sources_text

    used = cited(reply, sources)
    _write(("\nSources:\n" if used else "\nPassages given (none cited):\n") + sources_text(used or sources) + "\n")


def run_with_tools(ctx: CliContext, args: argparse.Namespace, messages: list) -> int:
    """`hearth run … --tools`: the model's turns and its calls, then the reply (or the transcript with --json)."""
    from app.cli.tool_run import checked_choice, open_loop, run_turn, transcript
    from app.core.errors import HearthError

    choice, why = checked_choice(ctx, args)
    if why:
        return ctx.fail(why, 2)
    try:
        host, _info = start_host(ctx, args)
    except HearthError as exc:
        return ctx.fail(exc)
    loop = open_loop(ctx, host, args)
    try:
        run = run_turn(loop, messages, _sampling(args), args, choice)
    except HearthError as exc:
        return ctx.fail(exc, new_line=True)
    finally:
        loop.servers.close()
        host.shutdown(10)
    if args.json:
        _write(json.dumps(transcript(run), ensure_ascii=False, indent=2) + "\n")
    else:
        _write(run.reply + "\n")
        if run.final is not None:
            err(format_stats(run.final))
    if run.hit_limit:
        err(f"note: the model was still calling tools after {loop.max_steps} steps (Settings: tool_steps)")
    return EXIT_INTERRUPTED if run.stopped else 0


class _Stdout:
    """The turn's events for a terminal: the reply's words go to stdout as they come."""

    def on_text(self, piece: str) -> None:
        """Engine thread."""
        _write(piece)

    def on_row(self, role: str, msg_id: int) -> None:
        """Never called: nothing is saved here."""

    def on_finished(self, result: ReplyResult) -> None:
        """Engine thread: the main thread, waiting for the turn, says how it ended."""


def cmd_chat(ctx: CliContext, args: argparse.Namespace) -> int:
    from app.cli.images import chat_image
    from app.cli.tool_run import checked_choice, open_loop, run_turn, wait_out
    from app.core.chat.grounding import grounded_question
    from app.core.chat.sending import fit_messages, request_for
    from app.core.chat.turn import ChatTurn
    from app.core.engines.base import ChatMessage, Chunk
    from app.core.errors import HearthError

    choice, why = checked_choice(ctx, args)
    if why:
        return ctx.fail(why, 2)
    retriever = None
    if args.docs:
        from app.cli.docs import Retriever
        from app.core.documents.store import DocumentsError

        try:
            retriever = Retriever(ctx, _doc_names(args))
        except DocumentsError as exc:
            return ctx.fail(exc, 2)
    try:
        host, info = start_host(ctx, args)
    except HearthError as exc:
        if retriever is not None:
            retriever.close()
        return ctx.fail(exc)
    err(
        f"Chatting with {model_label(info)}. /reset clears the history; /image FILE adds an image to your next"
        " message; Ctrl-D or /exit quits; Ctrl-C stops a reply."
    )
    system = [ChatMessage(role="system", content=args.system)] if args.system else []
    history: list[ChatMessage] = []
    images: list = []  # for the next message: /image FILE
    loop = open_loop(ctx, host, args) if choice is not None else None
    try:
        while True:
            try:
                line = input(">>> ")
            except (EOFError, KeyboardInterrupt):
                _write("\n")
                return 0
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                return 0
            if text == "/reset":
                history.clear()
                err("(history cleared)")
                continue
            if text.startswith("/image "):
                images += chat_image(text.removeprefix("/image ").strip(), err)
                continue
            sources: list = []
            content = line
            if retriever is not None:
                # The passages go into this message as the model reads it; the history keeps them, so a
                # follow-up question can still cite them.
                sources = _chat_sources(retriever, line, args)
                content = grounded_question(line, sources)
            history.append(ChatMessage(role="user", content=content, images=images or None))
            images = []
            # As in the window: the oldest turns are left out of a request that would not fit (and it says so).
            plan = fit_messages(system + history, info.n_ctx, args.max_tokens)
            if not plan.ok:
                assert plan.notice is not None  # a plan is refused only with its reason
                history.pop()
                err(f"error: {plan.notice.text}")
                continue
            if plan.dropped_messages:  # kept here until /reset, but the model no longer reads them
                err(
                    f"note: the {plan.dropped_messages} oldest messages were left out of this request: the"
                    f" conversation is longer than the model's context ({plan.n_ctx} tokens)"
                )
            if loop is not None:
                try:
                    run = run_turn(loop, plan.messages, _sampling(args), args, choice)
                except HearthError as exc:
                    history.pop()
                    err(f"error: {exc}")
                    continue
                history += run.messages[len(plan.messages) :]  # the calls and results stay in the conversation
                _write(run.reply + "\n")
                continue
            turn = ChatTurn(host, request_for(plan, _sampling(args)), _Stdout(), source="cli")
            turn.start()
            interrupted = wait_out(turn)
            if turn.failure is not None:
                history.pop()
                err(f"\nerror: {turn.failure}")
                continue
            _write("\n")
            assert turn.result is not None
            reply = turn.result.text
            if reply:  # a stopped reply stays in the history, as the user saw it
                history.append(ChatMessage(role="assistant", content=reply))
            if sources:
                _write_sources(reply, sources)
            final = turn.final or Chunk(finish_reason=turn.result.finish_reason, stats=turn.result.stats)
            err(("[stopped] " if interrupted else "") + format_stats(final))
    finally:
        if loop is not None:
            loop.servers.close()
        if retriever is not None:
            retriever.close()
        host.shutdown(10)
