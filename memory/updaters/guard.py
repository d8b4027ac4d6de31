"""The deletion guard: a previous memory sentence may vanish only when the new session justifies it.

How it decides, for each sentence of the previous memory:
1. Counterpart: the new memory keeps it if some new sentence is identical, or holds every noun of it and at
   least `CONTAINMENT` of its Korean content words (Kiwi lemmas): "병원에 방문할 예정" is not continued by
   "아는 언니네 방문할 예정", though two of its three words are there. Such new sentences are marked `kept` or
   `rewritten` with the old sentence as origin; one new sentence continues several old ones only when it
   contains each of them so (a merge).
2. Otherwise it was dropped. A drop is justified only if some sentence of the session may have replaced it AND
   the update model, asked with guard.txt "B가 사실이면 A는 더 이상 사실이 아닌가요?" about that pair, answers
   "예". The pair comes from meaning: first what the rewrite itself claims ("A => B" after its memory:
   memory/updaters/claims.py; any attribute, eyesight -> LASIK, 대리 -> 과장). Only for a rewrite that writes no
   claims section at all (a model that ignores the instruction) does a drop get memory/updaters/relatedness.py's
   evidence instead (the same attribute in its table, or a shared noun); a rewrite that keeps the protocol is
   taken at its word, and a drop it claims nothing about is silent, unless the scope call (scope.txt, a separate
   question: which sentences may this session change?) named it too: two answers of the model agree that the
   session ends it, so it is put to the judge with each sentence the rewrite added (NAMED_PAIRS at most; a model
   that forgets a claim line no longer keeps the outdated fact). All pairs of one update go in one call.
   Everything else is restored verbatim, marked `restored`: another silent drop never reaches the judge, and a pair
   whose answer is unusable (cut, or neither 예 nor 아니오) is restored too. A sentence the rewrite kept word for
   word but claims is replaced (a model copying back an outdated line) goes to the same judge, and goes on "예".
3. Contested: a sentence the verifier named in a contradiction with a new one (the retry of a failed verification)
   is put to the same judge even when the rewrite kept it verbatim; on "예" it goes, so the retry resolves the
   contradiction instead of repeating it. A rewrite of it ("예전에는 서울에 살았다": history) is left alone.
So a finished episode or an unrelated fact can never silently disappear, whatever the model writes, and a change
said in new words ("서울에 산다" -> "부산으로 이사했어") is applied when the judge confirms it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass

from memory.korean import content_nouns, content_words, timeless
from memory.store import Sentence
from memory.updaters.base import carry_over
from memory.updaters.relatedness import Cosine, pair_drops

# (pairs of (old sentence A, new sentence B)) -> per pair (True: B makes A no longer true / False / None: no usable
# answer, the judge's words)
Judge = Callable[[list[tuple[str, str]]], list[tuple[bool | None, str]]]

CONTAINMENT = 0.6
MAX_CLAIMS = 16  # claims one judge call asks about (a session that changes more is an odd one; the rest restored)
CLAIMED = "claimed by the rewrite"
NAMED = "named by the scope call"
NAMED_PAIRS = 3  # added sentences a silent drop the scope call named is judged against (the embedder's nearest first)


@dataclass
class GuardDecision:
    sentence: str
    action: str  # kept | rewritten | dropped | restored
    counterpart: str | None = None
    related: bool = False
    judge: str | None = None
    pair: str | None = None  # the session's sentence the judge was asked about
    evidence: str | None = None  # why they were paired


def _containment(old: frozenset[str], new: frozenset[str]) -> float:
    return len(old & new) / len(old) if old else 0.0


def continuation(old: str, new_texts: list[str]) -> int | None:
    """The index of the new sentence that continues `old` (identical, or holding every noun of it and
    CONTAINMENT of its content words; the best such), or None."""
    words, nouns = content_words(timeless(old)), content_nouns(old)  # a date the rewrite dropped is no loss
    scores = [
        1.0 if text == old else _containment(words, content_words(text)) if nouns <= content_words(text) else 0.0
        for text in new_texts
    ]
    best = max(range(len(scores)), key=scores.__getitem__, default=None)
    return best if best is not None and scores[best] >= CONTAINMENT else None


def keep_summary(sentences: list[Sentence], summary: list[str]) -> tuple[list[Sentence], list[str]]:
    """The new memory with every summary sentence it does not continue appended (a model that leaves this
    session's news out of its rewrite loses it otherwise); returns (sentences, the appended texts)."""
    texts = [s.text for s in sentences]
    missing = [line for line in dict.fromkeys(summary) if continuation(line, texts) is None]
    return sentences + [Sentence(line, "added") for line in missing], missing


Asked = dict[int, tuple[str | None, str | None, tuple[bool | None, str | None]]]


def _named(
    previous: list[Sentence],
    decisions: dict[int, GuardDecision],
    added: list[str],
    session_texts: list[str],
    unpaired: list[int],
    judged: set[int],
    named: Callable[[], Collection[int]] | None,
    cosine: Cosine | None,
) -> tuple[list[tuple[int, str, str]], list[int]]:
    """The scope call's pairs: each drop with no pair yet, and each sentence kept word for word beside this
    session's news (a stale line the rewrite copied back), that the scope call names, with the news nearest it
    (the sentences the rewrite added, then this session's summary and the user's words, which the memory keeps
    whether or not the rewrite did); returns (pairs, the kept ones among them)."""
    news = list(dict.fromkeys(added + [t for t in session_texts if t not in added]))
    copied = [i for i, d in decisions.items() if d.action == "kept" and i not in judged] if news else []
    if named is None or not (unpaired or copied) or not news:
        return [], []
    picked = set(named())
    stale = [i for i in copied if i in picked]
    chosen = [i for i in unpaired if i in picked] + stale
    near = cosine([previous[i].text for i in chosen], news) if cosine is not None and chosen else None
    pairs = []
    for row, i in enumerate(chosen):  # one embedder call for all of them
        ranked = sorted(range(len(news)), key=lambda j: (-near[row][j] if near is not None else 0.0, j))
        pairs += [(i, news[j], NAMED) for j in ranked[:NAMED_PAIRS]]
    return pairs, stale


def _control(previous: list[Sentence], stale: list[int], asked: Asked, control: Judge) -> None:
    """A kept sentence that goes on the scope call's word alone and a judge's 예 is asked the other way round too
    (can both be true now?): anything but 아니오 keeps it, so a judge that agrees with everything removes nothing."""
    doubt = [i for i in stale if i in asked and asked[i][2][0] is True]
    checks = control([(previous[i].text, str(asked[i][0])) for i in doubt]) if doubt else []
    for i, (both, words) in zip(doubt, checks):
        if both is not False:
            asked[i] = (asked[i][0], NAMED, (None, f"{asked[i][2][1]}; 둘 다 사실일 수 있나: {words}"))


def guard(
    previous: list[Sentence],
    new_texts: list[str],
    *,
    session_texts: list[str],
    judge: Judge,
    cosine: Cosine | None = None,
    contested: Sequence[tuple[int, str]] = (),
    claimed: Sequence[tuple[int, str]] = (),
    backup: bool = True,
    named: Callable[[], Collection[int]] | None = None,
    control: Judge | None = None,
) -> tuple[list[Sentence], list[GuardDecision]]:
    """Attribute each new sentence to its origin and restore unjustified drops; returns (sentences, decisions).

    `session_texts` are this session's summary sentences and user turns: with the sentences the update added, the
    candidates for what replaced a dropped one. `judge(pairs)` answers, in one call, whether each new sentence B
    makes its old sentence A no longer true. `contested` holds (index into `previous`, new text) pairs the verifier
    named as contradicting; `claimed` holds (index into `previous`, new text) pairs the rewrite says replaced that
    sentence (memory/updaters/claims.py): the judge is asked about those first, and about a claimed sentence the
    rewrite kept word for word too; `backup`: whether a drop with no claim gets relatedness.py's pairs (False when
    the rewrite kept the claims protocol: then it is a silent drop); `named()`: the indices into `previous` the
    scope call says this session may change, asked when a drop has no pair yet or a sentence was kept word for word
    beside sentences the rewrite added (either is judged against those added sentences); `control(pairs)` asks the
    opposite question (can A and B both be true now?) of every pair that stands on the scope call's word alone and
    got "예": such a sentence goes only when the judge also answers "아니오" there, so a judge that agrees with
    everything removes nothing on it; `cosine` (the embedder's) only orders candidates.
    """
    origin: dict[int, Sentence] = {}
    decisions: dict[int, GuardDecision] = {}
    for i, old in enumerate(previous):  # pass 1: counterparts
        best = continuation(old.text, new_texts)
        if best is not None:
            same = new_texts[best] == old.text
            action = "kept" if same else "rewritten"
            origin.setdefault(best, carry_over([old])[0] if same else Sentence(new_texts[best], "rewritten", old.id))
            decisions[i] = GuardDecision(old.text, action, new_texts[best])
    added = [t for j, t in enumerate(new_texts) if j not in origin]
    claims = dict(list(claimed)[:MAX_CLAIMS])
    dropped = [i for i in range(len(previous)) if i not in decisions]
    pairs = [(i, claims[i], CLAIMED) for i in dropped if i in claims]
    verbatim: set[int] = set()
    for i in sorted(claims):  # kept word for word, yet the rewrite says it is replaced: a stale line, judged
        if i in decisions and decisions[i].action == "kept":
            verbatim.add(i)
            pairs.append((i, claims[i], CLAIMED))
    unclaimed = [i for i in dropped if i not in claims] if backup else []
    pairs += [
        (unclaimed[p.old], p.new, str(p.evidence))
        for p in pair_drops([previous[i].text for i in unclaimed], added + session_texts, cosine)
    ]
    unpaired = [i for i in dropped if i not in {p[0] for p in pairs}]
    judged = {p[0] for p in pairs} | {i for i, _ in contested}
    named_pairs, stale = _named(previous, decisions, added, session_texts, unpaired, judged, named, cosine)
    pairs += named_pairs
    verbatim.update(stale)
    for i, new in contested:
        if i in {p[0] for p in pairs} or (i in decisions and decisions[i].action != "kept"):
            continue
        if i in decisions:
            verbatim.add(i)
        pairs.append((i, new, "named by the verifier"))
    answers = judge([(previous[i].text, new) for i, new, _ in pairs]) if pairs else []
    asked: Asked = {}
    for (i, pair, because), said in zip(pairs, answers):  # a drop judged against several sentences: a 예 decides
        if i not in asked or (said[0] is True and asked[i][2][0] is not True):
            asked[i] = (pair, because, said)
    if stale and control is not None:
        _control(previous, stale, asked, control)
    restored: list[Sentence] = []
    gone: set[str] = set()
    for i, old in enumerate(previous):  # pass 2: every drop must be justified
        if i in decisions and i not in verbatim:
            continue
        with_, why, (verdict, answer) = asked.get(i, (None, None, (None, None)))
        if i in verbatim:  # contested and kept word for word: it goes only if the judge says the new one ends it
            if verdict is True:
                gone.add(old.text)
                decisions[i] = GuardDecision(old.text, "dropped", None, True, answer, with_, why)
            continue
        if verdict is True:
            decisions[i] = GuardDecision(old.text, "dropped", related=True, judge=answer, pair=with_, evidence=why)
        else:
            restored += carry_over([old], "restored")
            decisions[i] = GuardDecision(old.text, "restored", None, i in asked, answer, with_, why)
    sentences = [origin.get(j, Sentence(text, "added")) for j, text in enumerate(new_texts) if text not in gone]
    return sentences + restored, [decisions[i] for i in range(len(previous))]


def decisions_json(decisions: list[GuardDecision]) -> list[dict[str, object]]:
    return [asdict(d) for d in decisions]
