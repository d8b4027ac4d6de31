"""LoCoMo retrieval hit@k through the product's own retrieval path (SQLite store + MemoryEngine + FAISS).

A LoCoMo file (snap-research/locomo, data/locomo10.json) is a JSON list of conversation samples. Per sample:
  observation: {"session_N_observation": {speaker: [[text, dia_id], ...]}}   -> the memory (one user per sample)
  qa:          [{"question", "answer", "evidence": [dia_id, ...], "category": 1..5}] -> the queries
An observation is relevant to a question when one of its dialogue ids is among the question's evidence ids;
a question is a hit at k when one of the k sentences the engine returns is relevant. Category 5 (adversarial,
unanswerable) is left out by default. The file format is read tolerantly: dia_id may be a string ("D1:3",
"D1:3; D1:5", the stray "D:1:3") or a list; observations may also sit at the top level of the sample.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from models.embedders import Embedder
from models.errors import InputError

# The usual reading of LoCoMo's category numbers (as in the Mem0 and A-Mem evaluations).
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEFAULT_CATEGORIES = (1, 2, 3, 4)
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_SESSION_OBS = re.compile(r"^session_(\d+)_observation$")


@dataclass(frozen=True)
class Observation:
    text: str
    dia_ids: frozenset[str]
    speaker: str
    session: int


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]
    answer: str = ""


@dataclass
class Conversation:
    sample_id: str
    observations: list[Observation]
    questions: list[Question]


def dia_ids(value: Any) -> frozenset[str]:
    """Every dialogue id in a string, list (nested) or None, normalised to 'D<session>:<turn>'."""
    if value is None:
        return frozenset()
    if isinstance(value, (list, tuple, set, frozenset)):
        return frozenset().union(*(dia_ids(v) for v in value)) if value else frozenset()
    return frozenset(f"D{int(s)}:{int(t)}" for s, t in _DIA_ID.findall(str(value)))


def _observation_blocks(sample: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(session number, {speaker: entries}) from sample['observation'] or, failing that, the sample itself."""
    source = sample.get("observation")
    if not isinstance(source, dict):
        source = sample
    blocks = []
    for key, block in source.items():
        m = _SESSION_OBS.match(str(key))
        if m and isinstance(block, dict):
            blocks.append((int(m.group(1)), block))
    return sorted(blocks, key=lambda b: b[0])


def _entry(item: Any) -> tuple[str, Any] | None:
    """[text, dia_id] (or a {"text", "dia_id"} object) -> (text, dia_id); None for anything else."""
    if isinstance(item, dict):
        text, ids = item.get("text") or item.get("observation"), item.get("dia_id", item.get("evidence"))
    elif isinstance(item, (list, tuple)) and item:
        text, ids = item[0], (item[1] if len(item) == 2 else list(item[1:]))
    else:
        return None
    return (text, ids) if isinstance(text, str) and text.strip() else None


def parse_sample(sample: dict[str, Any], index: int) -> Conversation:
    sample_id = str(sample.get("sample_id") or f"sample-{index}")
    observations = []
    for session, block in _observation_blocks(sample):
        for speaker, items in block.items():
            for item in items if isinstance(items, list) else []:
                entry = _entry(item)
                if entry is not None:
                    observations.append(Observation(entry[0].strip(), dia_ids(entry[1]), str(speaker), session))
    questions = []
    for qa in sample.get("qa") or []:
        if not isinstance(qa, dict) or not str(qa.get("question") or "").strip():
            continue
        try:
            category = int(qa.get("category"))
        except (TypeError, ValueError):
            continue
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(Question(str(qa["question"]).strip(), category, dia_ids(qa.get("evidence")),
                                  "" if answer is None else str(answer)))
    return Conversation(sample_id, observations, questions)


def parse_locomo(data: Any) -> list[Conversation]:
    """The conversations of a parsed LoCoMo file (a list of samples, or one sample)."""
    samples = [data] if isinstance(data, dict) else data
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise InputError("not a LoCoMo file: expected a JSON list of samples with 'observation' and 'qa'")
    conversations = [parse_sample(s, i) for i, s in enumerate(samples)]
    if not any(c.observations for c in conversations):
        raise InputError("no observations found: a LoCoMo sample needs "
                         "'observation': {'session_1_observation': {speaker: [[text, dia_id], ...]}}")
    if not any(c.questions for c in conversations):
        raise InputError("no questions found: a LoCoMo sample needs 'qa': [{'question', 'evidence', 'category'}]")
    return conversations


def load_locomo(path: str | Path) -> list[Conversation]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_locomo(data)


