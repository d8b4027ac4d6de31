"""`keem eval memory`: build each strategy's memories over a multi-session dataset, then measure them.

Data: CareCall-memory style JSON read by a small local loader (the dataset builder's readers live in
evaluation/episodes.py; this loader only needs what evaluation needs). Accepted shape: a list of episodes
(or {"episodes": [...]}); an episode is a list of sessions or {"id", "sessions": [...], "probe": {...}};
a session has `dialogue` ([{role, text}], roles user/assistant; speaker/utterance and bot/사용자 tolerated),
optional `guid`, `summary`, `memory` (sentences), `date` (ISO) and `updated` (bool). The probe (fifth)
session's assistant turns marked `"probe": true` are the references for perplexity and voting.

Strategy `data` is the memory the dataset itself gives per session (for CareCall: the operation-based
CareCallmem memory); every other name goes to memory.updaters.make_updater.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import date, timedelta
from itertools import combinations
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from evaluation import conflict, keywords, perplexity, voting
from memory.store import Sentence
from memory.updaters import make_updater
from memory.text import format_dialogue
from memory.updaters.base import UpdateInput
from models.base import ChatModel
from models.errors import InputError, KeemError

DATA_STRATEGY = "data"
USER_ROLES = {"user", "usr", "human", "사용자", "speaker1", "user1", "u"}
ASSISTANT_ROLES = {"assistant", "bot", "system_bot", "ai", "챗봇", "speaker2", "agent", "chatbot", "a", "s", "system"}
FIRST_DATE = date(2024, 1, 1)

@dataclass
class EvalSession:
    dialogue: list[dict[str, Any]]
    date: date
    guid: str = ""
    summary: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)
    updated: bool | None = None

@dataclass
class EvalEpisode:
    id: str
    sessions: list[EvalSession]
    probe: EvalSession | None = None

# -- loading --------------------------------------------------------------------------------------
def _turn(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, str) and ":" in raw:                  # "사용자: ..." / "bot: ..." lines
        speaker, _, text = raw.partition(":")
        raw = {"role": speaker, "text": text}
    if not isinstance(raw, dict):
        raise InputError(f"{where}: a turn must be an object with role and text (or a 'speaker: text' string)")
    role = str(raw.get("role", raw.get("speaker", ""))).strip().lower()
    text = raw.get("text", raw.get("utterance", raw.get("content")))
    if role in USER_ROLES:
        role = "user"
    elif role in ASSISTANT_ROLES:
        role = "assistant"
    else:
        raise InputError(f"{where}: unknown role '{role}'; use user or assistant")
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: a turn needs a non-empty text")
    return {"role": role, "text": text.strip(), **({"probe": True} if raw.get("probe") else {})}

def _sentences(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [s.strip() for s in value.splitlines() if s.strip()]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s.strip() for s in value if s.strip()]
    raise InputError(f"{where}: expected a list of sentences")

def _session(raw: Any, where: str, default_date: date) -> EvalSession:
    if not isinstance(raw, dict) or not isinstance(raw.get("dialogue"), list) or not raw["dialogue"]:
        raise InputError(f"{where}: a session needs a non-empty 'dialogue' list")
    try:
        day = date.fromisoformat(str(raw["date"])[:10]) if raw.get("date") else default_date
    except ValueError:
        raise InputError(f"{where}: date '{raw['date']}' is not YYYY-MM-DD") from None
    return EvalSession(dialogue=[_turn(t, f"{where} turn {i}") for i, t in enumerate(raw["dialogue"], 1)],
                       date=day, guid=str(raw.get("guid", "")), summary=_sentences(raw.get("summary"), where),
                       memory=_sentences(raw.get("memory"), where),
                       updated=bool(raw["updated"]) if "updated" in raw else None)

def load_eval_data(path: Path) -> list[EvalEpisode]:
    """Episodes from a CareCall-memory style JSON file (see the module docstring); every problem names its place."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not UTF-8 JSON ({exc}); fix the file") from None
    raw_episodes = data.get("episodes") if isinstance(data, dict) else data
    if not isinstance(raw_episodes, list) or not raw_episodes:
        raise InputError(f"{path}: expected a non-empty list of episodes")
    episodes = []
    for n, raw in enumerate(raw_episodes, 1):
        raw_sessions, probe_raw, ep_id = raw, None, None
        if isinstance(raw, dict):
            raw_sessions, probe_raw, ep_id = raw.get("sessions"), raw.get("probe"), raw.get("id")
        if not isinstance(raw_sessions, list) or not raw_sessions:
            raise InputError(f"{path} episode {n}: expected a list of sessions")
        if probe_raw is None and isinstance(raw_sessions[-1], dict) and raw_sessions[-1].get("probe"):
            raw_sessions, probe_raw = raw_sessions[:-1], raw_sessions[-1]
        sessions: list[EvalSession] = []
        for i, s in enumerate(raw_sessions, 1):
            default = sessions[-1].date + timedelta(days=7) if sessions else FIRST_DATE
            sessions.append(_session(s, f"{path} episode {n} session {i}", default))
        probe = _session(probe_raw, f"{path} episode {n} probe", sessions[-1].date + timedelta(days=7)) \
            if probe_raw else None
        ep_id = str(ep_id or (sessions[0].guid.split("_")[0] if sessions[0].guid else f"episode{n}"))
        episodes.append(EvalEpisode(ep_id, sessions, probe))
    return episodes

