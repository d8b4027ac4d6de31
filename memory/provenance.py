"""Where each memory sentence came from (a memory row's "왜?"): written with every version, read back for a person.

Written (`attach`, by memory/jobs.py before an update commits, and MemoryEngine.commit for a user's own sentences):
each new or rewritten sentence gets `sources`, stored as JSON beside it (migration m010_provenance) and carried
with it, unchanged, while its text is unchanged (memory/updaters/base.py carry_over keeps it):
  step       what wrote it: "rewrite" (the update model's integrated memory), "summary" (a sentence of this
             session's summary the rewrite left out, appended; the accumulate strategy), "operation" (the
             operations strategy, with `op` APPEND or REPLACE), "fallback" (the never-lose fallback), "user",
             "import", "restore" (a dropped sentence the user brought back), "revert" (a version brought back)
  session    the session it came from
  continues  ids of the previous version's sentences it continues (a rewrite; several when it merges them: the
             guard's counterparts, memory/updaters/guard.py)
  turns      [turn id, score]: the session's user turns that support what is new in it, best first (at most
             TOP_TURNS): the share of its new Korean content words (Kiwi, memory/korean.py: words the sentences it
             continues did not have) the turn holds, plus the embedder's cosine, weighted LEXICAL : 1 - LEXICAL;
             turns that share no such word, or score under CLOSE of the best, are left out: the embedder's cosine
             orders turns, never makes one a source (it is high for unrelated Korean sentences too), so a sentence
             no turn shares a word with quotes nothing rather than a wrong turn
  line       the index of the summary line (details "reflected", else "summary") it came through
  at         when a person wrote it (user, import, restore, revert)
Only ids and numbers, never texts: erasing a sentence or redacting a turn (memory/redact.py) leaves no copy here,
and what is read back is what the database holds now.

Read (`explain`): the sentence with its session dates, the user's own words that support it (quoted with their
time), the sentences it continues, the summary line, and for an emotion-and-cause sentence which words carry the
emotion and which the cause (memory/emotion_words.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from memory.emotion_words import EmotionParts, emotion_parts
from memory.emotions import is_plan
from memory.korean import content_words
from memory.store import MARKER, Sentence, Store, Version, now_iso
from memory.store.connection import placeholders
from models.embedders import Embedder

TOP_TURNS = 3
CLOSE = 0.6  # a supporting turn scores at least this share of the best one (a shared verb alone is not support)
LEXICAL = 0.7  # weight of the content-word share; the rest is the embedder's cosine (which alone pairs anything)
STEPS = {"updater": "rewrite", "user": "user", "import": "import"}


# -- writing -------------------------------------------------------------------------------------------------------
def _new_words(text: str, older: Sequence[str]) -> frozenset[str]:
    """The content words of `text` the sentences it continues did not have (all of them when it only rephrases)."""
    words = content_words(text)
    fresh = words - frozenset().union(*(content_words(o) for o in older))
    return fresh or words


def support(
    texts: Sequence[str],
    older: Sequence[Sequence[str]],
    turns: Sequence[Mapping[str, Any]],
    embedder: Embedder | None,
) -> list[list[list[float]]]:
    """For each text, [[turn id, score], ...] of the user turns that support what is new in it, best first."""
    said = [t for t in turns if t["role"] == "user" and t["text"] != MARKER]
    if not texts or not said:
        return [[] for _ in texts]
    cos = np.zeros((len(texts), len(said)), dtype=np.float32)
    if embedder is not None:
        cos = embedder.embed(list(texts)) @ embedder.embed([t["text"] for t in said]).T
    turn_words = [content_words(t["text"]) for t in said]
    out = []
    for i, text in enumerate(texts):
        new = _new_words(text, older[i])
        scored = []
        for j, t in enumerate(said):
            lexical = len(new & turn_words[j]) / len(new) if new else 0.0
            score = LEXICAL * lexical + (1 - LEXICAL) * max(float(cos[i, j]), 0.0)
            scored.append((lexical > 0, score, t["id"]))
        scored.sort(key=lambda x: (-x[0], -x[1]))
        best = scored[0][1] if scored and scored[0][0] else 0.0
        chosen = [s for s in scored if s[0] and s[1] >= CLOSE * best][:TOP_TURNS]
        out.append([[turn, round(score, 3)] for _, score, turn in chosen])
    return out


def _summary_line(text: str, lines: Sequence[str]) -> int | None:
    """The summary line `text` shares most content words with (at least one), or None."""
    words = content_words(text)
    shared = [len(words & content_words(line)) for line in lines]
    best = max(range(len(lines)), key=shared.__getitem__, default=None)
    return best if best is not None and shared[best] > 0 else None


def _merged(previous: Sequence[Sentence], details: Mapping[str, Any]) -> dict[str, list[int]]:
    """{new text: ids of the previous sentences it continues} from the guard's decisions of the last attempt."""
    attempts = details.get("attempts") or []
    decisions = attempts[-1].get("guard", []) if attempts and isinstance(attempts[-1], dict) else []
    ids = {s.text: s.id for s in previous if s.id is not None}
    out: dict[str, list[int]] = {}
    for d in decisions:
        if d.get("action") in ("kept", "rewritten") and d.get("counterpart") and d.get("sentence") in ids:
            out.setdefault(d["counterpart"], []).append(ids[d["sentence"]])
    return out


