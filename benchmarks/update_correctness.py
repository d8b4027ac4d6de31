"""Korean update correctness: are changes applied, and are unrelated facts kept, by each memory-update strategy?

usage: python benchmarks/update_correctness.py [--strategies keem operations accumulate] [--settings ...]
       [--models ideal sloppy yes] [--verifiers catches silent] [--embedder ngram] [--seed 0] [--json]

The scenarios are evaluation/fixtures/update_correctness.json (written for this benchmark, CC0): ten changes said
in words the old fact does not share, for attributes outside common lists (eyesight -> LASIK, iPhone -> Galaxy,
meat every day -> vegan, long hair -> a short cut, asleep after 3 a.m. -> by eleven, 90 kg -> 15 kg lost, no
Chinese -> HSK 4, 대리 -> 과장, a car sold for the subway, a beard shaved), two finished episodes (a cast taken off,
a trip taken: kept as past), 42 unrelated facts and 5 new ones. Settings:

- small: one update per change, the old fact among 6 unrelated ones (the whole memory is rewritten);
- large: one update per change, the old fact among 44 unrelated ones (past the ceiling: the scoped rewrite);
- sessions: 5 sessions over 12 unrelated facts and every change's old state, 2-3 changes and a new fact each;
- sessions-large: the same over 42 unrelated facts;
- huge: one update per change, the old fact in the second half of 200 unrelated ones (the 42, then 158 generated
  about the user's relatives: "사용자의 이모는 강릉에서 토끼를 기른다.", no two sharing 60% of their content
  words), with a model of 4,096 tokens of context (EEVE-Korean-Instruct-10.8B's): the whole memory numbered does
  not fit one scope call, so it is read in windows (memory/updaters/steps.py SCOPE_WINDOW_TOKENS);
- time: ten plans and events said in relative words ("다음 주 화요일", "이번 주말", "3일 뒤", "다음 달", "작년 여름",
  a birthday "이번 주 토요일", an appointment moved, a deadline met or missed, a move still to come), each among 6
  unrelated facts, over two sessions whose dates the scenario sets (the date has passed by the second, except the
  move's). Scored: the date stored absolute and right after the session that said it (the fixture's hand-written
  sentence: "사용자는 2026년 9월 15일에 자격증 시험을 본다."), a passed plan still stated as to come at the end (its
  stored sentence, or the words said, still in memory), and the final sentence as the fixture writes it.

Models (models/fake.py RealisticChatModel around `Ideal`, which knows the scenarios and answers every stage as an
ideal model would): `ideal` (no habits), `sloppy` (wrappers, a silently dropped line, an outdated line copied
back, a claim left out, the whole claims section left out, each at 0.3-0.5), `yes` (sloppy, and its judge answers
예 to every question). Verifiers:
`catches` fails a memory holding two states of one fact, naming both; `silent` passes everything (a real verifier
misses contradictions too). Every answer is cut at its token budget, as backends cut them.

Reported per strategy and (setting, model, verifier): outdated facts left (an old state still stored word for word,
of the changes made), unrelated facts lost (of those in memory or stated), finished episodes kept, fallback
updates, and the cost: model calls, prompt and completion tokens per update, and the scope calls (keem's large
memories). What it shows: the machinery (which pairs reach the judge, what a sloppy model can make it lose). What
it cannot: whether a real model writes the claims, names the sentences or judges the pairs right; run the same
scenarios with `--model` for that (the scenarios then only score).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.long_horizon import Fact, Oracle, present
from memory.store import Sentence
from memory.updaters import STRATEGIES, UpdateInput, make_updater
from memory.updaters.base import memory_of
from models.base import ChatModel, ChatStream, Completion, GenerationOptions, Message
from models.embedders import Embedder
from models.fake import RealisticChatModel, section, stage_of
from models.spec import load_chat_model, load_embedder

FIXTURE = Path(__file__).resolve().parents[1] / "evaluation" / "fixtures" / "update_correctness.json"
SETTINGS = ("small", "large", "sessions", "sessions-large", "huge", "time")
MODELS = ("ideal", "sloppy", "yes")
VERIFIERS = ("catches", "silent")
WRAPPING = ("think", "preamble", "fences", "bullets", "english", "repeat", "free_verdict")
SLOPPY = {**{h: 0.3 for h in WRAPPING}, "drop": 0.5, "stale": 0.3, "unclaimed": 0.3, "noclaims": 0.3}
CEILING = 512
START = date(2026, 9, 7)
HUGE = 200  # unrelated facts around the old one in the `huge` setting
HUGE_CONTEXT = 4096  # its model's context: the Korean Llama the project targets
FAKE_CONTEXT = 8192  # every other setting's (models/fake.py's default)
# The generated unrelated facts of `huge`: a relative, a city, an object and a verb, no two sharing two of them
RELATIVES = ("사촌은", "이모는", "삼촌은", "조카는", "이웃은")
CITIES = ("제주에서", "강릉에서", "여수에서", "춘천에서", "포항에서")
DOINGS = (
    ("기른다", ("앵무새를", "거북이를", "햄스터를", "토끼를", "고슴도치를")),
    ("연습한다", ("스키를", "테니스를", "골프를", "수영을", "볼링을")),
    ("수집한다", ("병뚜껑을", "피규어를", "엽서를", "동전을", "우산을")),
    ("자주 먹는다", ("냉면을", "짬뽕을", "비빔밥을", "순대를", "만두를")),
    ("운영한다", ("카페를", "빵집을", "꽃집을", "서점을", "세탁소를")),
    ("가르친다", ("수학을", "영어를", "미술을", "체육을", "음악을")),
    ("탄다", ("자전거를", "오토바이를", "버스를", "요트를", "말을")),
    ("고친다", ("시계를", "컴퓨터를", "냉장고를", "자동차를", "구두를")),
)


# -- the scenarios ------------------------------------------------------------------------------------------
@dataclass
class World:
    """The facts of the fixture: each change and episode a chain of two states, the unrelated ones stable."""

    changes: list[list[Fact]]  # [old, new] per change and per episode (episodes last)
    unrelated: list[Fact]
    new_facts: list[Fact]
    generated: list[Fact]  # more unrelated facts, for `huge`
    time: list[dict[str, Any]] = field(default_factory=list)  # the time scenarios, as the fixture has them

    def all_facts(self) -> list[Fact]:  # what Oracle reads
        timed = [f for scenario in self.time for session in time_facts(scenario) for f in session]
        return [f for chain in self.changes for f in chain] + self.unrelated + self.new_facts + timed


@dataclass
class Case:
    setting: str
    name: str
    initial: list[Fact]
    sessions: list[list[Fact]]  # per session: the facts its user states
    days: list[int] | None = None  # each session's day after START (None: one every 9 days)
    time: dict[str, Any] | None = None  # a time scenario: what to score


def load_world(path: Path = FIXTURE) -> World:
    data = json.loads(path.read_text(encoding="utf-8"))
    changes = [
        [
            Fact(c["old"], None, f"(이전) {c['old']}", "", "change", c["id"], 0),
            Fact(c["new"], None, c["turn"], c["reply"], "change", c["id"], 1, key=c["key"], merged=c.get("merged")),
        ]
        for c in data["changes"] + data["episodes"]
    ]
    stable = [Fact(u["fact"], None, u["turn"], "그렇군요.", "stable") for u in data["unrelated"]]
    new = [Fact(u["fact"], None, u["turn"], "좋네요!", "stable") for u in data["new_facts"]]
    more = [Fact(t, None, f"(이전) {t}", "", "stable") for t in relatives(HUGE - len(stable))]
    return World(changes, stable, new, more, data.get("time", []))


def time_facts(scenario: dict[str, Any]) -> list[list[Fact]]:
    """A time scenario's sessions as facts: a replacing second statement is the next state of the first's chain."""
    chain = scenario["id"] if scenario.get("replaces") else None
    return [
        [Fact(t["fact"], None, t["turn"], "그렇군요.", "time", chain if n == 0 or chain else None, n) for t in facts]
        for n, facts in enumerate(scenario["sessions"])
    ]


def relatives(n: int) -> list[str]:
    """`n` (at most 200) unrelated facts about the user's relatives: for each verb, a Latin square of relative and
    city over its objects, so two facts share at most one of relative, city and object."""
    out = []
    for i in range(n):
        (verb, objects), j = DOINGS[i % len(DOINGS)], i // len(DOINGS)
        who, what = j % len(RELATIVES), j // len(RELATIVES)
        out.append(f"사용자의 {RELATIVES[who]} {CITIES[(who + what) % len(CITIES)]} {objects[what]} {verb}")
    return [f"{t}." for t in out]


def cases(world: World, settings: tuple[str, ...] = SETTINGS) -> list[Case]:
    out: list[Case] = []
    chains, pool = world.changes, world.unrelated
    for setting in settings:
        if setting == "time":
            for k, scenario in enumerate(world.time):
                others = [pool[(k * 5 + j) % len(pool)] for j in range(6)]
                out.append(Case(setting, scenario["id"], others, time_facts(scenario), scenario["days"], scenario))
        elif setting == "huge":
            for k, (old, new) in enumerate(chains):
                others, at = pool + world.generated, HUGE - 1 - (k * 9) % (HUGE // 2)
                out.append(Case(setting, str(new.chain), [*others[:at], old, *others[at:]], [[new]]))
        elif setting in ("small", "large"):
            size = 6 if setting == "small" else 44
            for k, (old, new) in enumerate(chains):
                others = [pool[(k * 5 + j) % len(pool)] for j in range(size)]
                at = (k * 7) % (size + 1)
                out.append(Case(setting, str(new.chain), [*others[:at], old, *others[at:]], [[new]]))
        else:
            size = 12 if setting == "sessions" else len(pool)
            olds = [c[0] for c in chains]
            initial = [f for pair in zip(pool[:size], olds) for f in pair] + pool[len(olds) : size]
            initial += olds[size:]
            sessions = [[c[1] for c in chains[s::5]] + [world.new_facts[s]] for s in range(5)]
            out.append(Case(setting, "5 sessions", initial, sessions))
    return out


def dialogue(facts: list[Fact]) -> list[dict[str, str]]:
    turns = [{"role": "assistant", "text": "요즘 어떻게 지내요?"}]
    for f in facts:
        turns += [{"role": "user", "text": f.turn}, {"role": "assistant", "text": f.reply or "그렇군요."}]
    return turns + [{"role": "user", "text": "오늘 얘기 즐거웠어."}, {"role": "assistant", "text": "또 얘기해요!"}]


# -- the ideal model --------------------------------------------------------------------------------------------
class Ideal(Oracle):
    """Every stage answered as a model that knows the scenarios would: the rewrite replaces each old state the
    summary changes and says so ("A => B"), the scope call names the old states, the judge says 예 exactly for a
    later state of the same fact, and the verifier (`catches`) fails two states of one fact stored together."""

    def __init__(self, world: World, catches: bool = True):
        super().__init__(world)  # type: ignore[arg-type]
        self.catches = catches
        for scenario in world.time:  # the time scenarios' sentences as memory holds them: the same facts
            sessions = time_facts(scenario)
            self.by_text.setdefault(scenario["stored"], sessions[0][0])
            self.by_text.setdefault(scenario["final"], sessions[-1][0] if scenario.get("replaces") else sessions[0][0])

    def __call__(self, messages: list[Message]) -> str:
        prompt = messages[-1]["content"]
        stage = stage_of(prompt)
        if stage == "update":
            previous = section(prompt, "\n이전 기억:", "이번 요약:")
            summary = section(prompt, "\n이번 요약:", "새 기억:")
            lines = self._update(previous, summary)
            claims = [f"{line} => {self._later(line, summary)}" for line in previous if line not in lines]
            claims = [c for c in claims if not c.endswith("=> None")]
            if "바뀐 문장:" not in prompt:  # a prompt that asks for no claims (an older update.txt) gets none
                return "\n".join(lines)
            return "\n".join(lines + (["바뀐 문장:", *claims] if claims else ["바뀐 문장: 없음"]))
        if stage == "scope":
            memory = [re.sub(r"^\d+\.\s*", "", line) for line in section(prompt, "\n기억:", "이번 요약:")]
            summary = section(prompt, "\n이번 요약:", "답:")
            named = [str(n) for n, line in enumerate(memory, 1) if self._later(line, summary)]
            return f"번호: {', '.join(named) if named else '없음'}"
        if stage == "verify" and not self.catches:
            return "통과"
        return super().__call__(messages)


class Counted(ChatModel):
    """A chat model with each call's stage, prompt and completion tokens and finish reason recorded."""

    def __init__(self, inner: ChatModel):
        self.inner, self.spec, self.context_window = inner, inner.spec, inner.context_window
        self.calls: list[tuple[str | None, int, int, str]] = []

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        return self.inner.stream(messages, options)

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        answer = self.inner.complete(messages, options)
        prompt = answer.finish.prompt_tokens or sum(self.count_tokens(m["content"]) for m in messages)
        done = answer.finish.completion_tokens or self.count_tokens(answer.text)
        self.calls.append((stage_of(messages[-1]["content"]), prompt, done, answer.finish.reason))
        return answer


