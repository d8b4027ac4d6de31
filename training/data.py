"""Rows into training examples: the dataset builder's passing rows, each as the exact update call the app makes.

memory/updaters/steps.py's own `rewrite` is run on a recorder model, so the messages (system prompt,
memory/prompts/update.txt with the previous memory, the reflected summary, both dates and the elapsed time) are
the app's, byte for byte; models/hf.py's `chat_prompt` and `token_ids` turn them into the token ids the
transformers backend sends (its chat template, FALLBACK_TEMPLATE where the tokenizer has none). The reference
memory (the row's `memory`, one sentence per line) is the answer, followed by the template's end of turn. A row
the builder rewrote in part (`scope`) trains on the part the model saw: the carried sentences are the first
`scope.carried` of its memory. Loss is on the answer's tokens only (`Example.n_prompt`).

Episodes, not rows, are split into train and validation, so no session of a validation episode is trained on.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memory.text import lenient_date
from memory.updaters.steps import DEFAULT_CEILING, Steps
from memory.words import plural
from models.base import ChatModel, Completion, Finish, GenerationOptions, Message
from models.errors import InputError
from models.hf import chat_prompt, token_ids, use_chat_template

PASSED = "통과"


def dataset_file(data: Path) -> Path:
    """DATA is a build-dataset folder (its dataset.jsonl) or the JSONL file itself."""
    path = Path(data) / "dataset.jsonl" if Path(data).is_dir() else Path(data)
    if not path.is_file():
        raise InputError(f"no dataset at {path}; give the --out folder of `keem build-dataset` or its dataset.jsonl")
    return path


def read_rows(data: Path) -> list[dict[str, Any]]:
    """The builder's rows; a line that is not one is an error naming the line."""
    path = dataset_file(data)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not all(k in row for k in ("key", "episode_id", "previous_memory", "reflected_summary", "memory")):
                raise KeyError
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(
                f"{path} line {number} is not a `keem build-dataset` row (key, episode_id, "
                "previous_memory, reflected_summary, memory, ...); fix or delete it"
            ) from None
        rows.append(row)
    return rows


def passing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose memory passed verification and holds sentences (dataset.jsonl has only those; be sure)."""
    return [r for r in rows if r.get("verdict", PASSED) == PASSED and r["memory"]]


def split_episodes(episode_ids: list[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, validation) episode ids: a seeded shuffle, at least one validation episode when there are two."""
    ids = sorted(set(episode_ids))
    if val_fraction <= 0 or len(ids) < 2:
        return ids, []
    random.Random(seed).shuffle(ids)
    n_val = min(len(ids) - 1, max(1, round(len(ids) * val_fraction)))
    return sorted(ids[n_val:]), sorted(ids[:n_val])


class _Recorder(ChatModel):
    """A model that answers nothing and keeps the messages and options of the call the steps made."""

    spec = "recorder"

    def __init__(self, count_tokens: Callable[[str], int], context_window: int):
        self._count = count_tokens
        self.context_window = context_window
        self.messages: list[Message] | None = None
        self.options: GenerationOptions | None = None

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        self.messages, self.options = messages, options
        return Completion("", Finish("stop"))


def row_dates(row: dict[str, Any]) -> tuple[Any, Any]:
    """(this session's date, the previous session's date) from the row's provenance; None where unknown."""
    dates = (row.get("source") or {}).get("session_dates") or []
    session = lenient_date(dates[-1]) if dates else None
    previous = lenient_date(dates[-2]) if len(dates) >= 2 else None
    return session, previous


def update_call(
    row: dict[str, Any], count_tokens: Callable[[str], int], context_window: int, ceiling: int = DEFAULT_CEILING
) -> tuple[list[Message], int, str] | None:
    """(the messages the app sends for this row's update, its output budget, the answer), or None when the app
    would not send it (the prompt leaves no room in the context)."""
    previous, answer = list(row["previous_memory"]), list(row["memory"])
    carried = int((row.get("scope") or {}).get("carried") or 0)
    if carried:  # scoped rewrite: the model saw only the touched sentences and wrote what follows the carried
        left = list(answer[:carried])
        part = []
        for text in previous:
            if text in left:
                left.remove(text)
            else:
                part.append(text)
        previous, answer = part, answer[carried:]
    recorder = _Recorder(count_tokens, context_window)
    session_date, previous_date = row_dates(row)
    Steps.for_model(recorder, ceiling=ceiling).rewrite(
        previous, list(row["reflected_summary"]), session_date, previous_date
    )
    if recorder.messages is None or recorder.options is None:
        return None
    return list(recorder.messages), recorder.options.max_new_tokens, "\n".join(answer)


