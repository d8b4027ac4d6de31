"""`keem eval memory`: build each strategy's memories over a multi-session dataset, then measure them.

Data: any corpus `evaluation/corpora/episodes.py` reads (CareCall-memory JSON above all; KMSC, MSC, LoCoMo too), as the
same Episode model the dataset builder uses. Session dates the corpus lacks (or gives in no ISO form) are
counted a week apart from 2024-01-01. The probe (fifth) session's turns marked `"probe": true` are the
references for perplexity and voting.

Strategy `data` is the memory the dataset itself gives after each session (for CareCall: the CareCallmem memory
of the next session, since CareCall's `memory` is the memory before a session); every other name goes to
memory.updaters.make_updater. Where the dataset gives no memory after a session (CareCall: the last session,
unless a probe session follows), `data` has no memory for that step (status NOT_GIVEN), and that sample is left
out of the keyword-recall and conflict measurements of every strategy, so all are measured on the same samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from itertools import combinations
from pathlib import Path
from typing import Any

from tqdm import tqdm

from evaluation.corpora.episodes import Episode, read_episodes
from evaluation.metrics import conflict, keywords, perplexity, voting
from memory.text import format_dialogue, lenient_date
from memory.updaters import make_updater
from memory.updaters.base import UpdateInput, memory_of
from models.base import ChatModel
from models.errors import InputError, KeemError

DATA_STRATEGY = "data"
NOT_GIVEN = "no memory after last session"
NOT_GIVEN_MID = "no memory given"
FIRST_DATE = date(2024, 1, 1)


# -- loading --------------------------------------------------------------------------------------
def load_eval_data(path: Path, fmt: str | None = None) -> list[Episode]:
    """The episodes of a corpus (see evaluation/corpora/episodes.py), each with at least one session of dialogue."""
    episodes = read_episodes(path, fmt)
    for ep in episodes:
        if not ep.sessions or not any(s.turns for s in ep.sessions):
            raise InputError(
                f"{path}: episode {ep.id} has no dialogue turns; every episode needs a session with a dialogue"
            )
    return episodes


def session_dates(ep: Episode) -> list[date]:
    """A date per session, then the probe session's: the corpus's ISO date, else a week after the one before."""
    out: list[date] = []
    for s in [*ep.sessions, *([ep.probe] if ep.probe else [])]:
        out.append(lenient_date(s.date) or (out[-1] + timedelta(days=7) if out else FIRST_DATE))
    return out


# -- building memories ---------------------------------------------------------------------------
@dataclass
class Step:
    """A strategy's memory after session `session` (1-based) of an episode; None where the data gives none."""

    episode: str
    session: int
    previous: list[str]
    memory: list[str] | None
    status: str
    changed: bool  # the update rewrote or dropped a previous sentence
    prompt_hash: str | None = None

    def as_json(self) -> dict:
        return self.__dict__.copy()


Memories = dict[str, dict[str, list[Step]]]  # {strategy: {episode id: [Step per session]}}


def _changed(previous: Sequence[str], memory: Sequence[str] | None) -> bool:
    return memory is not None and any(p not in memory for p in previous)


def _data_steps(ep: Episode) -> list[Step]:
    """The memory the dataset gives after each session, each step's previous memory the one given before it."""
    steps: list[Step] = []
    previous: list[str] = []
    for t, session in enumerate(ep.sessions, 1):
        if session.memory_before is not None:
            previous = session.memory_before
        memory = session.memory_after
        status = "data" if memory is not None else NOT_GIVEN if t == len(ep.sessions) else NOT_GIVEN_MID
        changed = session.updated if session.updated is not None else _changed(previous, memory)
        steps.append(Step(ep.id, t, previous, memory, status, bool(changed)))
        previous = memory if memory is not None else previous
    return steps


def check_data(episodes: Sequence[Episode]) -> None:
    """Refuse strategy `data` on a corpus that gives no memory after any session."""
    if not any(s.memory_after is not None for e in episodes for s in e.sessions):
        source = episodes[0].source if episodes else "the"
        raise InputError(
            f"strategy 'data' needs the memory the dataset gives, and this {source} data gives none "
            "(only CareCall-memory JSON has a per-session 'memory'); drop 'data' from --strategies"
        )