def model_for(
    world: World,
    kind: str,
    verifier: str,
    seed: int,
    real: ChatModel | None = None,
    context_window: int = FAKE_CONTEXT,
) -> Counted:
    if real is not None:
        return Counted(real)
    habits = {} if kind == "ideal" else {**SLOPPY, **({"yes": 1.0} if kind == "yes" else {})}
    ideal = Ideal(world, verifier == "catches")
    return Counted(RealisticChatModel(ideal, habits, seed=seed, context_window=context_window))


# -- running and scoring ----------------------------------------------------------------------------------------
def run_case(
    strategy: str, case: Case, model: Counted, embedder: Embedder | None, ceiling: int = CEILING
) -> dict[str, Any]:
    """The case's sessions through one strategy; the final memory scored against the scenario."""
    memory: list[Sentence] = memory_of(f.text for f in case.initial)
    ids = iter(range(len(memory), 10**9))
    fallbacks = updates = 0
    started = time.perf_counter()
    first = len(model.calls)
    days = [START + timedelta(days=d) for d in case.days] if case.days else None
    day, previous_day = START, START - timedelta(days=9)
    after_first: list[str] = []
    for n, facts in enumerate(case.sessions):
        day = days[n] if days else day
        updater = make_updater(strategy, model, embedder, ceiling)
        result = updater.update(UpdateInput(memory, dialogue(facts), day, previous_day), lambda stage: None)
        memory = [replace(s, id=next(ids)) for s in result.sentences]
        fallbacks += result.status == "fallback"
        updates += 1
        after_first = after_first or [s.text for s in memory]
        previous_day, day = day, day + timedelta(days=9)
    texts = [s.text for s in memory]
    changed = [f for session in case.sessions for f in session if f.kind == "change"]
    olds = {f.chain: f for f in case.initial if f.kind == "change"}
    unrelated = [f for f in case.initial if f.kind == "stable"] + [
        f for session in case.sessions for f in session if f.kind == "stable"
    ]
    episodes = [f for f in changed if f.merged]
    calls = model.calls[first:]
    timed = time_scores(case.time, after_first, texts, day) if case.time else {}
    return {
        **timed,
        "setting": case.setting,
        "case": case.name,
        "changes": len(changed),
        "outdated_left": sum(olds[f.chain].text in texts for f in changed),
        "new_missing": sum(not (present(f, texts) or (f.key and any(f.key in t for t in texts))) for f in changed),
        "unrelated": len(unrelated),
        "unrelated_lost": sum(not present(f, texts) for f in unrelated),
        "lost": [f.text for f in unrelated if not present(f, texts)],
        "outdated": [olds[f.chain].text for f in changed if olds[f.chain].text in texts],
        "episodes": len(episodes),
        "episodes_kept": sum(any(str(f.key) in t for t in texts) for f in episodes),
        "updates": updates,
        "fallbacks": fallbacks,
        "llm_calls": len(calls),
        "scope_calls": sum(c[0] == "scope" for c in calls),
        "prompt_tokens": sum(c[1] for c in calls),
        "completion_tokens": sum(c[2] for c in calls),
        "scope_prompt_tokens": sum(c[1] for c in calls if c[0] == "scope"),
        "update_completion_tokens": sum(c[2] for c in calls if c[0] == "update"),
        "cut": sum(c[3] == "length" for c in calls),
        "seconds": time.perf_counter() - started,
    }


