"""Conflict ratio: every pair of memory sentences judged entailment / neutral / contradiction by an NLI judge.

The judge is any ChatModel answering memory/prompts/nli_judge.txt (fixed Korean prompt, temperature 0) with
함의 / 중립 / 모순. Each unordered pair is asked once, earlier sentence first; identical pairs are cached
across samples and strategies. An answer that names no label is `invalid` and left out of the ratio.
Pairs grow quadratically (a 50-sentence memory has 1,225): above `max_pairs` per memory, a sample of that many
pairs is judged, the same sample for the same memory in every run, and the count reports how many pairs it
stands for.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from memory.prompts import prompt_hash, render
from memory.text import strip_wrappers
from models.base import ChatModel, GenerationOptions
from models.errors import ModelSpecError, ModelUnavailableError

LABELS = {"함의": "entailment", "중립": "neutral", "모순": "contradiction"}
PROMPT = "nli_judge"
MAX_PAIRS = 500  # per memory; the paper's CareCall memories (about 5-10 sentences) never reach it


def parse_label(answer: str) -> str:
    """The first of 함의/중립/모순 (or the English word) in the answer; `invalid` when none."""
    text = answer.strip().lower()
    found = [(text.find(k), v) for k, v in LABELS.items() if k in text]
    found += [(text.find(v), v) for v in LABELS.values() if v in text]
    return min(found)[1] if found else "invalid"


class NLIJudge:
    """Labels sentence pairs with a chat model; remembers every answer it got."""

    def __init__(self, model: ChatModel, max_new_tokens: int = 16):
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.cache: dict[tuple[str, str], str] = {}
        self.prompt_hash = prompt_hash(PROMPT)

    def label(self, premise: str, hypothesis: str) -> str:
        key = (premise, hypothesis)
        if key not in self.cache:
            prompt = render(PROMPT, premise=premise, hypothesis=hypothesis)
            answer = self.model.complete(
                [{"role": "user", "content": prompt}],
                GenerationOptions(max_new_tokens=self.max_new_tokens, temperature=0.0),
            )
            self.cache[key] = "invalid" if answer.cut else parse_label(strip_wrappers(answer.text))
        return self.cache[key]


class ClassifierNLIJudge:
    """Labels sentence pairs with a local NLI classifier (transformers sequence classification, e.g. a KLUE-NLI
    checkpoint): no LLM calls, deterministic, fast on a GPU. Its labels are read from the model's id2label."""

    def __init__(self, source: str, device: str | None = None, max_length: int = 256):
        try:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as exc:
            raise ModelUnavailableError(f"the NLI classifier needs torch and transformers ({exc})") from exc
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source)
            self.model = AutoModelForSequenceClassification.from_pretrained(source)
        except OSError as exc:
            raise ModelUnavailableError(
                f"cannot load the NLI classifier '{source}' ({exc}); give a local folder "
                "or a hub id this machine can download"
            ) from exc
        read = {i: _nli_label(name) for i, name in self.model.config.id2label.items()}
        if set(read.values()) != set(LABELS.values()):
            raise ModelSpecError(
                f"'{source}' is not a 3-way NLI classifier: its labels are "
                f"{sorted(self.model.config.id2label.values())}; it needs entailment, neutral "
                "and contradiction"
            )
        self.labels = {i: label for i, label in read.items() if label is not None}  # every one, as checked
        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()
        self.max_length = max_length
        self.cache: dict[tuple[str, str], str] = {}
        self.prompt_hash = f"classifier:{source}"

    def label(self, premise: str, hypothesis: str) -> str:
        key = (premise, hypothesis)
        if key not in self.cache:
            batch = self.tokenizer(
                premise, hypothesis, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            with self._torch.no_grad():
                logits = self.model(**batch).logits[0]
            self.cache[key] = self.labels[int(logits.argmax())]
        return self.cache[key]


def _nli_label(name: str) -> str | None:
    """'ENTAILMENT', 'entailment', 'LABEL_entailment', '함의' ... -> entailment / neutral / contradiction."""
    lowered = str(name).lower()
    for korean, english in LABELS.items():
        if english in lowered or korean in lowered or english[:6] in lowered:
            return english
    return None


@dataclass
class ConflictCounts:
    pairs: int = 0  # judged
    pairs_total: int = 0  # in the memories (more than `pairs` where a memory's pairs were sampled)
    contradiction: int = 0
    entailment: int = 0
    neutral: int = 0
    invalid: int = 0
    contradicting_pairs: list[tuple[str, str]] = field(default_factory=list)

    def add(self, other: ConflictCounts) -> ConflictCounts:
        for name in ("pairs", "pairs_total", "contradiction", "entailment", "neutral", "invalid"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.contradicting_pairs += other.contradicting_pairs
        return self

    @property
    def ratio(self) -> float | None:
        """Contradictions over validly judged pairs; None when no pair was judged."""
        valid = self.pairs - self.invalid
        return self.contradiction / valid if valid else None

    def as_json(self) -> dict:
        return {
            "pairs": self.pairs,
            "pairs_total": self.pairs_total,
            "contradiction": self.contradiction,
            "entailment": self.entailment,
            "neutral": self.neutral,
            "invalid": self.invalid,
            "ratio": self.ratio,
        }


def sentence_pairs(memory: Sequence[str]) -> list[tuple[str, str]]:
    """All unordered pairs of distinct sentences, in memory order."""
    unique = list(dict.fromkeys(s for s in memory if s.strip()))
    return list(combinations(unique, 2))


def judged_pairs(memory: Sequence[str], max_pairs: int | None = MAX_PAIRS) -> list[tuple[str, str]]:
    """The pairs to judge: all of them, or a sample of `max_pairs` seeded by the memory's text (reproducible)."""
    return _sample(sentence_pairs(memory), memory, max_pairs)


def _sample(pairs: list[tuple[str, str]], memory: Sequence[str], max_pairs: int | None) -> list[tuple[str, str]]:
    if not max_pairs or len(pairs) <= max_pairs:
        return pairs
    seed = hashlib.sha256("\n".join(dict.fromkeys(memory)).encode()).digest()
    return [pairs[i] for i in sorted(random.Random(seed).sample(range(len(pairs)), max_pairs))]


def conflicts(
    memory: Sequence[str], judge: Callable[[str, str], str], max_pairs: int | None = MAX_PAIRS
) -> ConflictCounts:
    pairs = sentence_pairs(memory)
    counts = ConflictCounts(pairs_total=len(pairs))
    for a, b in _sample(pairs, memory, max_pairs):
        label = judge(a, b)
        counts.pairs += 1
        setattr(counts, label, getattr(counts, label) + 1)
        if label == "contradiction":
            counts.contradicting_pairs.append((a, b))
    return counts


def pooled(samples: Iterable[ConflictCounts]) -> ConflictCounts:
    total = ConflictCounts()
    for c in samples:
        total.add(c)
    return total
