"""One episode model for every multi-session corpus, and the readers of KMSC, CareCall, MSC and LoCoMo.

An Episode is its sessions in order (turns, date, summary, the memory the corpus gives before and after each
session, LoCoMo's observations), an optional probe session (the KEEM evaluation's fifth session, whose marked
assistant turns are reference responses) and LoCoMo's questions. The dataset builder, `keem eval memory` and
`keem eval retrieval` all read corpora through `read_episodes`.

Fields each reader relies on (anything else is ignored; keys match case-insensitively):

KMSC (AI Hub 한국어 멀티세션 대화 label JSON; one JSON file per episode, a directory of them, a list of them,
or ``{"data": [...]}``):
  - episode id: ``FileInfo.filename`` (extension dropped), else ``multisessionID``/``id``, else the file stem;
  - sessions: ``sessionInfo`` (also ``sessions``/``session``), in file order; session id ``sessionID``
    (else ``<episode>-<n>``);
  - turns: ``dialog`` (also ``dialogue``/``utterances``), each ``speaker`` + ``utterance`` (also ``text``),
    optional ``date`` (YYYY-MM-DD, also YYYYMMDD) and ``time``; the session date is its first turn's date;
  - summary: ``sessionPersonaSummary[<user speaker>]`` (also ``sessionSummary``/``summary``; a list of
    sentences, a string, or a dict keyed by speaker); none when absent or empty;
  - the user is ``speaker1`` (``user_speaker=``), the other speaker is the assistant; summary sentences
    in the first person ("나는 ...", "저는 ...") are rewritten to "사용자는 ..." as the prompts expect;
  - no memory.
CareCall-memory JSON (naver-ai/carecall-memory: a list of episodes, each a list of sessions; also
``{"episodes": [...]}``, and an episode as ``{"id", "sessions", "probe"}``):
  - session ``guid`` (its id), ``dialogue`` as ``[{role, text}]`` where role ``user`` is the user and
    ``system`` is the bot (``assistant``/``bot`` too; other roles are refused), ``summary`` (sentences);
  - ``memory``: the memory given *before* the session (CareCallmem's; the first session's is empty). The
    memory after session t is therefore session t+1's ``memory``; the last session has none after it,
    unless a probe session follows;
  - optional KEEM extensions: ``date`` (ISO), ``updated`` (true when the session changed the memory) and
    ``"probe": true`` on the reference turns of a probe session. The probe session is the episode's ``probe``
    object, or its last session when that has marked turns; it is not an update step;
  - episode id: ``id``, else the first guid without its session suffix ("interactive-35-S1" -> "interactive-35").
MSC (ParlAI ``msc`` JSONL, one episode per line, the line's ``dialog`` being its last session):
  - ``previous_dialogs[k].dialog[].text`` then ``dialog[].text`` (turns alternate, Speaker 1 = user);
  - summaries: ``previous_dialogs[k].personas[0]`` and the line's ``personas[0]`` (Speaker 1's sentences);
  - episode id: ``metadata.initial_data_id``, else ``line-<n>``; no dates (MSC has relative times only); no memory.
LoCoMo JSON (snap-research/locomo, a list of samples):
  - ``sample_id``; ``conversation.speaker_a`` (the user) and ``speaker_b``; ``conversation.session_<N>`` as
    ``[{speaker, text, dia_id}]`` with ``session_<N>_date_time`` (e.g. "1:56 pm on 8 May, 2023");
  - observations: ``observation.session_<N>_observation`` (or ``session_<N>_observation`` on the sample itself)
    as ``{speaker: [[text, dia_id], ...]}`` (an entry may be ``{"text", "dia_id"}``; dia_id a string such as
    "D1:3; D1:5", or a list): every speaker's, per session; speaker_a's are the session summary, else
    ``session_summary.session_<N>_summary`` split into sentences, else none;
  - ``qa`` as ``[{question, answer, evidence: [dia_id], category}]``: the episode's questions (entries without
    a question or an integer category are skipped); no memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from evaluation.files import read_json, read_text
from models.errors import InputError

FORMATS = ("kmsc", "carecall", "msc", "locomo")
TurnRole = Literal["user", "assistant"]


@dataclass
class Turn:
    role: TurnRole
    text: str
    time: str | None = None
    probe: bool = False  # a reference response of a probe session


@dataclass(frozen=True)
class Observation:
    """A memory sentence a corpus gives with the dialogue turns it rests on (LoCoMo)."""

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
class Session:
    id: str
    turns: list[Turn]
    summary: list[str] | None = None
    date: str | None = None
    memory_before: list[str] | None = None  # the memory the corpus gives before the session; None: not given
    memory_after: list[str] | None = None  # ... and after it
    updated: bool | None = None  # the corpus says whether the session changed the memory
    observations: list[Observation] = field(default_factory=list)

    def dialogue(self) -> list[dict[str, Any]]:
        """Turns as the updaters' ``[{"role", "text"}]`` dicts (``"probe": True`` on reference turns)."""
        return [{"role": t.role, "text": t.text, **({"probe": True} if t.probe else {})} for t in self.turns]