def attach(
    previous: Sequence[Sentence],
    sentences: Sequence[Sentence],
    *,
    details: Mapping[str, Any],
    status: str,
    turns: Sequence[Mapping[str, Any]],
    session_id: int | None,
    embedder: Embedder | None,
) -> list[Sentence]:
    """`sentences` (an update's result over `previous`) with sources on each sentence that has none: what it
    continues, the user turns behind what is new in it, and the step it came through. Carried sentences keep
    theirs."""
    old = {s.id: s.text for s in previous if s.id is not None}
    merged = _merged(previous, details)
    operations = {o["sentence"]: o["operation"] for o in details.get("operations", []) if isinstance(o, dict)}
    reflected = list(details.get("reflected") or [])
    summary = list(details.get("summary") or [])
    lines, line_of = (reflected, "reflected") if reflected else (summary, "summary")
    attempts = details.get("attempts") or []
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    # summary lines the rewrite left out and the guard appended; without a rewrite (a first session, accumulate)
    # every summary line is the summary's
    appended = set(last["summary_kept"]) if "summary_kept" in last else set(lines)
    todo = [i for i, s in enumerate(sentences) if s.sources is None]
    continues: dict[int, list[int]] = {}
    for i in todo:
        s = sentences[i]
        ids = list(dict.fromkeys([*([s.origin_id] if s.origin_id in old else []), *merged.get(s.text, [])]))
        continues[i] = [j for j in ids if j is not None]
    scores = support([sentences[i].text for i in todo], [[old[j] for j in continues[i]] for i in todo], turns, embedder)
    out = list(sentences)
    for i, found in zip(todo, scores, strict=True):
        s = sentences[i]
        if status == "fallback":
            step = "fallback"
        elif s.text in operations:
            step = "operation"
        elif s.provenance == "added" and s.text in appended and not continues[i]:
            step = "summary"
        else:
            step = "rewrite"
        sources: dict[str, Any] = {"step": step, "session": session_id, "continues": continues[i], "turns": found}
        if step == "operation":
            sources["op"] = operations[s.text]
        line = _summary_line(s.text, lines)
        if line is not None:
            sources |= {"line": line, "line_of": line_of}
        out[i] = replace(s, sources=sources)
    return out


def by_person(sentences: Sequence[Sentence], author: str, previous: Version | None) -> list[Sentence]:
    """A person's version (the memory tab, an import): sources for the sentences that have none, naming what each
    continues and when it was written."""
    old = {s.id for s in previous.sentences} if previous else set()
    at = now_iso()
    return [
        s
        if s.sources is not None
        else replace(
            s,
            sources={
                "step": STEPS.get(author, author),
                "continues": [s.origin_id] if s.origin_id in old else [],
                "at": at,
            },
        )
        for s in sentences
    ]


# -- reading -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quote:
    text: str
    at: str
    score: float


@dataclass(frozen=True)
class Why:
    """One sentence's provenance as a person reads it (texts resolved from the database now)."""

    number: int  # its place in the version, from 1
    text: str
    kind: str  # the commit's word: kept, added, rewritten, restored, user, ...
    step: str | None  # sources' step; None when the version was written before provenance was recorded
    sessions: list[str] = field(default_factory=list)  # when the sessions it comes from started (stored, UTC)
    quotes: list[Quote] = field(default_factory=list)
    continues: list[str] = field(default_factory=list)
    summary_line: str | None = None
    op: str | None = None
    written_at: str | None = None
    emotion: EmotionParts | None = None

    def as_json(self, when: Callable[[str], str | None] = lambda at: at) -> dict[str, Any]:
        """As JSON, each time through `when` (a front end's zone: chatbot/localtime.py LocalTime.iso)."""
        return {
            **asdict(self),
            "sessions": [when(at) for at in self.sessions],
            "quotes": [{**asdict(q), "at": when(q.at)} for q in self.quotes],
            "written_at": when(self.written_at) if self.written_at else None,
            "emotion": asdict(self.emotion) if self.emotion else None,
        }


