"""The KEEM-style dataset builder: reflect -> update -> guard -> verify for every session step, resumable and
concurrent.

The steps are the app's own (memory/updaters/steps.py): the same prompts, output budgets, cut-answer rule,
scoped rewrite of large memories and deletion guard, so a row holds the memory the app would write for
that session. For each episode, session 1's summary (the corpus's, else one the model writes) is reflected
with emotions and causes and becomes the first memory; for each session t >= 2 the model reflects that
session's summary, writes the updated memory from the previous memory and the reflected summary, the guard
restores what it dropped without cause (`guard=False`, `--no-guard`: the paper's unguarded pipeline), and
the model verifies it against all dialogues up to t. One attempt per step: a call answers the same from the
cache every time. A passing step is a row of ``dataset.jsonl`` and its memory is the next step's previous
memory; a failing step goes to ``rejects.jsonl`` with the reason and ends the episode (its later steps are
rejected as skipped), as the paper excluded samples that failed verification.

Resuming: every finished model call is stored in ``calls.sqlite`` keyed by a hash of (model spec, messages,
options), and rows are keyed by ``<episode id>#<t>``; running the same command again replays finished calls
from the cache and writes no row twice. Episodes run concurrently (``concurrency`` threads); the steps of one
episode run in order. The dry run (evaluation/dry_run.py) is this builder on a model that calls nothing.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from evaluation.corpora.episodes import Episode, Session
from evaluation.files import read_json, read_jsonl
from memory.prompts import render
from memory.store import Sentence, now_iso, storage_error
from memory.text import UNKNOWN, format_dialogue, lenient_date, lenient_sentences
from memory.updaters.base import memory_of
from memory.updaters.steps import DEFAULT_CEILING, Steps
from memory.updaters.timeline import put_in_time
from models.base import ChatModel, Completion, Finish, GenerationOptions, Message
from models.errors import InputError, KeemError


class BuildStopped(Exception):
    """Raised inside a worker when the build is stopping (Ctrl-C or a fatal error elsewhere)."""


# -- the call cache --------------------------------------------------------------------------------
@dataclass
class CallResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    cached: bool
    finish: str = "stop"  # "length": cut at its budget; never used (steps.py retries it once)


class CallCache:
    """Finished model calls in SQLite, keyed by a hash of (model spec, messages, options); thread-safe."""

    def __init__(self, path: Path):
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # a killed process loses no commit; only power loss could
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, model TEXT, stage TEXT, "
            "response TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, seconds REAL, "
            "created_at TEXT)"
        )
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(calls)")}
        if "finish" not in columns:  # caches written before finish reasons were kept
            self.conn.execute("ALTER TABLE calls ADD COLUMN finish TEXT")
        self.lock = threading.Lock()

    @staticmethod
    def key(model: str, messages: list[Message], options: GenerationOptions) -> str:
        payload = json.dumps(
            [model, messages, options.max_new_tokens, options.temperature, options.top_p],
            ensure_ascii=False,
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def get(self, key: str, max_new_tokens: int) -> CallResult | None:
        """The cached call; one cached before finish reasons were kept counts as cut if it filled its budget."""
        with self.lock:
            row = self.conn.execute(
                "SELECT response, prompt_tokens, completion_tokens, seconds, finish FROM calls WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        finish = row[4] or ("length" if row[2] >= max_new_tokens else "stop")
        return CallResult(row[0], row[1], row[2], row[3], True, finish)

    def put(self, key: str, model: str, stage: str, result: CallResult) -> None:
        with self.lock:
            self.conn.execute(
                "INSERT OR IGNORE INTO calls (key, model, stage, response, prompt_tokens, "
                "completion_tokens, seconds, created_at, finish) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model,
                    stage,
                    result.text,
                    result.prompt_tokens,
                    result.completion_tokens,
                    result.seconds,
                    now_iso(),
                    result.finish,
                ),
            )

    def __len__(self) -> int:
        with self.lock:
            return int(self.conn.execute("SELECT count(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


# -- the row journal -------------------------------------------------------------------------------
class RowFile:
    """An append-only JSONL file of rows keyed by 'key'; a torn last line (a killed write) is cut off on open."""

    def __init__(self, path: Path):
        self.path = path
        self.keys: set[str] = set()
        if path.exists():
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                data = data[: data.rfind(b"\n") + 1]
                path.write_bytes(data)
            for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
                try:
                    self.keys.add(json.loads(line)["key"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise InputError(
                        f"{path} line {number} is not a row this builder wrote; delete that line "
                        "(or the file) and run again"
                    ) from None
        self.handle = path.open("a", encoding="utf-8")
        self.lock = threading.Lock()

    def write(self, row: dict[str, Any]) -> bool:
        """Append the row unless its key is already there; True when written."""
        with self.lock:
            if row["key"] in self.keys:
                return False
            self.handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            self.handle.flush()  # in the OS once flushed: a killed process loses nothing (rows replay from the cache)
            self.keys.add(row["key"])
            return True

    def close(self) -> None:
        self.handle.close()


# -- configuration and results ---------------------------------------------------------------------
@dataclass
class BuildConfig:
    out_dir: Path
    concurrency: int = 4
    limit: int | None = None
    price_per_1k_tokens: float = 0.0
    progress: bool = True
    source_format: str = ""
    source_path: str = ""
    guard: bool = True  # False: the paper's unguarded pipeline (--no-guard)
    ceiling: int = DEFAULT_CEILING  # output tokens one update call plans for; past it, scoped rewrite


@dataclass
class BuildStats:
    episodes: int = 0
    steps: int = 0
    rows: int = 0
    rejects: int = 0
    already_done: int = 0
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0  # of every call, cached ones included
    completion_tokens: int = 0
    new_tokens: int = 0  # of the calls made this run: what `cost` prices
    cost: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def step_key(episode_id: str, t: int) -> str:
    return f"{episode_id}#{t}"


def all_dialogues(sessions: list[Session]) -> str:
    """Every session's dialogue, headed by its number and date: what the verifier checks against."""
    return "\n\n".join(
        f"[세션 {n} ({s.date or UNKNOWN})]\n{format_dialogue(s.dialogue())}" for n, s in enumerate(sessions, 1)
    )


