"""A turn in a saved conversation, from the user's message to its reply: the request planned against the model's
context from what the caller shows (a long chat is not read again on every send), the user's message and the
reply row written on the chat writer thread, and once they are committed, the reply (a ChatTurn).

Nothing here waits for a write: `send`, `regenerate` and `edit` return the write's Future, and the caller starts
the reply (`reply`) when it is committed, on whatever thread it hears of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from app.core.chat.context import ContextPlan, Turn, estimate_tokens, fit_context, history_for_request
from app.core.chat.models import Conversation, Message
from app.core.chat.operations import ChatOperations, SavedTurn
from app.core.chat.reply_stream import ReplyRow
from app.core.chat.retrieval import DocumentSearch, Grounding, TurnDocuments
from app.core.chat.rows import title_from_message
from app.core.chat.store import DEFAULT_TITLE
from app.core.chat.turn import ChatTurn, TurnEvents, TurnTools
from app.core.engines.base import ChatMessage, GenerateRequest, ImageInput, SamplingParams
from app.core.runtime.job_host import JobHost

logger = logging.getLogger(__name__)

REPLY_RESERVE = 512  # reply tokens kept free when the conversation sets no max tokens (at most a quarter)
# What a send with no conversation plans with: the one its write creates has the defaults.
NEW_CONVERSATION = Conversation(id=0, title=DEFAULT_TITLE, created_at=0.0, updated_at=0.0)


@dataclass(frozen=True)
class UnsentTurn:
    """A user turn not saved yet, as the context policy reads it."""

    content: str
    role: str = "user"
    status: str = "done"
    images: tuple[ImageInput, ...] = ()


def fit_messages(messages: Sequence[ChatMessage], n_ctx: int, max_tokens: int | None) -> ContextPlan:
    """The messages to send so that the prompt and the reply fit in `n_ctx`: the reply keeps `max_tokens`, or
    REPLY_RESERVE (a quarter of a small context) when there is no limit; the oldest turns go first."""
    reserve = max_tokens or min(REPLY_RESERVE, max(n_ctx // 4, 1))
    return fit_context(messages, estimate_tokens, n_ctx, reserve=min(reserve, max(n_ctx - 16, 1)))


def request_for(plan: ContextPlan, sampling: SamplingParams, conversation_id: int | None = None) -> GenerateRequest:
    """The request of a planned turn; `conversation_id` lets the engine reuse the conversation's cached prefix."""
    conv = str(conversation_id) if conversation_id is not None else None
    return GenerateRequest(messages=plan.messages, sampling=sampling, conversation_id=conv)


def _may_have_images(turn: Turn) -> bool:
    """A shown row knows how many images it has; a message read from the store may have some."""
    count = getattr(turn, "image_count", None)
    return turn.role == "user" and hasattr(turn, "id") and (count is None or count > 0)


@dataclass(frozen=True)
class TurnStart:
    """A turn whose write is on its way: what it planned, and the write (Future[SavedTurn]: its reply row is None
    when the plan was refused: nothing is generated then)."""

    conversation: Conversation  # NEW_CONVERSATION when the write creates it
    plan: ContextPlan
    saving: Future
    retitled: bool = False  # the conversation took a new title from this message

    @property
    def new(self) -> bool:
        return self.conversation is NEW_CONVERSATION


