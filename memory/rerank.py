"""Optional reranking of a turn's best memory sentences (KEEM_RERANKER), after the fused ranking (memory/fusion.py).

Off by default: the retrieval the app ships needs no reranker. When one is set, `MemoryEngine.search` hands it the
`CANDIDATES` best sentences by the fused score and returns them in the reranker's order (their scores stay the
fused ones), the rest after them as before. Two kinds:

- `cross-encoder:<local path or hub id>`: a sentence-transformers CrossEncoder scores each (message, sentence) pair;
- `chat`: the chat model reads the numbered sentences (memory/prompts/rerank.txt) and answers their numbers, most
  useful first. Its answer is read robustly (code fences, a preamble, a <think> block around it); an answer that
  names no candidate, one cut at its budget, or a failed call keeps the fused order, and a complete answer naming
  only some puts those first and the others after them in the fused order.

A reranker must fit inside a chat turn: it sees at most `CANDIDATES` sentences of at most `TEXT_CHARS` characters
each and the message's first `QUERY_CHARS`; the chat model's answer has `ANSWER_TOKENS` and `TIMEOUT_S`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from memory.prompts import render
from memory.text import strip_wrappers
from models.base import ChatModel, GenerationOptions, Message
from models.errors import InputError, KeemError, ModelUnavailableError

CANDIDATES = 20  # the fused ranking's best this many are reordered; a turn's k (5) is well inside it
TEXT_CHARS = 200  # each sentence as the reranker sees it (a memory sentence is shorter: memory/text.py)
QUERY_CHARS = 500  # the message as the reranker sees it: a pasted document by its start
ANSWER_TOKENS = 96  # "순서: 3, 1, 7, ..." for 20 numbers, with room for a short preamble
TIMEOUT_S = 20.0  # a chat reranker that takes longer costs the turn its reranking, not the turn
CROSS_ENCODER_MAX_TOKENS = 256  # a (message, sentence) pair as a cross-encoder reads it
SPECS = "off, chat, or cross-encoder:<local path or hub id>"

log = logging.getLogger(__name__)
_ORDER_LINE = re.compile(r"(?:순서|번호|order|answer|답)\s*[:：]\s*(.*)$", re.I)
_NUMBERS_ONLY = re.compile(r"[\s\d,，、.>\-\[\]()]*\d[\s\d,，、.>\-\[\]()]*")


class Reranker:
    """`order(query, texts)`: the indices of `texts`, most relevant first, or None to keep the order given."""

    name: str = "unknown"

    def order(self, query: str, texts: list[str]) -> list[int] | None:
        raise NotImplementedError


def check_spec(spec: str) -> str:
    """The KEEM_RERANKER value, checked where it enters (an InputError naming the choices otherwise)."""
    spec = spec.strip()
    if spec in ("off", "chat") or (spec.startswith("cross-encoder:") and spec.removeprefix("cross-encoder:").strip()):
        return spec
    raise InputError(f"KEEM_RERANKER={spec!r}: use {SPECS} (docs/settings.md)")


def load_reranker(spec: str, chat_model: ChatModel) -> Reranker | None:
    """The reranker `spec` names (None for off); `chat` reranks with `chat_model`."""
    spec = check_spec(spec)
    if spec == "off":
        return None
    if spec == "chat":
        if chat_model.runs_to_budget:
            raise InputError(
                f"KEEM_RERANKER=chat: the chat model '{chat_model.spec}' cannot rerank ({chat_model.runs_to_budget}); "
                "use a model that ends its answers, a cross-encoder:<path>, or off"
            )
        return ChatReranker(chat_model)
    return CrossEncoderReranker(spec.removeprefix("cross-encoder:").strip())


def rerank(
    reranker: Reranker | None, query: str, ranked: Sequence[tuple[int, float]], texts: dict[int, str]
) -> list[tuple[int, float]]:
    """`ranked` ((sentence id, fused score), best first) with its first CANDIDATES in the reranker's order; the
    fused order wherever the reranker gives none."""
    head, tail = list(ranked[:CANDIDATES]), list(ranked[CANDIDATES:])
    if reranker is None or len(head) < 2:
        return head + tail
    try:
        order = reranker.order(query[:QUERY_CHARS], [texts[i][:TEXT_CHARS] for i, _ in head])
    except KeemError as exc:  # a model that failed (timeout, 429, overflow): this turn keeps the fused order
        log.warning("reranker %s failed, the fused order stands: %s", reranker.name, exc)
        order = None
    if not order:
        return head + tail
    named = list(dict.fromkeys(i for i in order if 0 <= i < len(head)))
    rest = [i for i in range(len(head)) if i not in set(named)]
    return [head[i] for i in named + rest] + tail


def parse_order(answer: str, count: int) -> list[int] | None:
    """The 0-based candidates an answer names, in its order ("순서: 3, 1, 2", or a line of bare numbers; wrappers
    aside), each once and within 1..count; None when no such line names one."""
    found: list[int] | None = None
    for line in strip_wrappers(answer).splitlines():
        m = _ORDER_LINE.search(line)
        body = m.group(1) if m else line if _NUMBERS_ONLY.fullmatch(line.strip()) else ""
        numbers = [int(n) - 1 for n in re.findall(r"\d+", body)]
        numbers = list(dict.fromkeys(n for n in numbers if 0 <= n < count))
        if numbers:
            found = numbers  # the last such line: a preamble may quote the prompt's example first
    return found


class ChatReranker(Reranker):
    """The chat model orders the candidates (memory/prompts/rerank.txt): one short deterministic call."""

    def __init__(self, model: ChatModel):
        self.model = model
        self.name = f"chat:{model.spec}"

    def order(self, query: str, texts: list[str]) -> list[int] | None:
        messages: list[Message] = [{"role": "user", "content": render("rerank", query=query, sentences=texts)}]
        options = GenerationOptions(max_new_tokens=ANSWER_TOKENS, temperature=0.0, top_p=1.0, timeout_s=TIMEOUT_S)
        done = self.model.complete(messages, options)
        if done.cut:  # an answer cut at its budget is unusable (docs/design.md): the fused order stands
            log.warning("reranker %s: answer cut at %d tokens, the fused order stands", self.name, ANSWER_TOKENS)
            return None
        return parse_order(done.text, len(texts))


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder (a local folder, or a hub id where the hub is reachable)."""

    def __init__(self, source: str):
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:  # pragma: no cover - in the base install
            raise ModelUnavailableError("pip install sentence-transformers (make install does)") from exc
        try:
            self._model = CrossEncoder(source, max_length=CROSS_ENCODER_MAX_TOKENS, device="cpu")
        except (OSError, ValueError) as exc:
            raise ModelUnavailableError(
                f"cannot load cross-encoder '{source}' ({str(exc).splitlines()[0]}): give the folder of a "
                "sentence-transformers CrossEncoder (or a hub id where the hub is reachable), or KEEM_RERANKER=off"
            ) from exc
        self.name = f"cross-encoder:{source}"

    def order(self, query: str, texts: list[str]) -> list[int] | None:
        scores = self._model.predict([(query, t) for t in texts], show_progress_bar=False, convert_to_numpy=True)
        return sorted(range(len(texts)), key=lambda i: -float(scores[i]))