def _lock(out_dir: Path) -> IO[str]:
    """Hold DIR/.lock for the whole build so two builds never write the same files (released when killed)."""
    handle = (out_dir / ".lock").open("w")
    try:
        import fcntl

        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # pragma: no cover - not POSIX: no lock
        pass
    except OSError:
        handle.close()
        raise InputError(
            f"another build-dataset is writing {out_dir}; wait for it to finish or use another --out"
        ) from None
    return handle


# -- the builder -----------------------------------------------------------------------------------
class EpisodeRunner:
    """Runs one episode's steps in order, every model call through the cache."""

    def __init__(self, builder: DatasetBuilder, episode: Episode):
        self.b, self.ep = builder, episode
        self.calls: list[dict[str, Any]] = []
        model = builder.model
        self.steps = Steps(
            self.ask,
            model.count_tokens,
            model.context_window,
            builder.config.ceiling,
            parse=lenient_sentences,
            use_guard=builder.config.guard,
        )

    def ask(self, stage: str, prompt: str, max_new_tokens: int) -> Completion:
        """The steps' Ask: one call through the cache (a cached answer replays with its finish reason)."""
        b = self.b
        if b.stopping.is_set():
            raise BuildStopped("the build is stopping")
        messages: list[Message] = [{"role": "system", "content": b.system}, {"role": "user", "content": prompt}]
        options = GenerationOptions(max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0, timeout_s=b.timeout_s)
        key = CallCache.key(b.model.spec, messages, options)
        result = b.cache.get(key, max_new_tokens)
        if result is None:
            started = time.perf_counter()
            answer = b.model.complete(messages, options)
            finish = answer.finish
            result = CallResult(
                answer.text,
                finish.prompt_tokens or b.model.count_tokens(b.system + prompt),
                finish.completion_tokens or b.model.count_tokens(answer.text),
                time.perf_counter() - started,
                False,
                finish.reason,
            )
            b.cache.put(key, b.model.spec, stage, result)
        b.record(result)
        self.calls.append(
            {
                "stage": stage,
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "seconds": round(result.seconds, 3),
                "cached": result.cached,
                "finish": result.finish,
            }
        )
        return Completion(result.text, Finish(result.finish, result.prompt_tokens, result.completion_tokens))

    def summary(self, session: Session) -> tuple[list[str], str]:
        """(summary sentences, where they came from): the corpus's, else the model's ([] when it wrote none)."""
        if session.summary:
            return session.summary, "corpus"
        summary, generated = self.steps.summarize(session.dialogue(), lenient_date(session.date))
        return (summary if generated else []), "model"

    def run(self) -> None:
        b, ep, steps = self.b, self.ep, self.steps
        keys = [step_key(ep.id, t) for t in range(2, len(ep.sessions) + 1)]
        if all(k in b.done for k in keys):
            b.step_done(len(keys), already=True)
            return
        first = ep.sessions[0]
        summary1, _ = self.summary(first)
        reflected1 = steps.reflect(first.dialogue(), summary1) if summary1 else []
        # the first memory's times, resolved against its session's date as every later session's are
        memory = [
            s.text for s in put_in_time([], [Sentence(t, "added") for t in reflected1], lenient_date(first.date))[0]
        ]
        failed: str | None = None if memory else "session 1 gave no summary to start the memory from"
        started = time.perf_counter()
        for t in range(2, len(ep.sessions) + 1):
            key = step_key(ep.id, t)
            if failed is not None:
                b.reject(self._base(key, t, []), f"skipped: {failed}")
                continue
            session, previous = ep.sessions[t - 1], ep.sessions[t - 2]
            steps.problems = []
            summary, origin = self.summary(session)
            if not summary:
                failed = f"session {t} has no usable summary"
                b.reject(self._base(key, t, self.calls), failed)
                continue
            reflected = steps.reflect(session.dialogue(), summary)
            new, details = steps.update(
                memory_of(memory),
                reflected,
                session.dialogue(),
                session_date=lenient_date(session.date),
                previous_date=lenient_date(previous.date),
                verify_dialogue=all_dialogues(ep.sessions[:t]),
                attempts=1,
            )
            attempt = details["attempts"][-1]
            if new is not None:  # times absolute, past plans past: the step every strategy's update ends with
                new, details["dates"] = put_in_time(memory_of(memory), new, lenient_date(session.date))
            texts = [s.text for s in new] if new is not None else attempt["memory"]
            row = {
                **self._base(key, t, self.calls),
                "previous_memory": memory,
                "summary": summary,
                "summary_source": origin,
                "reflected_summary": reflected,
                "memory": texts,
                "verdict": "통과" if new is not None else attempt["problem"],
                "guard": attempt.get("guard", []),
                "scope": details.get("scope"),
                **({"dates": details["dates"]} if details.get("dates") else {}),
                "problems": list(steps.problems),
            }
            row["calls"], row["seconds"] = list(self.calls), round(time.perf_counter() - started, 3)
            if new is not None:
                b.accept(row)
                memory = texts
            else:
                failed = f"session {t} failed verification"
                b.reject(row, attempt["problem"])
            self.calls, started = [], time.perf_counter()

    def _base(self, key: str, t: int, calls: list[dict[str, Any]]) -> dict[str, Any]:
        b, ep = self.b, self.ep
        return {
            "key": key,
            "episode_id": ep.id,
            "session_index": t,
            "source": {
                "format": ep.source,
                "path": b.config.source_path,
                "episode_id": ep.id,
                "session_ids": [s.id for s in ep.sessions[:t]],
                "session_dates": [s.date for s in ep.sessions[:t]],
            },
            "model": b.model.spec,
            "prompt_hash": b.prompt_hash,
            "tokens": {
                "prompt": sum(c["prompt_tokens"] for c in calls),
                "completion": sum(c["completion_tokens"] for c in calls),
            },
            "calls": list(calls),
            "created_at": now_iso(),
        }