@dataclass
class Example:
    key: str
    episode_id: str
    input_ids: list[int]
    n_prompt: int  # tokens before the answer (no loss there)
    budget: int  # the output budget the app gives this update

    @property
    def n_answer(self) -> int:
        return len(self.input_ids) - self.n_prompt


def encode(tokenizer: Any, messages: list[Message], answer: str, eos_ids: set[int]) -> tuple[list[int], int]:
    """(prompt + answer token ids, prompt length): the prompt as models/hf.py sends it at inference, the answer as
    the template continues it (its end-of-turn mark), ending on an end-of-sequence token."""
    use_chat_template(tokenizer)
    prompt = chat_prompt(tokenizer, messages)
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": answer}], tokenize=False)
    completion = full[len(prompt) :] if full.startswith(prompt) and len(full) > len(prompt) else answer
    prompt_ids = token_ids(tokenizer, prompt)
    answer_ids = token_ids(tokenizer, completion)
    if not eos_ids & set(answer_ids[-3:]) and tokenizer.eos_token_id is not None:
        answer_ids.append(tokenizer.eos_token_id)
    return prompt_ids + answer_ids, len(prompt_ids)


@dataclass
class Prepared:
    train: list[Example]
    val: list[Example]
    split: dict[str, list[str]]
    rows: int  # rows in the file
    used: int
    skipped_failed: int  # not passing verification
    skipped_long: list[str]  # keys past max_length or the context
    over_budget: list[str]  # keys whose answer is longer than the app's output budget
    examples_sha256: str  # over every example's token ids: prompts, template, answers
    prompt_tokens: int
    answer_tokens: int
    dataset_prompt_hashes: list[str]

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("train", "val"):
            d.pop(k)
        return {**d, "train_rows": len(self.train), "val_rows": len(self.val)}


def prepare(
    rows: list[dict[str, Any]],
    tokenizer: Any,
    *,
    context_window: int,
    eos_ids: set[int],
    max_length: int,
    val_fraction: float,
    seed: int,
    ceiling: int = DEFAULT_CEILING,
) -> Prepared:
    """Examples from the passing rows, split by episode."""
    good = passing(rows)
    train_ids, val_ids = split_episodes([r["episode_id"] for r in good], val_fraction, seed)
    val_set = set(val_ids)

    def count(text: str) -> int:
        return len(token_ids(tokenizer, text))

    train: list[Example] = []
    val: list[Example] = []
    long_keys: list[str] = []
    over: list[str] = []
    digest = hashlib.sha256()
    for row in sorted(good, key=lambda r: (r["episode_id"], r.get("session_index", 0), r["key"])):
        call = update_call(row, count, context_window, ceiling)
        if call is None:
            long_keys.append(row["key"])
            continue
        messages, budget, answer = call
        ids, n_prompt = encode(tokenizer, messages, answer, eos_ids)
        if len(ids) > min(max_length, context_window):
            long_keys.append(row["key"])
            continue
        if len(ids) - n_prompt > budget:
            over.append(row["key"])
        digest.update(json.dumps([row["key"], n_prompt, ids]).encode())
        example = Example(row["key"], row["episode_id"], ids, n_prompt, budget)
        (val if row["episode_id"] in val_set else train).append(example)
    if not train:
        raise InputError(
            f"no training rows: {plural(len(rows), 'row')}, {len(good)} passing, {len(long_keys)} longer than "
            f"{max_length} tokens; build more rows, or raise --max-length"
        )
    used = train + val
    return Prepared(
        train,
        val,
        {"train": train_ids, "validation": val_ids},
        len(rows),
        len(used),
        len(rows) - len(good),
        long_keys,
        over,
        digest.hexdigest(),
        sum(e.n_prompt for e in used),
        sum(e.n_answer for e in used),
        sorted({str(r.get("prompt_hash")) for r in good if r.get("prompt_hash")}),
    )