def time_scores(scenario: dict[str, Any], after_first: list[str], final: list[str], day: date) -> dict[str, int]:
    """A time scenario's scores: the date stored as the fixture writes it after the first session, a plan that passed
    or was replaced (moved, met, missed) still stated as to come at the end (its stored sentence, or the words said),
    the final sentence as the fixture has it."""
    over = scenario.get("replaces") or (date.fromisoformat(scenario["date"]) < day and not scenario.get("recurring"))
    future = over and scenario["stored"] != scenario["final"] and scenario["stored"] in final
    return {
        "dates": 1,
        "dates_right": int(scenario["stored"] in after_first),
        "still_future": int(future or any(scenario["said"] in t for t in final)),
        "final_right": int(scenario["final"] in final),
    }


TIME_TOTALS = ("dates", "dates_right", "still_future", "final_right")
TOTALS = (
    "changes",
    "outdated_left",
    "new_missing",
    "unrelated",
    "unrelated_lost",
    "episodes",
    "episodes_kept",
    "updates",
    "fallbacks",
    "llm_calls",
    "scope_calls",
    "prompt_tokens",
    "completion_tokens",
    "scope_prompt_tokens",
    "update_completion_tokens",
    "cut",
    "seconds",
)


def run(
    strategies: tuple[str, ...] = STRATEGIES,
    settings: tuple[str, ...] = SETTINGS,
    models: tuple[str, ...] = MODELS,
    verifiers: tuple[str, ...] = VERIFIERS,
    embedder: Embedder | None = None,
    seed: int = 0,
    real: ChatModel | None = None,
) -> list[dict[str, Any]]:
    """One row per (strategy, setting, model, verifier): the totals over its cases."""
    world = load_world()
    rows = []
    for strategy in strategies:
        for setting in settings:
            for kind in models:
                for verifier in verifiers:
                    row: dict[str, Any] = {
                        "strategy": strategy,
                        "setting": setting,
                        "model": kind,
                        "verifier": verifier,
                        **{k: 0 for k in TOTALS},
                        "lost": [],
                        "outdated": [],
                    }
                    for n, case in enumerate(cases(world, (setting,))):
                        context = HUGE_CONTEXT if setting == "huge" else FAKE_CONTEXT
                        model = model_for(world, kind, verifier, seed * 1000 + n, real, context)
                        got = run_case(strategy, case, model, embedder)
                        for k in TOTALS + TIME_TOTALS:
                            row[k] = row.get(k, 0) + got.get(k, 0)
                        row["lost"] += got["lost"]
                        row["outdated"] += got["outdated"]
                    rows.append(row)
    return rows