@dataclass
class Output:
    """The build's files in DIR, held for the whole build: the lock, the call cache, the row files."""

    lock_file: IO[str]
    cache: CallCache
    rows: RowFile
    rejects: RowFile

    @classmethod
    def open(cls, out_dir: Path) -> Output:
        """Open (creating) DIR's files; a folder that cannot hold them is one StorageError, as for --db."""
        if out_dir.exists() and not out_dir.is_dir():
            raise InputError(f"--out {out_dir} is a file; give a folder (created if missing)")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            lock_file = _lock(out_dir)
        except OSError as exc:  # the Store's diagnosis: read-only, full disk, ...
            raise storage_error(str(out_dir / ".lock"), exc, "--out") from None
        try:
            return cls(
                lock_file,
                CallCache(out_dir / "calls.sqlite"),
                RowFile(out_dir / "dataset.jsonl"),
                RowFile(out_dir / "rejects.jsonl"),
            )
        except (sqlite3.Error, OSError) as exc:
            lock_file.close()
            failed = exc.filename if isinstance(exc, OSError) and exc.filename else out_dir / "calls.sqlite"
            raise storage_error(str(failed), exc, "--out") from None
        except BaseException:
            lock_file.close()
            raise

    def close(self) -> None:
        self.cache.close()
        self.rows.close()
        self.rejects.close()
        self.lock_file.close()


