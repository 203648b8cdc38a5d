"""The MLX engine's prompts: a request's tokens through Hearth's sandboxed template (message content tokenized
with special-token parsing off, T4), with images as mlx_vision reads them, checked against the context, the
vocabulary and what MLX cannot do; and the model folder's files those come from. Mixed into MlxEngine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.engines.base import GenerateRequest, ModelInfo, check_logit_bias, check_prompt_size, utf8
from app.core.engines.errors import ContextLengthExceeded, EngineError, Unsupported
from app.core.engines.fill_in_middle import fim_by_text
from app.core.engines.images import has_images

if TYPE_CHECKING:
    from app.core.engines.mlx_vision import MlxVision, VisionPrompt


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise EngineError(f"cannot read {path.name}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def token_text(value: Any) -> str:
    """tokenizer_config tokens are strings or AddedToken dicts ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def chat_template(folder: Path, tok_config: dict[str, Any]) -> str | None:
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # named templates: take "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str) and template.strip():
        return template
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    return None


class MlxPrompts:
    """Mixed into MlxEngine, whose attributes these are."""

    info: ModelInfo | None
    _hf: Any  # the Hugging Face tokenizer
    _template: str | None
    _bos: str
    _eos: str
    _add_bos: bool
    _vision: MlxVision | None
    _no_vision: str

    if TYPE_CHECKING:

        def _require(self) -> ModelInfo: ...

        def _name(self) -> str: ...

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """Special-token strings become control tokens only with `special=True` (template literals)."""
        self._require()
        utf8(text)  # a lone surrogate: the caller's 400, not the tokenizer's UnicodeEncodeError
        return list(self._hf.encode(text, add_special_tokens=False, split_special_tokens=not special))

    def _prompt_ids(self, request: GenerateRequest) -> tuple[list[int], str | None, VisionPrompt | None]:
        """The prompt's tokens (an image: a run of its pseudo id), the template's notice, and with images, what
        reads them."""
        from app.core.engines.templates import render_chat, tokenize_segments

        check_prompt_size(request)
        vision = None
        notice: str | None = None
        if request.messages is not None:
            messages = request.messages

            def render(marked: list[Any]) -> list[tuple[str, bool]]:
                nonlocal notice
                out = render_chat(self._template, marked, tools=request.tools, bos_token=self._bos, eos_token=self._eos)
                notice = out.notice
                return out.segments

            def tokenize(text: str, special: bool) -> list[int]:
                return self.tokenize(text, special=special)

            if has_images(messages):
                if self._vision is None:
                    raise Unsupported(self._no_vision, param="images")
                vision = self._vision.prompt(messages, render, tokenize)
                ids = vision.keys
            else:
                ids = tokenize_segments(render(messages), tokenize)
        elif request.prompt is not None:
            # A raw prompt is caller text: no control tokens from it either.
            ids, notice = self.tokenize(request.prompt), None
            if request.suffix is not None:
                ids = fim_by_text(self._hf.get_vocab().get, self._name()).prompt(ids, self.tokenize(request.suffix))
        else:
            raise EngineError("a request needs messages or a prompt")
        if self._add_bos and (not ids or ids[0] != self._hf.bos_token_id):
            ids = [self._hf.bos_token_id, *ids]
            if vision is not None:
                vision.keys, vision.ids = ids, [self._hf.bos_token_id, *vision.ids]
        if not ids:
            raise EngineError("the prompt is empty")
        return ids, notice, vision

    def count_tokens(self, request: GenerateRequest) -> int:
        self._require()
        return len(self._prompt_ids(request)[0])

    def check(self, request: GenerateRequest) -> list[int]:
        """A request's prompt tokens, once it is known to be one this engine can run (else it raises)."""
        return self.prepare(request)[0]

    def prepare(self, request: GenerateRequest) -> tuple[list[int], VisionPrompt | None]:
        """`check`'s tokens, and with images, what reads them (each image processed now, encoded when read)."""
        info = self._require()
        ids, _notice, vision = self._prompt_ids(request)
        if len(ids) >= info.n_ctx:
            raise ContextLengthExceeded(len(ids), info.n_ctx)
        if request.json_schema is not None or request.grammar is not None:
            raise Unsupported("the MLX engine does not support grammars or JSON-schema output")
        check_logit_bias(request.sampling.logit_bias, self._vocab_size())
        return ids, vision

    def _vocab_size(self) -> int:
        """The logits' width: config.json's vocab_size (it may pad past the tokenizer), else the tokenizer's."""
        return (self.info.n_vocab if self.info else 0) or len(self._hf)
