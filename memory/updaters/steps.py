"""The memory-update steps, one implementation for every caller: the app's strategies and the dataset builder.

summarize -> reflect -> update (whole or scoped) -> guard -> verify. A caller brings its own `Ask` (the app: the
update model; the builder: its cached, concurrent calls) and gets the same prompts, budgets, parsing and rules.

Budgets follow the work: every call's output budget is sized from what it must write (a whole memory rewrite:
the previous memory and the summary, with a margin), capped by `ceiling` (KEEM_UPDATE_MAX_TOKENS) and the
model's context. An answer cut at its budget (finish reason "length") is never used: the call is retried once
with twice the budget (within the context, past the ceiling if need be), and if that is cut too the step
reports no answer, so the caller's never-lose fallback takes over. Why is kept in `problems`.

The guard also keeps this session's news: a reflected summary sentence the rewrite does not continue is appended.

The rewrite says, after its memory, which previous sentence each one it left out was replaced by ("A => B",
memory/updaters/claims.py); the guard's judge confirms those claims pairwise. Relatedness comes from meaning (what
the rewrite claims, what the model names), not from a list of attributes.

Large memories are rewritten in part: when re-writing the whole previous memory would need more than
`ceiling` output tokens, only the sentences the session touches go to the update prompt: those the model names
from the whole memory numbered (the scope call, scope.txt: one more call, its prompt the memory's size up to
SCOPE_WINDOW_TOKENS, past that one call per window of the memory, so no prompt grows with it; its answer one
line), then those of the same attribute or sharing a Korean content word with the user's turns and
the summary, then the embedder's nearest, as many as fit the ceiling; every other sentence is carried over
verbatim, marked `kept`. The output of an update then stays bounded as memory grows, and unrelated facts never
pass through the rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np

from memory.emotions import merge, shown_records
from memory.korean import content_words
from memory.prompts import prompt_hash, render
from memory.store import Note, Sentence, note
from memory.store.emotions import EmotionRecord, follow
from memory.text import (
    UNKNOWN,
    elapsed_text,
    extractive_summary,
    format_dialogue,
    parse_numbers,
    parse_sentences,
    parse_verdict,
    parse_yes_no_list,
)
from memory.updaters.base import UpdateInput, UpdateResult, carry_over
from memory.updaters.claims import Claim, lists_claims, resolve, split_claims
from memory.updaters.guard import GuardDecision, decisions_json, guard, keep_summary
from memory.updaters.relatedness import evidence, named
from memory.updaters.timeline import put_in_time
from models.base import ChatModel, Completion, GenerationOptions, Message, estimate_tokens
from models.embedders import Embedder
from models.errors import ContextOverflowError, GenerationError

Ask = Callable[[str, str, int], Completion]  # (stage, prompt, max_new_tokens) -> the model's answer
Parse = Callable[[str, int], list[str]]
PROMPTS = ("update_system", "summarize", "reflect", "update", "verify", "guard", "guard_both", "scope", "emotions")

SUMMARY_SENTENCES = 10  # the summarize prompt asks for at most this many
MAX_SUMMARY = 15  # parsed summary / reflected sentences kept
MAX_REFLECTED = 30
SENTENCE_TOKENS = 64  # the output budget of one memory sentence written from scratch (about 40-60 chars)
MARGIN = 1.25  # rewrite budgets: what must be re-written, plus a quarter
SLACK_TOKENS = 64  # and room for a line the model adds
# Short answers get room for the reasoning or preamble real models put first: a budget is a limit, not a cost,
# for a model that ends its answer (retried at twice, when cut).
VERIFY_TOKENS = 256  # a verdict line
JUDGE_TOKENS = 64  # room for a preamble before the "N: 예" / "N: 아니오" lines
JUDGE_PAIR_TOKENS = 8  # and one such line per pair
RECORD_TOKENS = 64  # one emotion record line (7 fields, the quote the longest)
NEW_RECORDS = 8  # room for this many new records per session
RECORD_TRIES = 2  # the records call (Steps.emotions): a failed one is tried once more
RETRIEVED_PER_QUERY = 2  # scoped rewrite: nearest previous sentences per user turn and summary sentence
DEFAULT_CEILING = 512  # KEEM_UPDATE_MAX_TOKENS: past this, an update rewrites only what the session touches
CLAIM_TOKENS = 16  # the rewrite's claims ("A => B" after its memory): the marker line, and per claim its arrow
CLAIMS = 2  # claims the update budget has room for
SCOPE_TOKENS = 96  # the scope call's "번호: 3, 17" line, with room for a preamble
# The most prompt tokens (system prompt included) one scope call reads: a longer memory is read in consecutive windows,
# one call each. About half the 4,096-token context of the Korean Llama the project targets (EEVE-10.8B): a window
# then holds ~80 numbered sentences beside a typical summary, while the instructions and the summary repeated per
# window stay under a quarter of what is read. Memories up to ~90 sentences (every benchmark setting but `huge`)
# stay one call, the size the prompt was written and measured at; a call never grows past it as the memory does.
# A summary so long that less than half of this is left for the memory (MAX_REFLECTED sentences can take ~1,200)
# widens the window by what it takes, within the context, so a window never shrinks to a few sentences and a
# memory to as many calls.
SCOPE_WINDOW_TOKENS = 2000


def model_ask(model: ChatModel) -> Ask:
    """An Ask on a chat model: one deterministic call (temperature 0, top-p 1) with the update system prompt."""
    system = render("update_system")

    def ask(stage: str, prompt: str, max_new_tokens: int) -> Completion:
        messages: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        return model.complete(messages, GenerationOptions(max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0))

    return ask


@dataclass
class Attempt:
    """One update attempt: what the model wrote, what the guard made of it, and why verification failed."""

    sentences: list[Sentence]
    generated: list[str]
    decisions: list[GuardDecision]
    problem: str | None
    summary_kept: list[str] = field(default_factory=list)  # summary sentences the rewrite left out, appended

    def json(self) -> dict[str, Any]:
        return {
            "memory": self.generated,
            "guard": decisions_json(self.decisions),
            "summary_kept": self.summary_kept,
            "problem": self.problem,
        }


@dataclass
class Steps:
    """The update steps over one `ask`; records the problems of one update (not shared between threads)."""

    ask: Ask
    count_tokens: Callable[[str], int] = estimate_tokens
    context_window: int = 8192
    ceiling: int = DEFAULT_CEILING
    embedder: Embedder | None = None
    parse: Parse = parse_sentences
    use_guard: bool = True
    problems: list[str] = field(default_factory=list)
    not_asked: str = ""  # why the model is not asked at all (ChatModel.runs_to_budget): every step falls back

    @classmethod
    def for_model(
        cls, model: ChatModel, embedder: Embedder | None = None, ceiling: int = DEFAULT_CEILING, **kwargs: Any
    ) -> Steps:
        kwargs.setdefault("not_asked", model.runs_to_budget)
        return cls(model_ask(model), model.count_tokens, model.context_window, ceiling, embedder, **kwargs)

    @staticmethod
    def prompt_hash() -> str:
        return prompt_hash(*PROMPTS)

    def why(self, text: str) -> str:
        """A report's text with the model problems behind it (cut answers, prompts too long)."""
        return f"{text} ({'; '.join(self.problems[-3:])})" if self.problems else text

    def because(self, code: str, **params: Any) -> Note:
        """A fallback's note (memory/store/notes.py) with the last model problems behind it, every strategy's."""
        return note(code, **params, problems=self.problems[-3:])

    # -- budgets and calls ---------------------------------------------------------------------------
    def rewrite_budget(self, texts: list[str]) -> int:
        """Output tokens to re-write these sentences: their tokens plus a margin and room for one more line."""
        return int(sum(self.count_tokens(t) + 2 for t in texts) * MARGIN) + SLACK_TOKENS

    def update_budget(self, previous: list[str], reflected: list[str]) -> int:
        """Output tokens of the update call: the rewrite of both, and room for CLAIMS claims (a claim quotes a
        previous sentence and the summary sentence that ends it: memory/updaters/claims.py; a session that changes
        more is cut and asked again with twice the budget, the rule of every call)."""
        longest = max((self.count_tokens(t) for t in reflected), default=0)
        claims = CLAIM_TOKENS + min(len(reflected), CLAIMS) * (2 * longest + CLAIM_TOKENS)
        return self.rewrite_budget(previous + reflected) + claims

    def call(self, stage: str, prompt: str, budget: int, complete_before: str | None = None) -> str | None:
        """The model's answer, or None when there is no usable one (cut twice, or a prompt too long: ours or the
        backend's ContextOverflowError, recorded in `problems`). `complete_before`: a line marking where the part of
        the answer that must be whole ends (the update's "바뀐 문장:"): an answer cut twice after that line is used
        without its last, cut line."""
        try:
            return self._call(stage, prompt, budget, complete_before)
        except ContextOverflowError as exc:
            self.problems.append(f"{stage}: {exc}")
            return None

    def _call(self, stage: str, prompt: str, budget: int, complete_before: str | None = None) -> str | None:
        if self.not_asked:  # its answer would be cut, and a cut answer is never used: save the minutes
            self.problems.append(f"{stage}: not asked, {self.not_asked}")
            return None
        room = self.context_window - self.count_tokens(render("update_system") + prompt) - 16
        if room < 8:
            raise ContextOverflowError(
                f"the prompt leaves no room to answer in a {self.context_window}-token context; use an update "
                "model with a longer context"
            )
        budget = min(budget, self.ceiling, room)
        for attempt in range(2):
            answer = self.ask(stage, prompt, budget)
            if not answer.cut:
                return answer.text
            if attempt == 0 and budget < room:
                self.problems.append(f"{stage}: answer cut at {budget} tokens, retried with {min(budget * 2, room)}")
                budget = min(budget * 2, room)
                continue
            lines = answer.text.splitlines()
            if complete_before and any(line.strip().endswith(complete_before) for line in lines[:-1]):
                self.problems.append(f"{stage}: answer cut at {budget} tokens after its {complete_before}; used")
                return "\n".join(lines[:-1])
            self.problems.append(f"{stage}: answer cut at {budget} tokens; not used")
            return None
        return None  # pragma: no cover - the loop always returns

    # -- the steps -----------------------------------------------------------------------------------
    def summarize(self, dialogue: list[dict[str, str]], session_date: date | None) -> tuple[list[str], bool]:
        """(summary sentences, whether the model wrote them); the user's own words when it wrote none usable."""
        answer = self.call(
            "summarize",
            render(
                "summarize",
                dialogue=format_dialogue(dialogue),
                session_date=_iso(session_date),
                max_sentences=SUMMARY_SENTENCES,
            ),
            SUMMARY_SENTENCES * SENTENCE_TOKENS + SLACK_TOKENS,
        )
        summary = self.parse(answer or "", MAX_SUMMARY)
        return (summary, True) if summary else (extractive_summary(dialogue)[:MAX_SUMMARY], False)

    def reflect(self, dialogue: list[dict[str, str]], summary: list[str]) -> list[str]:
        """The summary with the user's emotions and their causes; the summary itself when no usable answer, and
        any summary sentence the answer does not continue (a model that drops a line it was asked to copy) after
        it."""
        budget = self.rewrite_budget(summary) + len(summary) * 24  # each sentence may gain an emotion clause
        answer = self.call(
            "reflect", render("reflect", dialogue=format_dialogue(dialogue), summary="\n".join(summary)), budget
        )
        reflected = self.parse(answer or "", MAX_REFLECTED)
        if not reflected:
            return summary
        return [s.text for s in keep_summary([Sentence(t, "added") for t in reflected], summary)[0]]

    def rewrite(
        self,
        previous: list[str],
        reflected: list[str],
        session_date: date | None,
        previous_date: date | None,
        problem: str | None = None,
    ) -> list[str]:
        """The new integrated memory of `previous` and the reflected summary ([] when no usable answer); `problem`
        is what the verifier found in the last attempt, for the retry to resolve."""
        return self.rewrite_with_claims(previous, reflected, session_date, previous_date, problem)[0]

    def rewrite_with_claims(
        self,
        previous: list[str],
        reflected: list[str],
        session_date: date | None,
        previous_date: date | None,
        problem: str | None = None,
    ) -> tuple[list[str], list[Claim] | None]:
        """`rewrite`'s memory, and what the rewrite says each previous sentence it left out was replaced by
        (memory/updaters/claims.py), or None when its answer has no claims section at all (then the guard pairs
        drops by the attribute table). The budget has room for CLAIMS claims."""
        answer = self.call(
            "update",
            render(
                "update",
                previous=previous,
                summary=reflected,
                session_date=_iso(session_date),
                previous_date=_iso(previous_date),
                elapsed=_elapsed(previous_date, session_date),
                problem=problem,
            ),
            self.update_budget(previous, reflected),
            complete_before="바뀐 문장:",
        )
        memory, said = split_claims(answer or "")
        listed = said if lists_claims(answer or "") else None
        return self.parse(memory, 2 * (len(previous) + len(reflected)) + 10), listed

    def verify(
        self, previous: list[str], dialogue_text: str, memory: list[str], session_date: date | None
    ) -> str | None:
        """None when the new memory passes; otherwise the reason it failed."""
        if not memory:
            return "the update produced no usable sentence"
        limit = len(previous) + 20
        if len(memory) > limit:
            return f"the update produced {len(memory)} sentences, more than {limit}"
        answer = self.call(
            "verify",
            render("verify", previous=previous, dialogue=dialogue_text, memory=memory, session_date=_iso(session_date)),
            VERIFY_TOKENS,
        )
        if answer is None:
            return "the verifier gave no usable answer (cut at its budget)"
        passed, reason = parse_verdict(answer)
        if passed:
            return None
        return reason if passed is False else f"the verifier's answer was neither 통과 nor 실패: {reason!r}"

    def judge(
        self, pairs: list[tuple[str, str]], dialogue_text: str, question: str = "guard"
    ) -> list[tuple[bool | None, str]]:
        """For each (old A, new B): does B make A no longer true (`question` guard.txt; guard_both.txt: can both be
        true now?)? One call for all pairs; per pair (True/False/None for no usable answer, the answer)."""
        answer = self.call(
            question,
            render(question, pairs=pairs, dialogue=dialogue_text),
            JUDGE_TOKENS + JUDGE_PAIR_TOKENS * len(pairs),
        )
        if answer is None:
            return [(None, "(no usable answer)")] * len(pairs)
        verdicts = parse_yes_no_list(answer, len(pairs))
        return [(v, {True: "예", False: "아니오", None: answer.strip()[:40]}[v]) for v in verdicts]

    def emotions(
        self,
        previous: list[EmotionRecord],
        memory: list[Sentence],
        dialogue: list[dict[str, str]],
        session_date: date,
        session_id: int | None = None,
    ) -> tuple[list[EmotionRecord], dict[str, Any]]:
        """The emotion-and-cause records after this session (memory/emotions.py has the rules): the previous ones
        following their sentences into `memory`, changed or added by one call; the previous ones, and a report that
        says so, when there is no usable answer. The model sees the ongoing records, the sentences they belong to
        and the sentences this update wrote (not the untouched rest, so its cost does not grow with the memory)."""
        records = follow(previous, memory)
        ongoing = [records[i] for i in shown_records(records)]
        linked = {r.sentence for r in ongoing}
        shown = [s.text for s in memory if s.provenance not in ("kept", "restored") or s.text in linked]
        prompt = render(
            "emotions",
            records=ongoing,
            memory=shown,
            dialogue=format_dialogue(dialogue),
            session_date=_iso(session_date),
        )
        answer = None
        for attempt in range(RECORD_TRIES):  # a failed call is tried again; then it costs this session's records only
            try:
                answer = self.call("emotions", prompt, (len(ongoing) + NEW_RECORDS) * RECORD_TOKENS + SLACK_TOKENS)
                break
            except GenerationError as exc:
                self.problems.append(f"emotions: {exc}" + ("; tried again" if attempt < RECORD_TRIES - 1 else ""))
        records, report = merge(records, answer, shown, dialogue, session_date, session_id)
        if report.get("failed") and self.problems:
            report["note"] = self.why(str(report["note"]))
        return records, report

    def with_records(self, inp: UpdateInput, result: UpdateResult) -> UpdateResult:
        """`result` put in time (memory/updaters/timeline.py: times absolute, past plans past; its report under
        "dates"), with this session's emotion records (`emotions`), their report in the details under "emotions",
        and a failed extraction said in the notes (the previous records kept). Part of the update's last stage."""
        result.sentences, dated = put_in_time(inp.previous, result.sentences, inp.session_date)
        if dated:
            result.details = {**result.details, "dates": dated}
        records, report = self.emotions(inp.records, result.sentences, inp.dialogue, inp.session_date, inp.session_id)
        result.records, result.details = records, {**result.details, "emotions": report}
        if report.get("failed"):
            result.notes = [*result.notes, self.because("emotions_failed")]
        return result

    # -- how many calls the steps make (what ZeroGPU's time estimate counts: chatbot/deploy/zerogpu.py) ----------
    # Each is what a step asks when its answers are good: a call cut at its budget, a failed verification or a failed
    # records call asks again, and that is not counted (ZeroGPU asks for the smallest realistic time: a visitor whose
    # quota left is under the time asked is refused outright; an update it cuts runs again with twice the time).
    # 0 for a model that is not asked at all.
    def calls(self, n: int = 1) -> int:
        """`n` one-call steps (summarize, reflect, verify, an operation's choice, a cue chunk): one call each."""
        return 0 if self.not_asked else n

    def record_calls(self) -> int:
        """`emotions` (every strategy's last stage, `with_records`): one call (RECORD_TRIES when it fails)."""
        return self.calls(1)

    def update_calls(self, previous: Sequence[str] = ()) -> int:
        """`update`: the rewrite, the guard's judge (one call for all its pairs) and the verification (all three
        again for each further attempt a failed verification asks for); and the scope calls that name what this
        session may change (`previous`, before this session's summary is known): one per window of the memory
        (`scope_windows`, counted without the summary, which may add one). They show a large memory's rewrite what
        to change, and give the guard what to judge in any memory (a line kept word for word beside the news)."""
        # (a memory of one sentence may have none kept: the smallest realistic count leaves its scope call out)
        scope = len(self.scope_windows(list(previous), [])) if self.use_guard and len(previous) > 1 else 0
        return self.calls((3 if self.use_guard else 2) + scope)

    # -- the update: scope, rewrite, guard, verify ---------------------------------------------------
    def scope(
        self,
        previous: list[Sentence],
        reflected: list[str],
        user_turns: list[str],
        *,
        ask: bool = False,
        named: Callable[[], Collection[int]] | None = None,
    ) -> list[int] | None:
        """Indices of the previous sentences to rewrite, or None when the whole memory fits one rewrite.

        Touched: named by the model (`ask`: the update's own scope calls, `pick`, which read the whole memory
        numbered, window by window, and find what the session changes by meaning: eyesight for a LASIK, a car for
        the subway), speaks to the same attribute of the user's life as a user turn or summary sentence
        (memory/updaters/relatedness.py), shares a content word with one, or is among the embedder's
        RETRIEVED_PER_QUERY nearest for one of them; in that order, then most shared words, as many as fit
        `ceiling` (with `ask`, the update's budget: its claims too). `named`: the update's own `Named`, so the
        scope calls are made once for the scope and the guard.
        """
        texts = [s.text for s in previous]

        def need(part: list[str]) -> int:
            return self.update_budget(part, reflected) if ask else self.rewrite_budget(part + reflected)

        if need(texts) <= self.ceiling:
            return None
        picked = set((named or Named(self, texts, reflected))()) if ask else set()
        queries = user_turns + reflected
        topic = frozenset().union(*(content_words(q) for q in queries))
        overlap = [len(content_words(t) & topic) for t in texts]
        same = [any((e := evidence(t, q)) is not None and e.attributes for q in queries) for t in texts]
        nearest = np.zeros(len(texts), dtype=np.float32)
        if self.embedder is not None and queries:
            cos = self.embedder.embed(queries) @ self._vectors(previous).T
            for row in cos:
                for j in np.argsort(-row)[:RETRIEVED_PER_QUERY]:
                    nearest[j] = max(nearest[j], row[j])
        ranked = sorted(
            (i for i in range(len(texts)) if i in picked or same[i] or overlap[i] or nearest[i] > 0),
            key=lambda i: (i not in picked, -same[i], -overlap[i], -nearest[i], i),
        )
        chosen: list[int] = []
        for i in ranked:
            if need([texts[j] for j in chosen] + [texts[i]]) > self.ceiling:
                break
            chosen.append(i)
        return sorted(chosen)

    def pick(self, previous: list[str], reflected: list[str]) -> list[int] | None:
        """The previous sentences (indices) the model says this session may change or end, chosen from the memory
        numbered (scope.txt), window by window (`scope_windows`): one call per window, its answer one line in the
        window's own numbers, mapped back and united. A window with no usable answer (cut, too long, unreadable)
        names nothing; None when no window gave a usable answer (then the scope is the table's, the words' and
        the embedder's)."""
        windows = self.scope_windows(previous, reflected)
        picked: set[int] | None = None
        for n, (start, end, prompt) in enumerate(windows, 1):
            answer = self.call("scope", prompt, SCOPE_TOKENS)
            numbers = parse_numbers(answer, end - start) if answer is not None else None
            if numbers is None:
                if len(windows) > 1:
                    self.problems.append(
                        f"scope: window {n} of {len(windows)} (sentences {start + 1}-{end}) gave no usable answer; "
                        "its sentences are scoped by the table, the words and the embedder"
                    )
                continue
            picked = (picked or set()) | {start + i for i in numbers}
        return sorted(picked) if picked is not None else None

    def scope_windows(self, previous: list[str], reflected: list[str]) -> list[tuple[int, int, str]]:
        """The scope calls' prompts: (start, end, prompt) for consecutive windows `previous[start:end]`, each as long
        as its prompt (with the system prompt, as `call` counts it) stays within SCOPE_WINDOW_TOKENS (or the
        instructions and summary plus half of that, when they are longer) and leaves the context room for
        SCOPE_TOKENS, numbered from 1 as the prompt's example is. A memory that fits is one window,
        the prompt it always had. A window holds one sentence at least: one that cannot fit the context is refused
        by `call`, as a whole memory was."""
        system = render("update_system")
        fixed = self.count_tokens(system + render("scope", memory=[], summary=reflected))
        cap = max(SCOPE_WINDOW_TOKENS, fixed + SCOPE_WINDOW_TOKENS // 2)
        limit = min(cap, self.context_window - SCOPE_TOKENS - 16)

        def prompt(start: int, end: int) -> str:
            return render("scope", memory=previous[start:end], summary=reflected)

        def fits(start: int, end: int) -> bool:
            return self.count_tokens(system + prompt(start, end)) <= limit

        windows: list[tuple[int, int, str]] = []
        start = 0
        while start < len(previous) or not windows:
            low, high = start + 1, len(previous)
            if fits(start, high):
                low = high
            while low < high:  # the longest window from `start` that fits (at least one sentence)
                mid = (low + high + 1) // 2
                low, high = (mid, high) if fits(start, mid) else (low, mid - 1)
            end = max(low, min(start + 1, len(previous)))
            windows.append((start, end, prompt(start, end)))
            start = end
        return windows

    def _cosine(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        assert self.embedder is not None
        return self.embedder.embed(list(a)) @ self.embedder.embed(list(b)).T

    def _vectors(self, sentences: list[Sentence]) -> np.ndarray:
        """The sentences' vectors: the stored ones where this embedder made them, the rest embedded now."""
        assert self.embedder is not None
        name = self.embedder.name
        missing = [s.text for s in sentences if s.embedding is None or s.embedder != name]
        fresh = iter(self.embedder.embed(missing)) if missing else iter(())
        return np.stack(
            [s.embedding if s.embedding is not None and s.embedder == name else next(fresh) for s in sentences]
        )

    def attempt(
        self,
        previous: list[Sentence],
        reflected: list[str],
        *,
        session_dialogue: str,
        user_turns: list[str],
        verify_dialogue: str,
        session_date: date | None,
        previous_date: date | None,
        progress: Callable[[str], None] = lambda stage: None,
        last: Attempt | None = None,
        named: Callable[[], Collection[int]] | None = None,
    ) -> Attempt:
        """One rewrite of `previous` with the reflected summary, guarded and verified. A retry after `last` failed
        verification is told why, and the guard puts the contradiction the verifier named to its judge."""
        progress("updating")
        problem = last.problem if last is not None else None
        generated, said = self.rewrite_with_claims(
            [s.text for s in previous], reflected, session_date, previous_date, problem
        )
        progress("verifying")
        if not generated:
            return Attempt([], [], [], "the update produced no usable sentence")
        summary_kept: list[str] = []
        if self.use_guard:
            sentences, decisions = guard(
                previous,
                generated,
                session_texts=reflected + user_turns,
                judge=lambda pairs: self.judge(pairs, session_dialogue),
                control=lambda pairs: self.judge(pairs, session_dialogue, "guard_both"),
                cosine=self._cosine if self.embedder is not None else None,
                contested=contested(previous, last) if last is not None else [],
                claimed=resolve(said or [], [s.text for s in previous], generated + reflected + user_turns),
                backup=said is None,
                named=named,
            )
            sentences, summary_kept = keep_summary(sentences, reflected)
        else:
            sentences, decisions = [Sentence(t, "added") for t in generated], []
        problem = self.verify([s.text for s in previous], verify_dialogue, [s.text for s in sentences], session_date)
        return Attempt(sentences, generated, decisions, problem, summary_kept)

    def update(
        self,
        previous: list[Sentence],
        reflected: list[str],
        dialogue: list[dict[str, str]],
        *,
        session_date: date | None,
        previous_date: date | None,
        verify_dialogue: str | None = None,
        attempts: int = 2,
        progress: Callable[[str], None] = lambda stage: None,
    ) -> tuple[list[Sentence] | None, dict[str, Any]]:
        """(the new memory, details), or (None, details) when every attempt failed verification.

        Scoped when the whole rewrite would pass `ceiling`: untouched sentences are carried verbatim (first, in
        their order), the touched part is rewritten, guarded and verified on its own.
        """
        user_turns = [t["text"] for t in dialogue if t["role"] == "user"]
        session_dialogue = format_dialogue(dialogue)
        named = Named(self, [s.text for s in previous], reflected)  # the scope calls, made when first needed
        touched = self.scope(previous, reflected, user_turns, ask=self.use_guard, named=named)
        part_named = named.specific if touched is None else Named.within(named, touched)
        part = previous if touched is None else [previous[i] for i in touched]
        carried = [] if touched is None else carry_over(s for i, s in enumerate(previous) if i not in set(touched))
        details: dict[str, Any] = {"attempts": []}
        if touched is not None:
            details["scope"] = {
                "rewritten": len(part),
                "carried": len(carried),
                "ceiling": self.ceiling,
                "shown": touched,  # indices into previous
            }
        result: Attempt | None = None
        for _ in range(attempts):
            result = self.attempt(
                part,
                reflected,
                session_dialogue=session_dialogue,
                user_turns=user_turns,
                verify_dialogue=verify_dialogue or session_dialogue,
                session_date=session_date,
                previous_date=previous_date,
                progress=progress,
                last=result,
                named=part_named,
            )
            details["attempts"].append(result.json())
            if result.problem is None:
                return carried + result.sentences, details
        return None, details


class Named:
    """The previous sentences (indices) the scope calls (`Steps.pick`) say this session may change: asked at most
    once per update, when first needed (the scope of a large memory, or the guard meeting a drop with no claim)."""

    def __init__(self, steps: Steps, previous: list[str], reflected: list[str]):
        self.steps, self.previous, self.reflected = steps, previous, reflected
        self._picked: set[int] | None = None

    def __call__(self) -> set[int]:
        if self._picked is None:
            self._picked = set(self.steps.pick(self.previous, self.reflected) or ())
        return self._picked

    def specific(self) -> set[int]:
        """What they name, when it is specific enough to be evidence against one sentence (the guard's use): a
        scope that names more than a third of the memory (and more than two sentences) says nothing of any one."""
        picked = self()
        return picked if len(picked) <= max(2, len(self.previous) // 3) else set()

    @staticmethod
    def within(named: Named, part: list[int]) -> Callable[[], set[int]]:
        """`specific`, as indices into `part` (the scoped rewrite's sentences, indices into the whole memory)."""
        return lambda: {k for k, i in enumerate(part) if i in named.specific()}


def contested(previous: list[Sentence], last: Attempt) -> list[tuple[int, str]]:
    """(index into `previous`, new sentence) for the contradictions the verifier named in `last`: an old sentence
    its reason names that the memory still held, against a sentence of this session's it names. Empty when the
    reason names no such pair (then the retry is a plain retry)."""
    if not last.problem or not last.sentences:
        return []
    held = {s.text for s in last.sentences}
    olds = {previous[i].text: i for i in named(last.problem, [s.text for s in previous]) if previous[i].text in held}
    news = [s.text for s in last.sentences if s.provenance in ("added", "rewritten") and s.text not in olds]
    said = [news[j] for j in named(last.problem, news)]
    return [(i, said[0]) for i in olds.values()] if said else []


def _iso(day: date | None) -> str:
    return day.isoformat() if day else UNKNOWN


def _elapsed(previous: date | None, current: date | None) -> str:
    if current is None:
        return "알 수 없는 기간"
    return elapsed_text(previous, current)
