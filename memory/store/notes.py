"""Why a memory version is as it is, as codes with parameters (never as text): what the store keeps in a version's
`notes` column (JSON, migrations m014 and pg003) and each front end renders in its own words: English here (`keem
memory history`, logs), Korean on the page (chatbot/web/messages.py NOTES), the codes themselves in the HTTP API.

A version carries a list of entries, in the order they were added: what its writer said, then a rebase (when its
commit was replayed onto a newer version), then an erasure (when one of its sentences was erased later). A
parameter may hold a text from the memory (a model problem, a file name): an erasure scrubs it like any other copy.
`text` holds a note from before codes, that no pattern in `from_legacy` recognised, verbatim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from models.errors import InputError


@dataclass(frozen=True)
class Note:
    code: str
    params: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "params": dict(self.params)}


# Every code, its parameters, and its English text (a list parameter `problems`, where a code has it, is rendered
# after it in parentheses: the model problems behind an updater's fallback, memory/updaters/steps.py `why`).
ENGLISH = {
    # the user's own changes (chatbot/edits.py, memory/undo.py); `sentence` counts from 1
    "edited": "the user rewrote sentence {sentence}",
    "deleted": "the user deleted sentence {sentence}",
    "added": "the user added a sentence",
    "restored": "the user brought back a dropped sentence",
    "reverted": "the user reverted to version {to}",
    # a commit replayed onto a newer version (memory/store/versions.py): the user's change, or an update
    "rebased_user": "the change made on version {base} was replayed on version {onto}",
    "rebased_update": "replayed on version {onto}, keeping what the user changed meanwhile",
    # a sentence of this version erased later (memory/store/erasure.py; its MARKER first, as wherever text was erased)
    "erased": "[삭제됨] a sentence the user erased",
    # imports: `keem memory import`, an evaluation corpus's observations (evaluation/corpora/locomo.py)
    "imported": "imported {count} {sentences} from {file}",
    "corpus": "{corpus} {conversation} observations",
    # the updater's fallbacks (memory/updaters/keem.py, steps.py)
    "no_summary": "the update model wrote no usable summary; kept the user's own words",
    "not_verified": "verification failed {attempts} times, kept previous memory + reflected summary: {problem}",
    "first_not_verified": "the first memory did not pass verification: {problem}",
    "emotions_failed": "emotion records: no usable answer: kept the previous emotion records",
    # a note from before codes, verbatim
    "text": "{text}",
}
PARAMS = {code: set(re.findall(r"{(\w+)}", text)) - {"sentences"} for code, text in ENGLISH.items()}
WITH_PROBLEMS = {"no_summary", "not_verified", "emotions_failed"}  # codes that may carry `problems`
ERASED = "erased"
ERASED_SEPARATOR = " · "  # before an erasure's entry; "; " between the others (as the notes before codes read)


def note(code: str, **params: Any) -> Note:
    """An entry, checked: a known code with exactly its parameters (and `problems` where the code takes them)."""
    if code not in ENGLISH:
        raise InputError(f"unknown note code {code!r}; add it to memory/store/notes.py ENGLISH (and its Korean text)")
    allowed = PARAMS[code] | ({"problems"} if code in WITH_PROBLEMS else set())
    if not PARAMS[code] <= set(params) <= allowed:
        raise InputError(f"note {code!r} takes {sorted(allowed)}, not {sorted(params)}")
    if "problems" in params:
        params["problems"] = [str(p) for p in params["problems"]]
        if not params["problems"]:
            del params["problems"]
    return Note(code, params)


def english_one(entry: Note) -> str:
    """One entry in English; a code this keem does not know (a newer one wrote it) by its code and parameters."""
    template = ENGLISH.get(entry.code)
    params = {**entry.params, "sentences": "sentence" if entry.params.get("count") == 1 else "sentences"}
    try:
        text = template.format(**params) if template else f"{entry.code} {json.dumps(entry.params)}"
    except (KeyError, IndexError):
        text = f"{entry.code} {json.dumps(entry.params, ensure_ascii=False)}"
    return text + (f" ({'; '.join(entry.params['problems'])})" if entry.params.get("problems") else "")


def joined(texts: Iterable[tuple[Note, str]]) -> str:
    """The rendered entries as one line, as notes read before codes: "; " between them, " · " before an erasure."""
    out = ""
    for entry, text in texts:
        out += (ERASED_SEPARATOR if entry.code == ERASED else "; ") + text if out else text
    return out


def english(notes: Sequence[Note]) -> str | None:
    """The entries in English, one line; None when there are none."""
    return joined((n, english_one(n)) for n in notes) or None


def json_strings(value: Any) -> list[str]:
    """Every string inside a JSON value (lists and dicts to any depth): a note's parameters, a version's details."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in json_strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in json_strings(v)]
    return []