@dataclass
class Episode:
    id: str
    source: str
    sessions: list[Session] = field(default_factory=list)
    probe: Session | None = None
    questions: list[Question] = field(default_factory=list)


# -- small helpers ---------------------------------------------------------------------------------
def _get(record: Any, *names: str) -> Any:
    """The first present key among `names`, matched case-insensitively."""
    lowered = {k.lower(): v for k, v in record.items()} if isinstance(record, dict) else {}
    for name in names:
        if name.lower() in lowered and lowered[name.lower()] not in (None, ""):
            return lowered[name.lower()]
    return None


_SENTENCE_END = re.compile(r"(?<=[.!?。])\s+")


def _sentences(value: Any) -> list[str] | None:
    """A summary as a list of sentences (list kept, string split); None when empty."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [s for line in value.splitlines() for s in _SENTENCE_END.split(line)]
    elif isinstance(value, list):
        items = [v[0] if isinstance(v, list) and v else v for v in value]
    else:
        return None
    out = [str(s).strip() for s in items if isinstance(s, str) and s.strip()]
    return out or None


_DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y%m%d",
    "%Y.%m.%d",
    "%Y/%m/%d",
    "%I:%M %p on %d %B, %Y",
    "%I:%M %p on %d %b, %Y",
    "%d %B %Y",
    "%d %B, %Y",
    "%B %d, %Y",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%M:%S",
)


def normalize_date(value: Any) -> str | None:
    """An ISO date (YYYY-MM-DD) when the text parses as one of the corpora's formats, else the text itself."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    return text


def _role(value: Any, user: str) -> TurnRole:
    return "user" if str(value).strip().lower() in {user.lower(), "user", "사용자", "human"} else "assistant"


def _fail(path: Path, where: str, problem: str, fix: str) -> InputError:
    return InputError(f"{path}: {where}: {problem}; {fix}")


def _load_json(path: Path) -> Any:
    return read_json(path, if_invalid="fix the file, or pass --format msc for JSONL")


_FIRST_PERSON = re.compile(r"^(?:나는|저는)\s+")