def _updated_steps(ep: Episode, strategy: str, updater: Any, bar: Any) -> list[Step]:
    steps: list[Step] = []
    previous: list[str] = []
    dates = session_dates(ep)
    for t, session in enumerate(ep.sessions, 1):
        bar.set_postfix_str(f"{strategy} {ep.id} s{t}")
        inp = UpdateInput(
            previous=memory_of(previous),
            dialogue=[{"role": turn.role, "text": turn.text} for turn in session.turns],
            session_date=dates[t - 1],
            previous_date=dates[t - 2] if t > 1 else None,
        )
        try:
            result = updater.update(inp, lambda stage: None)
        except KeemError as exc:
            raise KeemError(f"{strategy} update of episode {ep.id} session {t} failed: {exc}") from exc
        memory = [s.text for s in result.sentences]
        steps.append(Step(ep.id, t, previous, memory, result.status, _changed(previous, memory), result.prompt_hash))
        previous = memory
        bar.update(1)
    return steps


def build_memories(
    episodes: Sequence[Episode],
    strategies: Sequence[str],
    update_model: ChatModel | None,
    embedder=None,
    show_progress: bool = True,
) -> Memories:
    """{strategy: {episode id: [Step per session]}}; an update that raises stops the run with its reason."""
    if DATA_STRATEGY in strategies:
        check_data(episodes)
    out: Memories = {s: {} for s in strategies}
    total = sum(len(e.sessions) for e in episodes) * sum(s != DATA_STRATEGY for s in strategies)
    bar = tqdm(total=total, desc="memory updates", unit="session", disable=not show_progress)
    for strategy in strategies:
        if strategy == DATA_STRATEGY:
            out[strategy] = {ep.id: _data_steps(ep) for ep in episodes}
            continue
        if update_model is None:
            raise InputError(f"strategy '{strategy}' needs --update-model")
        updater = make_updater(strategy, update_model, embedder)
        out[strategy] = {ep.id: _updated_steps(ep, strategy, updater, bar) for ep in episodes}
    bar.close()
    return out


# -- measuring ------------------------------------------------------------------------------------
def measured_samples(episodes: Sequence[Episode], memories: Memories) -> list[tuple[Episode, int]]:
    """(episode, t) for sessions t >= 2 where every strategy has a memory: the samples every metric uses."""
    return [
        (e, t)
        for e in episodes
        for t in range(2, len(e.sessions) + 1)
        if all(eps[e.id][t - 1].memory is not None for eps in memories.values())
    ]


def left_out(episodes: Sequence[Episode], memories: Memories) -> dict[str, Any]:
    """The samples (t >= 2) left out because the data gives no memory after them, with the reason."""
    count = sum(max(0, len(e.sessions) - 1) for e in episodes) - len(measured_samples(episodes, memories))
    if not count:
        return {"samples": 0}
    return {
        "samples": count,
        "reason": f"strategy '{DATA_STRATEGY}': the dataset gives no memory after these "
        "sessions (CareCall's 'memory' is the memory before a session, so the last one has none)",
    }


def updated_samples(memories: Memories, episodes: Sequence[Episode]) -> set[tuple[str, int]]:
    """(episode, session) steps where an update occurred: flagged in the data, else changed by any strategy."""
    flagged = {(e.id, t) for e in episodes for t, s in enumerate(e.sessions, 1) if s.updated}
    measured = {(e.id, t) for e, t in measured_samples(episodes, memories)}
    if any(s.updated is not None for e in episodes for s in e.sessions):
        return flagged & measured
    return {
        (step.episode, step.session)
        for eps in memories.values()
        for steps in eps.values()
        for step in steps
        if step.changed
    } & measured


def measure_keywords(
    episodes: Sequence[Episode], memories: Memories, sizes: Sequence[int] = keywords.KEYWORD_SETS
) -> dict:
    """Recall of each sample's keywords (dialogues of sessions 1..t) in the memory after session t, t >= 2."""
    keys = measured_samples(episodes, memories)
    docs = [keywords.dialogue_doc([s.dialogue() for s in e.sessions[:t]]) for e, t in keys]
    idf_docs = [keywords.dialogue_doc([s.dialogue() for s in e.sessions]) for e in episodes]
    out = {}
    for strategy, eps in memories.items():
        mems = [eps[e.id][t - 1].memory or [] for e, t in keys]
        per = keywords.keyword_recall(docs, mems, sizes, idf_docs=idf_docs)
        out[strategy] = {
            "mean": {str(k): sum(p[k] for p in per) / len(per) if per else None for k in sizes},
            "samples": [
                {"episode": e.id, "session": t, **{str(k): p[k] for k in sizes}} for (e, t), p in zip(keys, per)
            ],
        }
    return out