def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()

# -- building memories ---------------------------------------------------------------------------
@dataclass
class Step:
    """A strategy's memory after session `session` (1-based) of an episode."""

    episode: str
    session: int
    previous: list[str]
    memory: list[str]
    status: str
    changed: bool                 # the update rewrote or dropped a previous sentence
    prompt_hash: str | None = None

    def as_json(self) -> dict:
        return self.__dict__.copy()

def _changed(previous: Sequence[str], memory: Sequence[str]) -> bool:
    return any(p not in memory for p in previous)

def build_memories(episodes: Sequence[EvalEpisode], strategies: Sequence[str], update_model: ChatModel | None,
                   embedder=None, show_progress: bool = True) -> dict[str, dict[str, list[Step]]]:
    """{strategy: {episode id: [Step per session]}}; an update that raises stops the run with its reason."""
    out: dict[str, dict[str, list[Step]]] = {s: {} for s in strategies}
    total = len(strategies) * sum(len(e.sessions) for e in episodes)
    bar = tqdm(total=total, desc="memory updates", unit="session", disable=not show_progress)
    for strategy in strategies:
        updater = None
        if strategy != DATA_STRATEGY:
            if update_model is None:
                raise InputError(f"strategy '{strategy}' needs --update-model")
            updater = make_updater(strategy, update_model, embedder)
        for ep in episodes:
            steps: list[Step] = []
            previous: list[str] = []
            for t, session in enumerate(ep.sessions, 1):
                bar.set_postfix_str(f"{strategy} {ep.id} s{t}")
                if updater is None:
                    if not session.memory:
                        raise InputError(f"strategy 'data' needs a 'memory' list in every session "
                                         f"(episode {ep.id} session {t} has none)")
                    memory, status, phash = session.memory, "data", None
                    changed = session.updated if session.updated is not None else _changed(previous, memory)
                else:
                    inp = UpdateInput(previous=[Sentence(p, "kept") for p in previous], dialogue=[
                        {"role": d["role"], "text": d["text"]} for d in session.dialogue],
                        session_date=session.date, previous_date=ep.sessions[t - 2].date if t > 1 else None)
                    try:
                        result = updater.update(inp, lambda stage: None)
                    except KeemError as exc:
                        raise KeemError(f"{strategy} update of episode {ep.id} session {t} failed: {exc}") from exc
                    memory, status, phash = [s.text for s in result.sentences], result.status, result.prompt_hash
                    changed = _changed(previous, memory)
                steps.append(Step(ep.id, t, previous, memory, status, bool(changed), phash))
                previous = memory
                bar.update(1)
            out[strategy][ep.id] = steps
    bar.close()
    return out

# -- measuring ------------------------------------------------------------------------------------
def updated_samples(memories: dict[str, dict[str, list[Step]]], episodes: Sequence[EvalEpisode]) -> set[tuple[str, int]]:
    """(episode, session) steps where an update occurred: flagged in the data, else changed by any strategy."""
    flagged = {(e.id, t) for e in episodes for t, s in enumerate(e.sessions, 1) if s.updated}
    if any(s.updated is not None for e in episodes for s in e.sessions):
        return flagged
    return {(step.episode, step.session) for eps in memories.values() for steps in eps.values()
            for step in steps if step.session >= 2 and step.changed}

def measure_keywords(episodes: Sequence[EvalEpisode], memories: dict[str, dict[str, list[Step]]],
                     sizes: Sequence[int] = keywords.KEYWORD_SETS) -> dict:
    """Recall of each sample's keywords (dialogues of sessions 1..t) in the memory after session t, t >= 2."""
    keys = [(e, t) for e in episodes for t in range(2, len(e.sessions) + 1)]
    docs = [keywords.dialogue_doc([s.dialogue for s in e.sessions[:t]]) for e, t in keys]
    idf_docs = [keywords.dialogue_doc([s.dialogue for s in e.sessions]) for e in episodes]
    out = {}
    for strategy, eps in memories.items():
        mems = [eps[e.id][t - 1].memory for e, t in keys]
        per = keywords.keyword_recall(docs, mems, sizes, idf_docs=idf_docs)
        out[strategy] = {"mean": {str(k): sum(p[k] for p in per) / len(per) if per else None for k in sizes},
                         "samples": [{"episode": e.id, "session": t, **{str(k): p[k] for k in sizes}}
                                     for (e, t), p in zip(keys, per)]}
    return out