class ChatTurns:
    """Turns in saved conversations, on one host and one chat writer. Any thread may plan and send (the window's
    reads its shown rows on its own); `n_ctx` is the context the request may fill. `documents`: the collections a
    conversation may search (None: only files attached to a message ground a reply)."""

    def __init__(self, host: JobHost, chats: ChatOperations, documents: DocumentSearch | None = None) -> None:
        self.host, self.chats = host, chats
        self.grounding = Grounding(documents, chats)

    def plan(self, conv: Conversation, turns: Sequence[Turn], n_ctx: int) -> ContextPlan:
        """What to send of `turns` (stored messages, shown rows, an UnsentTurn last) after the system prompt."""
        # Stored images are read here, on the caller's thread like its other reads: they are kept at most
        # 2,048 px on a side (attachments.py), a few MB for a message's worth.
        with_images = [getattr(t, "id", -1) for t in turns if _may_have_images(t)]
        history = history_for_request(conv.system_prompt, turns, self.chats.store.images_of(with_images))
        return fit_messages(history, n_ctx, conv.sampling.max_tokens)

    def send(
        self,
        conv: Conversation | None,
        text: str,
        *,
        shown: Sequence[Turn] = (),
        images: Sequence[ImageInput] = (),
        n_ctx: int,
    ) -> TurnStart:
        """The user's message after `shown` (the conversation's thread as the caller has it), in a new conversation
        when `conv` is None; its first message names a conversation that still has the default title."""
        conv = conv if conv is not None else NEW_CONVERSATION
        images = tuple(images)
        plan = self.plan(conv, [*shown, UnsentTurn(text, images=images)], n_ctx)
        title = title_from_message(text, len(images)) if conv.title == DEFAULT_TITLE else None
        conv_id = None if conv is NEW_CONVERSATION else conv.id
        saving = self.chats.send(conv_id, text, title=title, reply=plan.ok, images=images)
        return TurnStart(conv, plan, saving, retitled=bool(title))

    def regenerate(self, conv: Conversation, parent_id: int, turns: Sequence[Turn], n_ctx: int) -> TurnStart:
        """A new reply to `parent_id` (the last of `turns`); the old reply stays as a branch."""
        plan = self.plan(conv, turns, n_ctx)
        return TurnStart(conv, plan, self.chats.regenerate(conv.id, parent_id, reply=plan.ok))

    def edit(self, conv: Conversation, message: Message, text: str, before: Sequence[Turn], n_ctx: int) -> TurnStart:
        """`message` (a user turn after `before`) edited to `text`, resent as a new branch with its images; the old
        branch is kept."""
        kept = tuple(self.chats.store.images_of([message.id]).get(message.id, ()))  # the store copies them
        plan = self.plan(conv, [*before, UnsentTurn(text, images=kept)], n_ctx)
        # The first message named the chat: edited, it names it again (the list and an export say what the chat
        # is now about). A title the user gave it stays.
        retitled = False
        if message.parent_id is None and conv.title == title_from_message(message.content, len(kept)):
            title = title_from_message(text, len(kept))
            if title and title != conv.title:
                self.chats.rename(conv.id, title)  # reads show it at once; written on the writer thread
                retitled = True
        saving = self.chats.edit_and_resend(conv.id, message.id, text, reply=plan.ok)
        return TurnStart(conv, plan, saving, retitled=retitled)

    def reply(
        self,
        start: TurnStart,
        saved: SavedTurn,
        events: TurnEvents | None,
        *,
        tools: TurnTools | None = None,
        cancel: threading.Event | None = None,
        documents: TurnDocuments | None = None,
        pool: Executor | None = None,
    ) -> ChatTurn:
        """The reply to a committed turn whose plan was accepted (its reply row exists), not started. `documents`:
        what the reply is grounded in, searched on `pool` (or the tools' thread) before the model starts, the
        passages saved with the reply row."""
        if saved.reply_id is None:
            raise ValueError("the turn has no reply row: its plan was refused")
        row = ReplyRow(self.chats, saved.conversation_id, saved.reply_id)
        request = request_for(start.plan, start.conversation.sampling, saved.conversation_id)
        prepare = None
        if documents:
            grounding, plan, reply_id = self.grounding, start.plan, saved.reply_id

            def prepare(req: GenerateRequest, cancel: threading.Event) -> GenerateRequest:
                """The turn's worker thread."""
                return grounding.prepare(req, documents, plan, reply_id, cancel)

        return ChatTurn(
            self.host, request, events, row=row, tools=tools, cancel=cancel, source="chat", prepare=prepare, pool=pool
        )
