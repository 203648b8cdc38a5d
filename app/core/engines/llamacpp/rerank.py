"""(query, document) pairs as a llama.cpp reranker reads them, in the layout llama-server gives them: the
GGUF's own rerank template (`tokenizer.chat_template.rerank`, text with `{query}` and `{document}` in it)
where the file has one, else the tokenizer's pair form: BOS query EOS SEP document EOS, each marker only
where the vocabulary adds it (BERT: [CLS] q [SEP] d [SEP]; XLM-RoBERTa: <s> q </s></s> d </s>).

Unlike llama-server, which tokenizes the filled-in template with special tokens parsed, the template's own
text is tokenized with specials parsed (it comes from the model file) and the query's and documents' with
special parsing off: a request cannot write control tokens such as a fake end of document into a pair.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.engines.inputs.embed_limits import check_cancel

# (text, special) -> token ids, without BOS/EOS added (the engine's tokenize).
Tokenize = Callable[[str, bool], list[int]]

TEMPLATE_KEY = "tokenizer.chat_template.rerank"
_SLOT = re.compile(r"(\{query\}|\{document\})")


@dataclass(frozen=True)
class PairFormat:
    """How one model lays out a pair: its rerank template, else the markers its vocabulary adds (None: not
    added)."""

    template: str | None = None
    bos: int | None = None
    eos: int | None = None
    sep: int | None = None

    @classmethod
    def of(cls, lib: Any, vocab: Any, template: str | None) -> PairFormat:
        """From a loaded model's vocabulary; EOS falls back to SEP where a vocabulary has none (BERT's)."""
        bos, eos, sep = lib.llama_vocab_bos(vocab), lib.llama_vocab_eos(vocab), lib.llama_vocab_sep(vocab)
        if eos < 0:
            eos = sep
        return cls(
            template=template if template and _SLOT.search(template) else None,
            bos=bos if bos >= 0 and lib.llama_vocab_get_add_bos(vocab) else None,
            eos=eos if eos >= 0 and lib.llama_vocab_get_add_eos(vocab) else None,
            sep=sep if sep >= 0 and lib.llama_vocab_get_add_sep(vocab) else None,
        )

    def pairs(
        self, tokenize: Tokenize, query: str, documents: list[str], cancel: threading.Event | None = None
    ) -> tuple[int, list[list[int]]]:
        """(the query's own tokens, one pair's token ids per document). `cancel` is checked before each
        document is tokenized: two million characters of documents take seconds."""
        query_ids = tokenize(query, False)
        if self.template is not None:
            # The template's text between the slots, tokenized once; the slots filled per document.
            parts = [p for p in _SLOT.split(self.template) if p]
            literal = {p: tokenize(p, True) for p in parts if p not in ("{query}", "{document}")}
        out: list[list[int]] = []
        for document in documents:
            check_cancel(cancel, 0, len(documents), "documents")
            doc_ids = tokenize(document, False)
            if self.template is not None:
                ids: list[int] = []
                for p in parts:
                    ids += query_ids if p == "{query}" else doc_ids if p == "{document}" else literal[p]
            else:
                ids = self._marked(query_ids, doc_ids)
            out.append(ids)
        return len(query_ids), out

    def _marked(self, query_ids: list[int], doc_ids: list[int]) -> list[int]:
        def mark(token: int | None) -> list[int]:
            return [] if token is None else [token]

        return [*mark(self.bos), *query_ids, *mark(self.eos), *mark(self.sep), *doc_ids, *mark(self.eos)]


def not_chat(role: str) -> str:
    """Why a model loaded for embeddings or ranking refuses a chat, by what the file is for."""
    if role == "embedding":
        return "this is an embedding model: it serves POST /v1/embeddings, not chat or completions"
    if role == "rerank":
        return "this is a reranker: it serves POST /v1/rerank, not chat or completions"
    return "this model was loaded for embeddings; load it again without embeddings to chat"


def not_a_reranker(role: str) -> str:
    """Why a model that was not loaded with rank pooling refuses a rerank."""
    what = {"embedding": "an embedding model", "rerank": "a reranker loaded without rank pooling"}.get(
        role, "a chat model"
    )
    return f"this model is {what}, not a reranker: rerank with a GGUF that declares rank pooling"