def measure_conflicts(
    memories: Memories,
    judge: conflict.NLIJudge | conflict.ClassifierNLIJudge,
    updated: set[tuple[str, int]],
    show_progress: bool = True,
    max_pairs: int | None = conflict.MAX_PAIRS,
    samples: set[tuple[str, int]] | None = None,
) -> dict:
    """Conflict ratios over the memories after sessions t >= 2 (only the (episode, t) in `samples` when given)."""
    chosen = [
        (s, st, st.memory)
        for s, eps in memories.items()
        for steps in eps.values()
        for st in steps
        if st.session >= 2 and st.memory is not None and (samples is None or (st.episode, st.session) in samples)
    ]
    pairs = sum(len(conflict.judged_pairs(memory, max_pairs)) for _, _, memory in chosen)
    bar = tqdm(total=pairs, desc="NLI pairs", unit="pair", disable=not show_progress)

    def judged(a: str, b: str) -> str:
        bar.update(1)
        return judge.label(a, b)

    per: dict[str, dict[str, conflict.ConflictCounts]] = {
        s: {"all": conflict.ConflictCounts(), "updated": conflict.ConflictCounts()} for s in memories
    }
    rows = []
    for strategy, st, memory in chosen:
        counts = conflict.conflicts(memory, judged, max_pairs)
        per[strategy]["all"].add(counts)
        if (st.episode, st.session) in updated:
            per[strategy]["updated"].add(counts)
        rows.append(
            {
                "strategy": strategy,
                "episode": st.episode,
                "session": st.session,
                **counts.as_json(),
                "contradicting_pairs": counts.contradicting_pairs,
            }
        )
    bar.close()
    return {
        "strategies": {s: {k: c.as_json() for k, c in v.items()} for s, v in per.items()},
        "updated_samples": len(updated),
        "samples": rows,
        "judge_calls": len(judge.cache),
        "max_pairs": max_pairs,
    }


def probe_episodes(episodes: Sequence[Episode], memories: Memories) -> list[Episode]:
    """Episodes with a probe session and a final memory for every strategy."""
    return [e for e in episodes if e.probe and all(eps[e.id][-1].memory is not None for eps in memories.values())]


def _final(memories: Memories, strategy: str, ep: Episode) -> list[str]:
    return memories[strategy][ep.id][-1].memory or []


def _probe_dates(ep: Episode) -> tuple[date, date]:
    dates = session_dates(ep)
    return dates[-1], dates[-2]


def measure_perplexity(
    episodes: Sequence[Episode], memories: Memories, model: ChatModel, show_progress: bool = True
) -> dict:
    probes = probe_episodes(episodes, memories)
    out: dict[str, Any] = {"model": model.spec, "strategies": {}}
    bar = tqdm(total=len(memories) * len(probes), desc="perplexity", unit="probe", disable=not show_progress)
    for strategy in memories:
        total = perplexity.PerplexityTotal()
        for ep in probes:
            assert ep.probe is not None
            perplexity.score_turns(
                model,
                perplexity.probe_turns(ep.probe.dialogue()),
                _final(memories, strategy, ep),
                *_probe_dates(ep),
                total,
            )
            bar.update(1)
        out["strategies"][strategy] = total.as_json()
    bar.close()
    return out


def measure_votes(
    episodes: Sequence[Episode],
    memories: Memories,
    chat_model: ChatModel,
    judge: voting.VoteJudge,
    show_progress: bool = True,
) -> dict:
    strategies = list(memories)
    probes = [
        (e, turn)
        for e in probe_episodes(episodes, memories)
        if e.probe is not None
        for turn in perplexity.probe_turns(e.probe.dialogue())
    ]
    tallies = {(a, b): voting.PairTally(a, b) for a, b in combinations(strategies, 2)}
    examples = []
    bar = tqdm(
        total=len(probes) * (len(strategies) + 2 * len(tallies)), desc="voting", unit="call", disable=not show_progress
    )
    for ep, turn in probes:
        replies = {}
        for s in strategies:
            replies[s] = perplexity.reply(chat_model, turn, _final(memories, s, ep), *_probe_dates(ep))
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
        share[s] = {
            "wins": wins,
            "decisive": decisive,
            "rate": wins / decisive if decisive else None,
            "ci95": [low, high] if decisive else None,
        }
    return {
        "chat_model": chat_model.spec,
        "judge": judge.model.spec,
        "pairs": [t.as_json() for t in tallies.values()],
        "share": share,
        "examples": examples,
    }


def memories_json(episodes: Sequence[Episode], memories: Memories) -> list[dict]:
    """Every step that has a memory, with its session dialogue: the input of `keem eval human-export`."""
    by_id = {e.id: e for e in episodes}
    return [
        {"strategy": s, **st.as_json(), "dialogue": by_id[st.episode].sessions[st.session - 1].dialogue()}
        for s, eps in memories.items()
        for steps in eps.values()
        for st in steps
        if st.memory is not None
    ]


def status_counts(memories: Memories) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for s, eps in memories.items():
        counts: dict[str, int] = {}
        for steps in eps.values():
            for st in steps:
                counts[st.status] = counts.get(st.status, 0) + 1
        out[s] = counts
    return out