# -- KMSC ------------------------------------------------------------------------------------------
def _kmsc_episode(record: Any, path: Path, where: str, default_id: str, user: str) -> Episode:
    if not isinstance(record, dict):
        raise _fail(path, where, "not a JSON object", "each KMSC episode is an object with 'sessionInfo'")
    sessions_raw = _get(record, "sessionInfo", "sessions", "session")
    if not isinstance(sessions_raw, list) or not sessions_raw:
        raise _fail(
            path,
            where,
            "no 'sessionInfo' list",
            "is this an AI Hub multi-session label file? otherwise pass the right --format",
        )
    info = _get(record, "FileInfo", "fileInfo") or {}
    name = _get(info, "filename", "fileName") if isinstance(info, dict) else None
    episode_id = str(Path(str(name)).stem if name else _get(record, "multisessionID", "id") or default_id)
    sessions = []
    for n, raw in enumerate(sessions_raw, 1):
        turns_raw = _get(raw, "dialog", "dialogue", "utterances") if isinstance(raw, dict) else None
        if not isinstance(turns_raw, list):
            raise _fail(path, f"{where}, session {n}", "no 'dialog' list", "each session needs its turns in 'dialog'")
        turns, date = [], None
        for k, t in enumerate(turns_raw, 1):
            text = _get(t, "utterance", "text", "content") if isinstance(t, dict) else None
            if not isinstance(text, str):
                raise _fail(
                    path,
                    f"{where}, session {n}, turn {k}",
                    "no 'utterance' text",
                    "each turn needs 'speaker' and 'utterance'",
                )
            date = date or normalize_date(_get(t, "date"))
            turns.append(
                Turn(
                    _role(_get(t, "speaker", "role"), user),
                    text.strip(),
                    str(_get(t, "time")) if _get(t, "time") else None,
                )
            )
        summary_raw = _get(raw, "sessionPersonaSummary", "sessionSummary", "summary")
        if isinstance(summary_raw, dict):
            summary_raw = _get(summary_raw, user)
        summary = _sentences(summary_raw)
        summary = [_FIRST_PERSON.sub("사용자는 ", t) for t in summary] if summary else None
        sessions.append(
            Session(
                str(_get(raw, "sessionID", "id") or f"{episode_id}-{n}"),
                turns,
                summary,
                date or normalize_date(_get(raw, "date")),
            )
        )
    return Episode(episode_id, "kmsc", sessions)


def read_kmsc(path: Path, user_speaker: str = "speaker1") -> list[Episode]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"{path} holds no *.json files; point INPUT at the KMSC label folder or one file")
    episodes = []
    for file in files:
        data = _load_json(file)
        if isinstance(data, dict) and isinstance(_get(data, "data"), list):
            data = _get(data, "data")
        records = data if isinstance(data, list) else [data]
        for i, record in enumerate(records):
            where = f"episode {i}" if isinstance(data, list) else "episode"
            episodes.append(
                _kmsc_episode(record, file, where, f"{file.stem}-{i}" if len(records) > 1 else file.stem, user_speaker)
            )
    return episodes


# -- CareCall --------------------------------------------------------------------------------------
CARECALL_USER = {"user", "사용자", "human", "usr"}
CARECALL_BOT = {"system", "assistant", "bot", "챗봇", "ai", "agent", "chatbot"}  # CareCall's bot is "system"
_GUID_SESSION = re.compile(r"[-_]S?\d+$", re.IGNORECASE)