@dataclass
class _Tally:
    queries: int = 0
    hits: int = 0
    reachable: int = 0
    reachable_hits: int = 0
    reciprocal: float = 0.0

    def add(self, reachable: bool, rank: int | None) -> None:
        self.queries += 1
        self.reachable += reachable
        if rank is not None:
            self.hits += 1
            self.reachable_hits += 1
            self.reciprocal += 1.0 / rank

    def as_json(self) -> dict[str, Any]:
        return {"queries": self.queries, "hits": self.hits,
                "hit_at_k": round(self.hits / self.queries, 4) if self.queries else None,
                "mrr_at_k": round(self.reciprocal / self.queries, 4) if self.queries else None,
                "reachable": self.reachable,
                "hit_at_k_reachable": round(self.reachable_hits / self.reachable, 4) if self.reachable else None}


@dataclass
class Result:
    embedder: str
    k: int
    categories: tuple[int, ...]
    overall: _Tally = field(default_factory=_Tally)
    per_category: dict[int, _Tally] = field(default_factory=dict)
    per_conversation: list[dict[str, Any]] = field(default_factory=list)
    skipped_no_evidence: int = 0
    ignored_other_categories: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def hit_at_k(self) -> float:
        return self.overall.hits / self.overall.queries if self.overall.queries else 0.0

    def as_json(self, with_misses: bool = False) -> dict[str, Any]:
        out = {"embedder": self.embedder, "k": self.k, "categories": list(self.categories),
               **self.overall.as_json(),
               "per_category": {str(c): {"name": CATEGORY_NAMES.get(c, f"category {c}"), **t.as_json()}
                                for c, t in sorted(self.per_category.items())},
               "per_conversation": self.per_conversation,
               "skipped_no_evidence": self.skipped_no_evidence,
               "ignored_other_categories": self.ignored_other_categories,
               "observations": sum(c["observations"] for c in self.per_conversation),
               "seconds": round(self.seconds, 2)}
        if with_misses:
            out["misses"] = self.misses
        return out


def evaluate(conversations: Iterable[Conversation], embedder: Embedder, k: int = 5,
             categories: Iterable[int] = DEFAULT_CATEGORIES, db_dir: str | Path | None = None) -> Result:
    """hit@k of every question (of the chosen categories, with evidence) of every conversation.

    Each conversation becomes one user of a fresh SQLite store whose memory is one imported version holding
    that conversation's observations; each question goes through MemoryEngine.search, exactly as a chat turn.
    """
    from memory.engine import MemoryEngine
    from memory.store import Sentence, Store

    if k < 1:
        raise InputError("--k must be at least 1")
    chosen = tuple(sorted(set(int(c) for c in categories)))
    result = Result(embedder=getattr(embedder, "name", "?"), k=k, categories=chosen)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="keem-locomo-", dir=db_dir) as tmp:
        store = Store(Path(tmp) / "locomo.db")
        try:
            engine = MemoryEngine(store, embedder)
            for number, conv in enumerate(conversations, 1):
                row = {"sample_id": conv.sample_id, "observations": len(conv.observations)}
                tally = _Tally()
                questions = []
                for q in conv.questions:
                    if q.category not in chosen:
                        result.ignored_other_categories += 1
                    elif not q.evidence:
                        result.skipped_no_evidence += 1
                    else:
                        questions.append(q)
                if not conv.observations or not questions:
                    result.per_conversation.append({**row, **tally.as_json()})
                    continue
                user_id = store.get_or_create_user(f"locomo-{number}")
                version = engine.commit(user_id, [Sentence(o.text, "imported") for o in conv.observations],
                                        strategy="import", status="ok", author="import",
                                        note=f"LoCoMo {conv.sample_id} observations")
                ids_of = {s.id: o.dia_ids for s, o in zip(version.sentences, conv.observations)}
                known = frozenset().union(*ids_of.values())
                for q in questions:
                    hits = engine.search(user_id, q.text, k=k)
                    rank = next((r for r, h in enumerate(hits, 1)
                                 if ids_of.get(h.sentence_id, frozenset()) & q.evidence), None)
                    reachable = bool(known & q.evidence)
                    for t in (tally, result.overall, result.per_category.setdefault(q.category, _Tally())):
                        t.add(reachable, rank)
                    if rank is None:
                        result.misses.append({"sample_id": conv.sample_id, "category": q.category,
                                              "question": q.text, "evidence": sorted(q.evidence),
                                              "reachable": reachable, "retrieved": [h.text for h in hits]})
                result.per_conversation.append({**row, **tally.as_json()})
        finally:
            store.close()
    result.seconds = time.perf_counter() - started
    return result