class DatasetBuilder:
    """Builds dataset.jsonl / rejects.jsonl in `config.out_dir` from episodes with one chat model."""

    def __init__(
        self, model: ChatModel, config: BuildConfig, *, timeout_s: float = 120.0, output: Output | None = None
    ):
        self.model, self.config, self.timeout_s = model, config, timeout_s
        self.system = render("update_system")
        self.prompt_hash = Steps.prompt_hash()
        self.output = output or Output.open(config.out_dir)
        self.cache, self.rows, self.rejects = self.output.cache, self.output.rows, self.output.rejects
        self.done = self.rows.keys | self.rejects.keys
        self.stats = BuildStats()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.bar: Any = None

    def record(self, result: CallResult) -> None:
        with self.lock:
            s = self.stats
            s.calls += 1
            s.cached_calls += result.cached
            s.prompt_tokens += result.prompt_tokens
            s.completion_tokens += result.completion_tokens
            s.new_tokens += 0 if result.cached else result.prompt_tokens + result.completion_tokens
            s.cost = s.new_tokens / 1000 * self.config.price_per_1k_tokens
            if self.bar is not None:
                self.bar.set_postfix_str(
                    f"calls={s.calls} cached={s.cached_calls} tok={s.new_tokens:,} ${s.cost:.2f}", refresh=False
                )

    def step_done(self, n: int = 1, already: bool = False) -> None:
        with self.lock:
            self.stats.steps += n
            self.stats.already_done += n if already else 0
            if self.bar is not None:
                self.bar.update(n)

    def accept(self, row: dict[str, Any]) -> None:
        if self.rows.write(row):
            with self.lock:
                self.stats.rows += 1
        self.step_done()

    def reject(self, row: dict[str, Any], reason: str) -> None:
        if self.rejects.write({**row, "reason": reason}):
            with self.lock:
                self.stats.rejects += 1
        self.step_done()

    def _manifest(self, episodes: list[Episode]) -> None:
        """Refuse to mix runs: an out dir built with another model or prompts must not be resumed."""
        path = self.config.out_dir / "run.json"
        current = {
            "model": self.model.spec,
            "prompt_hash": self.prompt_hash,
            "format": self.config.source_format,
            "input": self.config.source_path,
            "guard": self.config.guard,
        }
        if path.exists():
            old = read_json(path, if_invalid="delete it to start over, or use a new --out directory")
            if not isinstance(old, dict):
                raise InputError(f"{path} is not a build record; delete it to start over, or use a new --out")
            for k in ("model", "prompt_hash", "guard"):
                if old.get(k) != current[k]:
                    raise InputError(
                        f"{self.config.out_dir} holds a build with {k} {old.get(k)!r}, not "
                        f"{current[k]!r}; use a new --out directory, or the same {k} to resume"
                    )
        path.write_text(
            json.dumps({**current, "updated_at": now_iso(), "episodes": len(episodes)}, ensure_ascii=False, indent=2),
            encoding="utf-8",
        )

    def _episode(self, episode: Episode) -> None:
        """One episode; a model error (after the backend's retries) is recorded and ends only this episode."""
        try:
            EpisodeRunner(self, episode).run()
        except KeemError as exc:
            with self.lock:
                self.stats.errors.append(f"episode {episode.id}: {exc}")

    def run(self, episodes: Iterable[Episode]) -> BuildStats:
        """Process the episodes (the first `limit`); per-episode model errors are collected, not raised."""
        episodes = list(episodes)[: self.config.limit] if self.config.limit else list(episodes)
        self._manifest(episodes)
        total_steps = sum(max(len(e.sessions) - 1, 0) for e in episodes)
        self.stats.episodes = len(episodes)
        started = time.perf_counter()
        if self.config.progress:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, unit="step", desc="build-dataset", dynamic_ncols=True)
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.config.concurrency)) as pool:
                futures = [pool.submit(self._episode, ep) for ep in episodes]
                try:
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    for future in done:  # only a fatal error (not a model error) ends the wait early
                        if future.exception() is not None:
                            raise future.exception()  # type: ignore[misc]
                except BaseException:  # Ctrl-C or a fatal error: running episodes stop at their next call
                    self.stopping.set()
                    for future in futures:
                        future.cancel()
                    raise
        finally:
            self.stats.seconds = time.perf_counter() - started
            if self.bar is not None:
                self.bar.close()
            self.output.close()
        return self.stats