def time_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of the time setting's rows, every strategy."""
    out = [
        "| strategy | model | verifier | dates stored right | past or replaced plans still to come "
        "| final sentence right | unrelated lost | fallbacks |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        if r["setting"] == "time":
            out.append(
                f"| {r['strategy']} | {r['model']} | {r['verifier']} | {r['dates_right']}/{r['dates']} | "
                f"{r['still_future']}/{r['dates']} | {r['final_right']}/{r['dates']} | "
                f"{r['unrelated_lost']}/{r['unrelated']} | {r['fallbacks']}/{r['updates']} |"
            )
    return "\n".join(out)


def table(rows: list[dict[str, Any]], strategy: str) -> str:
    """A markdown table of one strategy's rows."""
    head = (
        "| setting | model | verifier | outdated left | unrelated lost | episodes kept | fallbacks | "
        "calls / update | prompt tok / update | completion tok / update | scope calls |"
    )
    out = [head, "|" + "---|" * 11]
    for r in rows:
        if r["strategy"] != strategy:
            continue
        u = max(1, r["updates"])
        out.append(
            f"| {r['setting']} | {r['model']} | {r['verifier']} | {r['outdated_left']}/{r['changes']} | "
            f"{r['unrelated_lost']}/{r['unrelated']} | {r['episodes_kept']}/{r['episodes']} | "
            f"{r['fallbacks']}/{r['updates']} | {r['llm_calls'] / u:.1f} | {r['prompt_tokens'] / u:.0f} | "
            f"{r['completion_tokens'] / u:.0f} | {r['scope_calls']} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--verifiers", nargs="+", default=list(VERIFIERS), choices=VERIFIERS)
    parser.add_argument("--embedder", default="ngram", help="ngram (default here) or auto (the app's)")
    parser.add_argument("--model", default=None, help="a real model spec instead of the fake (scores only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    real = load_chat_model(args.model) if args.model else None
    rows = run(
        tuple(args.strategies),
        tuple(args.settings),
        tuple(args.models) if real is None else ("real",),
        tuple(args.verifiers) if real is None else ("real",),
        load_embedder(args.embedder),
        args.seed,
        real,
    )
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    print(
        f"update correctness, embedder {args.embedder}, ceiling {CEILING}, seed {args.seed}; "
        f"{time.perf_counter() - started:.1f} s"
    )
    if "time" in args.settings:
        print(f"\ntime\n{time_table(rows)}")
    for strategy in args.strategies:
        print(f"\n{strategy}\n{table(rows, strategy)}")
        for r in rows:
            if r["strategy"] == strategy and (r["lost"] or r["outdated"]):
                where = f"{r['setting']}/{r['model']}/{r['verifier']}"
                if r["lost"]:
                    print(f"  {where} lost: {'; '.join(r['lost'][:3])}")
                if r["outdated"]:
                    print(f"  {where} outdated: {'; '.join(r['outdated'][:3])}")


if __name__ == "__main__":
    main()