def strings(notes: Sequence[Note]) -> list[str]:
    """Every text inside the entries' parameters (what an erasure must scrub)."""
    return [s for n in notes for s in json_strings(n.params)]


def dumps(notes: Sequence[Note]) -> str | None:
    """The entries as stored (JSON); None for none."""
    return json.dumps([n.as_json() for n in notes], ensure_ascii=False) if notes else None


def loads(stored: str | None) -> tuple[Note, ...]:
    """The entries from their stored JSON (None: none)."""
    if not stored:
        return ()
    return tuple(Note(str(n["code"]), dict(n.get("params") or {})) for n in json.loads(stored))


# -- notes written before codes (what m014 / pg003 convert) ------------------------------------------------------------
_ERASED_TEXT = "[삭제됨] 사용자가 지운 문장"
_NUMBERS = {"sentence", "to", "base", "onto", "count", "attempts"}
_PROBLEMS = r"(?: \((?P<problems>.*)\))?"
_TAIL = [  # what was appended after a writer's note, last first: an erasure, a rebase, a failed records step
    (r"(?:^|; )버전 (?P<base>\d+)에서 한 변경을 버전 (?P<onto>\d+) 위에 다시 맞춤$", "rebased_user"),
    (r"(?:^|; )버전 (?P<onto>\d+) 위에 다시 맞춤 \(그 사이 사용자가 바꾼 내용 유지\)$", "rebased_update"),
    (
        r"(?:^|; )emotion records: no usable answer: kept the previous emotion records" + _PROBLEMS + "$",
        "emotions_failed",
    ),
]
_WHOLE = [  # a writer's whole note
    (r"사용자가 (?P<sentence>\d+)번 문장을 고쳤습니다", "edited"),
    (r"사용자가 (?P<sentence>\d+)번 문장을 지웠습니다", "deleted"),
    (r"사용자가 문장을 추가했습니다", "added"),
    (r"사용자가 빠진 문장을 되살렸습니다", "restored"),
    (r"사용자가 버전 (?P<to>\d+)(?:으로|로) 되돌렸습니다", "reverted"),
    (r"imported (?P<count>\d+) sentences? from (?P<file>.+)", "imported"),
    (r"LoCoMo (?P<conversation>.+) observations", "corpus"),
    (r"the update model wrote no usable summary; kept the user's own words" + _PROBLEMS, "no_summary"),
    (
        r"verification failed (?P<attempts>\d+) times, kept previous memory \+ reflected summary: (?P<problem>.*)",
        "not_verified",
    ),
]


def _entry(code: str, found: dict[str, str | None]) -> Note:
    params: dict[str, Any] = {k: int(v) if k in _NUMBERS and v else v for k, v in found.items()}
    if code == "corpus":
        params["corpus"] = "LoCoMo"
    if "problems" in params:  # one text: the problems were joined with "; ", which a problem may hold too
        params["problems"] = [params["problems"]] if params["problems"] else []
    return note(code, **params)


def from_legacy(text: str | None) -> list[Note]:
    """A note written as text before codes, as entries: the known patterns with their parameters, the rest of it (or
    all of it) verbatim in a `text` entry, so nothing is lost. Rendered in the language it was written in (Korean
    for the user's changes, a rebase and an erasure; English for the updater's and imports'), it reads as it did."""
    if not text:
        return []
    rest, tail = text, list[Note]()
    while rest.endswith(_ERASED_TEXT):
        rest = rest[: -len(_ERASED_TEXT)]
        rest = rest[: -len(ERASED_SEPARATOR)] if rest.endswith(ERASED_SEPARATOR) else rest
        tail.insert(0, note(ERASED))
    for pattern, code in _TAIL:
        found = re.search(pattern, rest, re.S)
        if found:
            tail.insert(0, _entry(code, found.groupdict()))
            rest = rest[: found.start()]
    if not rest:
        return tail
    for pattern, code in _WHOLE:
        whole = re.fullmatch(pattern, rest, re.S)
        if whole:
            return [_entry(code, whole.groupdict()), *tail]
    return [note("text", text=rest), *tail]