def build_dataset(
    episodes: Iterable[Episode],
    model: ChatModel,
    config: BuildConfig,
    timeout_s: float = 120.0,
    output: Output | None = None,
) -> BuildStats:
    """Build (or resume) a KEEM-style dataset in config.out_dir; see the module docstring. `output`: its files,
    when the caller opened them first (`Output.open`: before a model loads)."""
    return DatasetBuilder(model, config, timeout_s=timeout_s, output=output).run(episodes)


# -- human review export ---------------------------------------------------------------------------
REVIEW_COLUMNS = [
    "key",
    "episode_id",
    "session_index",
    "updated",
    "previous_memory",
    "reflected_summary",
    "memory",
    "error (0/1)",
    "error_type",
    "notes",
]


def write_review(out_dir: Path, n: int, seed: int = 0) -> Path:
    """A CSV of `n` rows to score by hand: spread evenly over session steps, real updates first within each
    (an update: the memory is not just previous memory + reflected summary), in a seeded random order."""
    path = out_dir / "dataset.jsonl"
    rows = read_jsonl(path, if_invalid="delete that line, or the file, and build again") if path.exists() else []
    if not rows:
        raise InputError(f"{path} has no rows to review yet; build the dataset first")
    rng = random.Random(seed)
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        row["updated"] = set(row["memory"]) != set(row["previous_memory"]) | set(row["reflected_summary"])
        by_step.setdefault(row["session_index"], []).append(row)
    queues = []
    for step in sorted(by_step):
        group = by_step[step]
        rng.shuffle(group)
        queues.append(sorted(group, key=lambda r: not r["updated"]))
    sample: list[dict[str, Any]] = []
    while len(sample) < n and any(queues):
        for queue in queues:
            if queue and len(sample) < n:
                sample.append(queue.pop(0))
    sample.sort(key=lambda r: (r["session_index"], r["episode_id"]))
    out = out_dir / "review.csv"
    with out.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(REVIEW_COLUMNS)
        for r in sample:
            writer.writerow(
                [
                    r["key"],
                    r["episode_id"],
                    r["session_index"],
                    int(r["updated"]),
                    "\n".join(r["previous_memory"]),
                    "\n".join(r["reflected_summary"]),
                    "\n".join(r["memory"]),
                    "",
                    "",
                    "",
                ]
            )
    return out


def stats_json(stats: BuildStats) -> dict[str, Any]:
    return {**asdict(stats), "seconds": round(stats.seconds, 2), "cost": round(stats.cost, 4)}