def measure_conflicts(memories: dict[str, dict[str, list[Step]]],
                      judge: conflict.NLIJudge | conflict.ClassifierNLIJudge,
                      updated: set[tuple[str, int]], show_progress: bool = True,
                      max_pairs: int | None = conflict.MAX_PAIRS) -> dict:
    samples = [(s, st) for s, eps in memories.items() for steps in eps.values() for st in steps if st.session >= 2]
    pairs = sum(len(conflict.judged_pairs(st.memory, max_pairs)) for _, st in samples)
    bar = tqdm(total=pairs, desc="NLI pairs", unit="pair", disable=not show_progress)

    def judged(a: str, b: str) -> str:
        bar.update(1)
        return judge.label(a, b)

    per: dict[str, dict[str, conflict.ConflictCounts]] = {s: {"all": conflict.ConflictCounts(),
                                                             "updated": conflict.ConflictCounts()} for s in memories}
    rows = []
    for strategy, st in samples:
        counts = conflict.conflicts(st.memory, judged, max_pairs)
        per[strategy]["all"].add(counts)
        if (st.episode, st.session) in updated:
            per[strategy]["updated"].add(counts)
        rows.append({"strategy": strategy, "episode": st.episode, "session": st.session, **counts.as_json(),
                     "contradicting_pairs": counts.contradicting_pairs})
    bar.close()
    return {"strategies": {s: {k: c.as_json() for k, c in v.items()} for s, v in per.items()},
            "updated_samples": len(updated), "samples": rows, "judge_calls": len(judge.cache), "max_pairs": max_pairs}

def _final(memories: dict[str, dict[str, list[Step]]], strategy: str, ep: EvalEpisode) -> list[str]:
    return memories[strategy][ep.id][-1].memory

def measure_perplexity(episodes: Sequence[EvalEpisode], memories: dict[str, dict[str, list[Step]]],
                       model: ChatModel, show_progress: bool = True) -> dict:
    probes = [e for e in episodes if e.probe]
    out: dict[str, Any] = {"model": model.spec, "strategies": {}}
    bar = tqdm(total=len(memories) * len(probes), desc="perplexity", unit="probe", disable=not show_progress)
    for strategy in memories:
        total = perplexity.PerplexityTotal()
        for ep in probes:
            assert ep.probe is not None
            perplexity.score_turns(model, perplexity.probe_turns(ep.probe.dialogue), _final(memories, strategy, ep),
                                   ep.probe.date, ep.sessions[-1].date, total)
            bar.update(1)
        out["strategies"][strategy] = total.as_json()
    bar.close()
    return out

def measure_votes(episodes: Sequence[EvalEpisode], memories: dict[str, dict[str, list[Step]]],
                  chat_model: ChatModel, judge: voting.VoteJudge, show_progress: bool = True) -> dict:
    strategies = list(memories)
    probes = [(e, turn) for e in episodes if e.probe for turn in perplexity.probe_turns(e.probe.dialogue)]
    tallies = {(a, b): voting.PairTally(a, b) for a, b in combinations(strategies, 2)}
    examples = []
    bar = tqdm(total=len(probes) * (len(strategies) + 2 * len(tallies)), desc="voting", unit="call",
               disable=not show_progress)
    for ep, turn in probes:
        assert ep.probe is not None
        replies = {}
        for s in strategies:
            replies[s] = perplexity.reply(chat_model, turn, _final(memories, s, ep), ep.probe.date,
                                          ep.sessions[-1].date)
            bar.update(1)
        context = format_dialogue([{"role": r, "text": t} for r, t in turn.history])
        outcomes = {}
        for (a, b), tally in tallies.items():
            outcome = voting.compare(judge, context, replies[a], replies[b], turn.reference)
            tally.add(outcome)
            outcomes[f"{a} vs {b}"] = outcome
            bar.update(2)
        examples.append({"episode": ep.id, "reference": turn.reference, "replies": replies, "outcomes": outcomes})
    bar.close()
    share = {}
    for s in strategies:
        wins = sum(t.wins_a if t.a == s else t.wins_b for t in tallies.values() if s in (t.a, t.b))
        decisive = sum(t.wins_a + t.wins_b for t in tallies.values() if s in (t.a, t.b))
        low, high = voting.wilson(wins, decisive)
        share[s] = {"wins": wins, "decisive": decisive, "rate": wins / decisive if decisive else None,
                    "ci95": [low, high] if decisive else None}
    return {"chat_model": chat_model.spec, "judge": judge.model.spec,
            "pairs": [t.as_json() for t in tallies.values()], "share": share, "examples": examples}

def memories_json(episodes: Sequence[EvalEpisode], memories: dict[str, dict[str, list[Step]]]) -> list[dict]:
    """Every step of every strategy with its session dialogue: the input of `keem eval human-export`."""
    by_id = {e.id: e for e in episodes}
    return [{"strategy": s, **st.as_json(), "dialogue": by_id[st.episode].sessions[st.session - 1].dialogue}
            for s, eps in memories.items() for steps in eps.values() for st in steps]

def status_counts(memories: dict[str, dict[str, list[Step]]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for s, eps in memories.items():
        counts: dict[str, int] = {}
        for steps in eps.values():
            for st in steps:
                counts[st.status] = counts.get(st.status, 0) + 1
        out[s] = counts
    return out