def _carecall_memory(value: Any, path: Path, where: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.splitlines()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise _fail(path, where, "'memory' is not a list of sentences", 'give it as ["sentence", ...]')
    return [s.strip() for s in value if s.strip()]


def _carecall_session(s: Any, path: Path, where: str, default_id: str) -> Session:
    dialogue = _get(s, "dialogue", "dialog") if isinstance(s, dict) else None
    if not isinstance(dialogue, list):
        raise _fail(
            path, where, "no 'dialogue' list", "each session needs 'guid' and 'dialogue': [{\"role\", \"text\"}]"
        )
    turns = []
    for k, t in enumerate(dialogue, 1):
        text = _get(t, "text", "utterance", "content") if isinstance(t, dict) else None
        if not isinstance(text, str):
            raise _fail(path, f"{where}, turn {k}", "no 'text'", 'each turn is {"role", "text"}')
        role = str(_get(t, "role", "speaker") or "").strip().lower()
        if role not in CARECALL_USER | CARECALL_BOT:
            raise _fail(
                path, f"{where}, turn {k}", f"unknown role '{role}'", "CareCall roles are 'user' and 'system' (the bot)"
            )
        turns.append(Turn("user" if role in CARECALL_USER else "assistant", text.strip(), probe=bool(_get(t, "probe"))))
    updated = _get(s, "updated")
    return Session(
        str(_get(s, "guid", "id") or default_id),
        turns,
        _sentences(_get(s, "summary")),
        normalize_date(_get(s, "date", "session_date")),
        memory_before=_carecall_memory(_get(s, "memory"), path, where),
        updated=None if updated is None else bool(updated),
    )


def _is_probe(raw: Any) -> bool:
    turns = _get(raw, "dialogue", "dialog") if isinstance(raw, dict) else None
    return bool(_get(raw, "probe")) or (
        isinstance(turns, list) and any(isinstance(t, dict) and _get(t, "probe") for t in turns)
    )


def _carecall_episode_id(sessions: list[Session], index: int) -> str:
    stems = {_GUID_SESSION.sub("", s.id) for s in sessions}
    first = sessions[0].id
    if len(stems) == 1 and _GUID_SESSION.search(first):
        return stems.pop()
    return first if len(sessions) == 1 else f"episode-{index}"


def read_carecall(path: Path) -> list[Episode]:
    data = _load_json(path)
    data = _get(data, "episodes") if isinstance(data, dict) else data
    if not isinstance(data, list):
        raise _fail(path, "top level", "not a list", "CareCall-memory JSON is a list of episodes")
    episodes = []
    for i, raw in enumerate(data):
        where = f"episode {i}"
        sessions_raw = raw if isinstance(raw, list) else _get(raw, "sessions") if isinstance(raw, dict) else None
        if not isinstance(sessions_raw, list) or not sessions_raw:
            raise _fail(
                path,
                where,
                "neither a list of sessions nor an object with 'sessions'",
                'write each episode as [session, ...] or {"id": ..., "sessions": [...]}',
            )
        probe_raw = _get(raw, "probe") if isinstance(raw, dict) else None
        if probe_raw is None and len(sessions_raw) > 1 and _is_probe(sessions_raw[-1]):
            sessions_raw, probe_raw = sessions_raw[:-1], sessions_raw[-1]
        sessions = [
            _carecall_session(s, path, f"{where}, session {n}", f"{i}-{n}") for n, s in enumerate(sessions_raw, 1)
        ]
        probe = _carecall_session(probe_raw, path, f"{where}, probe", f"{i}-probe") if probe_raw else None
        for session, following in zip(sessions, [*sessions[1:], probe]):
            session.memory_after = following.memory_before if following else None
        default = _carecall_episode_id(sessions, i)
        episode_id = str(_get(raw, "id", "episode_id") or default) if isinstance(raw, dict) else default
        episodes.append(Episode(episode_id, "carecall", sessions, probe))
    return episodes


# -- MSC -------------------------------------------------------------------------------------------
def _msc_session(raw: Any, path: Path, where: str, session_id: str) -> Session:
    dialog = _get(raw, "dialog") if isinstance(raw, dict) else None
    if not isinstance(dialog, list):
        raise _fail(path, where, "no 'dialog' list", 'each MSC session is {"dialog": [{"text"}], "personas"}')
    turns = []
    for k, t in enumerate(dialog):
        text = _get(t, "text") if isinstance(t, dict) else None
        if not isinstance(text, str):
            raise _fail(path, f"{where}, turn {k + 1}", "no 'text'", 'each MSC turn is {"id", "text"}')
        speaker = _get(t, "id", "speaker")
        named = isinstance(speaker, str) and speaker.lower().startswith("speaker")
        role: TurnRole = _role(speaker, "speaker 1") if named else "user" if k % 2 == 0 else "assistant"
        turns.append(Turn(role, text.strip()))
    personas = _get(raw, "personas")
    summary = (
        _sentences(personas[0]) if isinstance(personas, list) and personas and isinstance(personas[0], list) else None
    )
    return Session(session_id, turns, summary, None)


def read_msc(path: Path) -> list[Episode]:
    episodes = []
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(
                path, f"line {number}", f"not JSON ({exc.msg})", "MSC input is ParlAI msc JSONL, one object per line"
            ) from None
        if not isinstance(record, dict):
            raise _fail(path, f"line {number}", "not a JSON object", "each line is one MSC conversation object")
        meta = _get(record, "metadata") or {}
        episode_id = str((_get(meta, "initial_data_id") if isinstance(meta, dict) else None) or f"line-{number}")
        previous = _get(record, "previous_dialogs") or []
        if not isinstance(previous, list):
            raise _fail(path, f"line {number}", "'previous_dialogs' is not a list", "give it as a list of sessions")
        sessions = [
            _msc_session(p, path, f"line {number}, previous_dialogs[{k}]", f"{episode_id}-{k + 1}")
            for k, p in enumerate(previous)
        ]
        sessions.append(_msc_session(record, path, f"line {number}", f"{episode_id}-{len(previous) + 1}"))
        episodes.append(Episode(episode_id, "msc", sessions))
    return episodes


# -- LoCoMo ----------------------------------------------------------------------------------------
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def dia_ids(value: Any) -> frozenset[str]:
    """Every dialogue id in a string, list (nested) or None, normalised to 'D<session>:<turn>'."""
    if value is None:
        return frozenset()
    if isinstance(value, (list, tuple, set, frozenset)):
        return frozenset().union(*(dia_ids(v) for v in value)) if value else frozenset()
    return frozenset(f"D{int(s)}:{int(t)}" for s, t in _DIA_ID.findall(str(value)))


def _observations(block: Any, session: int) -> list[Observation]:
    """{speaker: [[text, dia_id], ...] or [{"text", "dia_id"}, ...]} -> observations; other entries are skipped."""
    out = []
    for speaker, items in block.items() if isinstance(block, dict) else ():
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                text, ids = item.get("text") or item.get("observation"), item.get("dia_id", item.get("evidence"))
            elif isinstance(item, (list, tuple)) and item:
                text, ids = item[0], (item[1] if len(item) == 2 else list(item[1:]))
            else:
                continue
            if isinstance(text, str) and text.strip():
                out.append(Observation(text.strip(), dia_ids(ids), str(speaker), session))
    return out


def _questions(qa: Any) -> list[Question]:
    out = []
    for q in qa if isinstance(qa, list) else []:
        if not isinstance(q, dict) or not str(q.get("question") or "").strip():
            continue
        try:
            category = int(q["category"])
        except (KeyError, TypeError, ValueError):
            continue
        answer = q.get("answer", q.get("adversarial_answer", ""))
        out.append(
            Question(
                str(q["question"]).strip(), category, dia_ids(q.get("evidence")), "" if answer is None else str(answer)
            )
        )
    return out


def read_locomo(path: Path) -> list[Episode]:
    data = _load_json(path)
    data = [data] if isinstance(data, dict) else data
    if not isinstance(data, list):
        raise _fail(path, "top level", "not a list", "LoCoMo JSON is a list of samples with 'conversation'")
    episodes = []
    for i, sample in enumerate(data):
        conv = _get(sample, "conversation") if isinstance(sample, dict) else None
        if not isinstance(conv, dict):
            raise _fail(path, f"sample {i}", "no 'conversation' object", "each LoCoMo sample has 'conversation'")
        user = _get(conv, "speaker_a")
        numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        if not numbers:
            raise _fail(path, f"sample {i}", "no session_<N> lists", "conversation needs session_1, session_2, ...")
        episode_id = str(_get(sample, "sample_id", "id") or f"sample-{i}")
        observation = _get(sample, "observation")
        observation = observation if isinstance(observation, dict) else sample
        summaries = _get(sample, "session_summary") or {}
        sessions = []
        for n in numbers:
            turns_raw = conv[f"session_{n}"]
            if not isinstance(turns_raw, list):
                raise _fail(path, f"sample {i}, session_{n}", "not a list", "session_<N> is a list of turns")
            user = user or (turns_raw[0].get("speaker") if turns_raw and isinstance(turns_raw[0], dict) else None)
            turns = []
            for k, t in enumerate(turns_raw, 1):
                if not isinstance(t, dict) or not isinstance(t.get("text"), str):
                    raise _fail(path, f"sample {i}, session_{n}, turn {k}", "no 'text'", "each turn is {speaker, text}")
                turns.append(Turn(_role(t.get("speaker"), str(user)), t["text"].strip()))
            observed = _observations(observation.get(f"session_{n}_observation"), n)
            summary = [o.text for o in observed if o.speaker == str(user)] or None
            if summary is None and isinstance(summaries, dict):
                summary = _sentences(summaries.get(f"session_{n}_summary"))
            sessions.append(
                Session(
                    f"{episode_id}-s{n}",
                    turns,
                    summary,
                    normalize_date(conv.get(f"session_{n}_date_time")),
                    observations=observed,
                )
            )
        episodes.append(Episode(episode_id, "locomo", sessions, questions=_questions(_get(sample, "qa"))))
    return episodes


# -- detection -------------------------------------------------------------------------------------
def detect_format(path: Path) -> str:
    """Guess the corpus format from the file's shape; raises InputError saying how to choose it by hand."""
    if not path.exists():
        raise InputError(f"no such file or folder: {path}")
    if path.is_dir():
        return "kmsc"
    head = read_text(path)[:200_000].lstrip()
    first_line = head.splitlines()[0] if head else ""
    if path.suffix == ".jsonl" or (first_line.startswith("{") and len(head.splitlines()) > 1 and _parses(first_line)):
        return "msc"
    data = _load_json(path)
    if isinstance(data, dict) and isinstance(_get(data, "episodes"), list):
        data = _get(data, "episodes")
    sample = data[0] if isinstance(data, list) and data else data
    if isinstance(data, dict) and isinstance(_get(data, "data"), list) and _get(data, "data"):
        sample = _get(data, "data")[0]
    if isinstance(sample, dict):
        keys = {k.lower() for k in sample}
        if keys & {"sessioninfo"}:
            return "kmsc"
        if "conversation" in keys:
            return "locomo"
        if "sessions" in keys:
            return "carecall"
        if "dialog" in keys:
            return "msc"
    if isinstance(sample, list) and sample and isinstance(sample[0], dict) and "dialogue" in sample[0]:
        return "carecall"
    raise InputError(f"cannot tell the format of {path}; pass --format one of {', '.join(FORMATS)}")


def _parses(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


READERS: dict[str, Callable[[Path], list[Episode]]] = {
    "kmsc": read_kmsc,
    "carecall": read_carecall,
    "msc": read_msc,
    "locomo": read_locomo,
}


def read_episodes(path: str | Path, fmt: str | None = None, *, user_speaker: str = "speaker1") -> list[Episode]:
    """Read every episode of a corpus; `fmt` None or 'auto' detects it; `user_speaker` is for KMSC only."""
    path = Path(path)
    fmt = detect_format(path) if fmt in (None, "auto") else fmt
    if fmt not in READERS:
        raise InputError(f"unknown format '{fmt}'; use one of: auto, {', '.join(FORMATS)}")
    episodes = read_kmsc(path, user_speaker) if fmt == "kmsc" else READERS[fmt](path)
    if not episodes:
        raise InputError(f"{path} holds no episodes; check that it is a {fmt} file")
    seen: set[str] = set()
    for ep in episodes:
        if ep.id in seen:
            raise InputError(f"{path}: episode id '{ep.id}' appears twice; ids must be unique (they key the output)")
        seen.add(ep.id)
    return episodes