def _of(store: Store, sql: str, user_id: int, ids: Sequence[int]) -> list[dict[str, Any]]:
    """The rows of `sql` (with `{ids}` where the ids go) for this user and these ids; none without ids."""
    return store.rows(sql.format(ids=placeholders(ids)), [user_id, *ids]) if ids else []


def explain_all(store: Store, version: Version) -> list[Why]:
    """The provenance of every sentence of `version`, in its order."""
    uid = version.user_id
    srcs = [s.sources or {} for s in version.sentences]
    turn_ids = sorted({int(t[0]) for src in srcs for t in src.get("turns", [])})
    old_ids = sorted({int(i) for src in srcs for i in src.get("continues", [])})
    turns = {
        r["id"]: r
        for r in _of(store, "select id, text, created_at from turns where user_id = ? and id in ({ids})", uid, turn_ids)
    }
    olds = {
        r["id"]: r
        for r in _of(
            store, "select id, text, sources from memory_sentences where user_id = ? and id in ({ids})", uid, old_ids
        )
    }

    def session_of(src: Mapping[str, Any]) -> int | None:
        return src.get("session")

    sessions: set[int] = {s for src in srcs if (s := session_of(src)) is not None}
    for row in olds.values():
        if row["sources"] and (s := session_of(json.loads(row["sources"]))) is not None:
            sessions.add(s)
    ids = sorted(sessions)
    started = {
        r["id"]: r["started_at"]
        for r in _of(store, "select id, started_at from sessions where user_id = ? and id in ({ids})", uid, ids)
    }
    details = {
        r["session_id"]: json.loads(r["details"] or "{}")
        for r in _of(
            store,
            "select session_id, details from memory_versions where user_id = ? and session_id in ({ids}) "
            "order by number desc",
            uid,
            ids,
        )
    }
    # the update's emotion records (memory/emotions.py) say which emotion and cause a sentence holds, in the
    # model's reading backed by the user's words; the surface heuristic only where no record names the sentence
    recorded = {
        r.sentence: EmotionParts([r.emotion], r.cause) for r in version.records if r.sentence and not is_plan(r)
    }
    out = []
    for n, (sentence, src) in enumerate(zip(version.sentences, srcs, strict=True), 1):
        own = [src["session"]] if src.get("session") in started else []
        for i in src.get("continues", []):
            if i in olds and olds[i]["sources"]:
                sid = session_of(json.loads(olds[i]["sources"]))
                if sid in started:
                    own.append(sid)
        line = None
        if "line" in src and src.get("session") in details:
            lines = details[src["session"]].get(src.get("line_of", "reflected")) or []
            line = lines[src["line"]] if 0 <= src["line"] < len(lines) else None
        out.append(
            Why(
                number=n,
                text=sentence.text,
                kind=sentence.provenance,
                step=src.get("step"),
                sessions=sorted({started[i] for i in own}),
                quotes=[
                    Quote(turns[t]["text"], turns[t]["created_at"], float(score))
                    for t, score in src.get("turns", [])
                    if t in turns
                ],
                continues=[olds[i]["text"] for i in src.get("continues", []) if i in olds],
                summary_line=line,
                op=src.get("op"),
                written_at=src.get("at"),
                emotion=current_emotion(recorded.get(sentence.text), sentence.text),
            )
        )
    return out


def current_emotion(recorded: EmotionParts | None, text: str) -> EmotionParts | None:
    """The emotion a sentence holds now: its record's, unless the sentence was rewritten to another feeling (a
    record keeps the label it was first given: "불안" for a sentence that now says the user is relieved), then the
    feeling its own words carry; the surface reading where no record names the sentence."""
    own = emotion_parts(text)
    if recorded is None:
        return own
    if own is not None and not any(label and label in text for label in recorded.emotion):
        return EmotionParts(own.emotion, own.cause or recorded.cause)
    return recorded


def explain(store: Store, version: Version, number: int) -> Why:
    """The provenance of sentence `number` (from 1) of `version`."""
    return explain_all(store, version)[number - 1]
