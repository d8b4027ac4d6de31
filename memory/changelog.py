"""What one memory version changed and why, in plain Korean: the changelog shown after "대화 끝내기", in the
history, by `keem memory changes` and in exports.

Built from what is already stored, never a second diff: memory/diff.py's origin-based diff says what was kept,
added, rewritten and removed; the version's details say why (the deletion guard's decisions with the judge's
answer and the session's sentence it was asked about, memory/updaters/guard.py; a scoped rewrite's carried part;
the operations strategy's PASS / APPEND / REPLACE / DELETE per summary sentence; a fallback's note), and each
sentence's sources (memory/provenance.py) give the user turns an addition came from.

Entries, in this order: fallback, added, rewritten (old -> new, the changed words marked), dropped (with the
judge's reason, quoting the session), restored (by the guard, and why), carried (verbatim by a scoped rewrite),
kept. With `blind` (a user trial) nothing names a strategy or an operation: the reasons stay, in words.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memory.diff import version_diff
from memory.provenance import Quote, Why, explain_all
from memory.store import Store, Version
from memory.store.rebase import continuations
from memory.words import particle

KINDS = ("fallback", "added", "rewritten", "dropped", "restored", "carried", "kept", "passed")
HEADINGS = {
    "fallback": "안전 모드로 저장",
    "added": "새로 기억함",
    "rewritten": "고쳐 씀",
    "dropped": "더 이상 기억하지 않음",
    "restored": "빠졌다가 되살림",
    "carried": "그대로 옮김",
    "kept": "그대로 둠",
    "passed": "이미 있어 넘어감",
}


@dataclass(frozen=True)
class Entry:
    kind: str  # one of KINDS
    text: str  # the sentence (for `rewritten`: the new one)
    reason: str = ""  # plain Korean
    old: str | None = None  # `rewritten`: the sentence it replaced
    changed: list[tuple[str, bool]] = field(default_factory=list)  # `rewritten`: the new text in parts, changed?
    quotes: list[Quote] = field(default_factory=list)  # the user's words behind it
    sentence_id: int | None = None  # `dropped`: its id in the previous version (what "되살리기" restores)

    def as_json(self, when: Callable[[str], str | None] = lambda at: at) -> dict[str, Any]:
        return {**asdict(self), "quotes": [{**asdict(q), "at": when(q.at)} for q in self.quotes]}


@dataclass(frozen=True)
class Changelog:
    version: int
    base: int | None  # the version it was made from
    author: str
    status: str
    entries: list[Entry]

    def of(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]

    def counts(self) -> dict[str, int]:
        return {k: n for k in KINDS if (n := len(self.of(k)))}

    def as_json(self, when: Callable[[str], str | None] = lambda at: at) -> dict[str, Any]:
        """As JSON, each quote's time through `when` (a front end's zone: chatbot/localtime.py LocalTime.iso)."""
        return {
            "version": self.version,
            "base": self.base,
            "author": self.author,
            "status": self.status,
            "counts": self.counts(),
            "entries": [e.as_json(when) for e in self.entries],
        }


def changed_parts(old: str, new: str) -> list[tuple[str, bool]]:
    """`new` split into runs of words, each marked whether it is not in `old` at that place (difflib on words)."""
    a, b = old.split(), new.split()
    parts: list[tuple[str, bool]] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if j2 > j1:
            parts.append((" ".join(b[j1:j2]), tag != "equal"))
    return parts


def _quote(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _guard_reason(d: Mapping[str, Any], dropped: bool) -> str:
    """Why the guard let a sentence go, or brought it back, in words a person reads."""
    pair = f"'{_quote(d['pair'])}'" if d.get("pair") else "이번 대화의 어떤 말"
    if dropped:
        if d.get("evidence") == "named by the verifier":
            return f"새 기억의 {pair}와 서로 어긋난다는 검토가 있었고, 모델도 이제 사실이 아니라고 판단했어요."
        return f"이번 대화의 {pair} 때문에 더 이상 사실이 아니라고 모델이 판단했어요."
    if not d.get("related"):
        return "새로 쓴 기억에서 빠졌지만, 이번 대화에 이 내용을 바꿀 만한 말이 없어 그대로 되살렸어요."
    if d.get("judge") in ("아니오",):
        return f"이번 대화의 {pair}와 관련은 있지만 이 내용이 틀렸다는 뜻은 아니라고 모델이 판단해 되살렸어요."
    return f"이번 대화의 {pair} 때문에 빠진 것인지 모델의 판단이 분명하지 않아 되살렸어요."


OPERATION_REASONS = {
    "PASS": "이미 기억에 있는 내용이라 더하지 않았어요",
    "APPEND": "새로운 내용이라 기억 끝에 덧붙였어요",
    "REPLACE": "이번 대화의 새 내용으로 바꿔 썼어요",
    "DELETE": "이번 대화 내용에 따라 지웠어요",
}


def _op(reason: str, op: str, blind: bool) -> str:
    return reason if blind else f"{reason} ({op})"


def changelog(store: Store, previous: Version | None, version: Version, *, blind: bool = False) -> Changelog:
    """The changelog of `version` over `previous` (the version before it; None for the first)."""
    diff = version_diff(previous, version)
    why = explain_all(store, version)
    d = version.details or {}
    attempts = d.get("attempts") or []
    decisions = (
        attempts[-1].get("guard", []) if attempts and isinstance(attempts[-1], dict) and version.status == "ok" else []
    )
    decided = {g["sentence"]: g for g in decisions if isinstance(g, dict)}
    operations = [o for o in d.get("operations", []) if isinstance(o, dict)]
    by_sentence = {o["sentence"]: o for o in operations}
    by_target = {o["target"]: o for o in operations if o.get("target")}
    person = version.author in ("user", "import")
    entries: list[Entry] = []
    if version.status == "fallback":
        entries.append(Entry("fallback", "", fallback_reason(d)))
    # the user's words behind each sentence of this version, and the turns themselves: what a guard's pair quotes
    said = {w.text: w.quotes for w in why} | {q.text: [q] for w in why for q in w.quotes}
    origins = continuations(previous.sentences if previous else (), version.sentences)  # what diff.py matches by
    continued = {o for o in origins if o is not None}
    old_text = {s.id: s.text for s in previous.sentences} if previous else {}
    for s, origin, w in zip(version.sentences, origins, why, strict=True):
        if origin is None:
            reason = _added_reason(s.text, w, version, by_sentence, blind)
            entries.append(Entry("added", s.text, reason, quotes=w.quotes))
        elif old_text[origin] != s.text:
            old = old_text[origin]
            reason = (
                "사용자가 직접 고쳤어요."
                if person
                else _op(OPERATION_REASONS["REPLACE"], "REPLACE", blind)
                if s.text in by_sentence
                else "이번 대화에서 바뀐 내용을 반영해 고쳐 썼어요."
            )
            entries.append(Entry("rewritten", s.text, reason, old, changed_parts(old, s.text), w.quotes))
        elif s.provenance == "restored" and s.text in decided:
            pair = decided[s.text].get("pair") or ""
            entries.append(Entry("restored", s.text, _guard_reason(decided[s.text], False), quotes=said.get(pair, [])))
        elif not person and d.get("scope") and s.text not in decided and not operations:
            entries.append(Entry("carried", s.text, "이번 대화와 관련이 없어 모델에 보내지 않고 그대로 옮겼어요."))
        else:
            entries.append(Entry("kept", s.text, "사용자가 손대지 않았어요." if person else "바뀐 내용이 없어요."))
    removed = list(diff.removed)  # memory/diff.py: previous sentences nothing continues, in their order
    for old_s in previous.sentences if previous else ():
        if old_s.text not in removed or old_s.id in continued:
            continue
        removed.remove(old_s.text)
        text = old_s.text
        quotes: list[Quote] = []
        if person:
            reason = (
                f"버전 {particle(d['revert_to'], '으로')} 되돌리면서 빠졌어요."
                if d.get("revert_to")
                else "사용자가 지웠어요."
            )
        elif text in decided and decided[text].get("action") == "dropped":
            reason = _guard_reason(decided[text], dropped=True)
            quotes = said.get(decided[text].get("pair") or "", [])
        elif text in by_target:
            o = by_target[text]
            reason = _op(OPERATION_REASONS[o["operation"]], o["operation"], blind) + f": '{_quote(o['sentence'])}'"
        else:
            reason = "새 기억에 없어요."
        entries.append(Entry("dropped", text, reason, quotes=quotes, sentence_id=old_s.id))
    for o in operations:
        if o["operation"] == "PASS":
            entries.append(Entry("passed", o["sentence"], _op(OPERATION_REASONS["PASS"], "PASS", blind)))
    order = {k: i for i, k in enumerate(KINDS)}
    entries.sort(key=lambda e: order[e.kind])
    return Changelog(version.number, d.get("base"), version.author, version.status, entries)


HANGUL = re.compile(r"[가-힣]")


def fallback_reason(details: Mapping[str, Any]) -> str:
    """Why an update fell back (previous memory + this session's summary), in words: the verifier's own objection
    when it wrote one in Korean, else what failed."""
    attempts = [a for a in details.get("attempts") or [] if isinstance(a, dict)]
    problem = str(attempts[-1].get("problem") or "") if attempts else ""
    if problem and HANGUL.search(problem):
        return (
            f"새로 쓴 기억이 검토를 통과하지 못했어요 (검토 의견: {_quote(problem, 120)}). 그래서 이전 기억을 모두 "
            "두고 이번 대화 요약을 덧붙였어요."
        )
    if attempts:
        return "모델의 답을 기억으로 쓸 수 없었어요. 그래서 이전 기억을 모두 두고 이번 대화 요약을 덧붙였어요."
    return "모델이 쓸 만한 요약을 쓰지 못했어요. 그래서 이전 기억을 모두 두고 사용자가 한 말을 그대로 덧붙였어요."


def _added_reason(text: str, w: Why, version: Version, operations: Mapping[str, Mapping[str, Any]], blind: bool) -> str:
    step = w.step
    if step == "restore":
        return "사용자가 되살린 문장이에요."
    if step == "revert":
        return f"사용자가 버전 {particle(version.details.get('revert_to'), '으로')} 되돌리면서 돌아온 문장이에요."
    if step in ("user", "import") or version.author in ("user", "import"):
        return "사용자가 직접 넣었어요." if step != "import" else "가져온 기억이에요."
    if text in operations:
        return _op(OPERATION_REASONS["APPEND"], "APPEND", blind)
    if version.strategy == "accumulate" and step != "fallback":  # it only ever appends the session's summary
        return _op("이번 대화 요약을 기억 끝에 덧붙였어요", "APPEND", blind)
    if step == "fallback":
        return "이번 대화 요약을 그대로 덧붙였어요."
    if step == "summary":
        return "이번 대화 요약에 있던 내용이라 덧붙였어요."
    return "이번 대화에서 새로 알게 된 내용이에요." if w.quotes else "이번 대화를 정리하며 새로 쓴 문장이에요."


def changelogs(store: Store, versions: Sequence[Version], *, blind: bool = False) -> list[Changelog]:
    """The changelog of every version, oldest first."""
    return [changelog(store, p, v, blind=blind) for p, v in zip([None, *versions], versions, strict=False)]


def version_log(store: Store, version: Version) -> Changelog:
    """The changelog of `version` over the version before it (`keem memory changes`, the HTTP API)."""
    previous = store.versions.get(version.user_id, version.number - 1) if version.number > 1 else None
    return changelog(store, previous, version)
