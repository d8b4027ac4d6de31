"""Runs memory-update jobs from the durable queue: one job in, one committed version (or an error) out."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

from memory.cues import CUES_PROMPT_HASH, CueWriter
from memory.engine import MemoryEngine
from memory.provenance import attach
from memory.store import Sentence, Version
from memory.store.queue import LEASE_S
from memory.text import to_date
from memory.updaters import UpdateInput, Updater, UpdateResult
from memory.updaters.steps import MAX_REFLECTED
from models.errors import JobTakenError, MemoryChangedError, describe

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 8  # 7 waits of 30 s doubling to 1,920 s: 63.5 minutes in all (RETRY_MAX_S caps longer runs)
RETRY_BASE_S = 30.0
RETRY_MAX_S = 3600.0
RECOMPUTES = 3  # an update that finds another update committed since its base is computed again this many times


def retry_delay(attempts: int) -> float:
    """Seconds before the next try of a job that failed `attempts` times: 30 s, doubling, at most an hour."""
    return min(RETRY_BASE_S * 2 ** max(attempts - 1, 0), RETRY_MAX_S)


@dataclass
class Computed:
    """What the model part of a job made: the strategy's result, cue words, and the details to store with them."""

    result: UpdateResult
    cues: dict[str, str]
    details: dict[str, Any]


Compute = Callable[[str, UpdateInput, Callable[[str], None]], Computed]  # (strategy, input, stage) -> Computed


class JobRunner:
    """Claims a job, runs its strategy, commits the result in one transaction; a failure leaves memory as it was.

    Its commit states the version the update was computed from: user edits since then are rebased under the
    update (theirs win); another update since then makes the job compute again from the latest version, up to
    RECOMPUTES times (memory/store/rebase.py).

    A job is leased to the process that runs it (memory/store/queue.py Queue.claim), so a second process on the same
    database never runs a live job, and a job committed twice makes one version. A failed job is retried after
    `retry_delay`; after `max_attempts` it is marked failed with its error, and `resume` (every start) or
    `keem jobs retry` puts it back.
    """

    def __init__(
        self,
        engine: MemoryEngine,
        updater_for: Callable[[str], Updater],
        max_attempts: int = MAX_ATTEMPTS,
        cue_writer: CueWriter | None = None,
        day: Callable[[str], date | None] = to_date,
        lease_s: float = LEASE_S,
    ):
        """`day`: the date of a stored (UTC) time where the user lives (chatbot/bot.py gives KEEM_TIMEZONE's), the
        date an update resolves "다음 주 화요일" against; the UTC date by default."""
        self.day = day
        self.lease_s = lease_s  # a claimed job's lease, renewed at every stage (KEEM_JOB_LEASE_S)
        self.engine = engine
        self.store = engine.store
        self.updater_for = updater_for
        self.max_attempts = max_attempts
        self.cue_writer = cue_writer

    def write_cues(self, previous: list[Sentence], sentences: list[Sentence]) -> tuple[dict[str, str], dict]:
        """Cue words for the sentences the previous version had none for; a failure costs the cues, never the update."""
        have = {s.text for s in previous if s.cues}
        todo = list(dict.fromkeys(s.text.strip() for s in sentences if s.text.strip() not in have))
        if self.cue_writer is None or not todo:
            return {}, {}
        problems: list[str] = []  # this job's, whatever other jobs the writer serves meanwhile
        try:
            cues = self.cue_writer.write(todo, problems)
        except Exception as exc:  # an optional extra: log it and commit the memory without new cues
            log.warning("memory cues failed: %s", exc)
            return {}, {"cues": {"asked": len(todo), "written": 0, "error": f"{type(exc).__name__}: {exc}"[:300]}}
        report = {"asked": len(todo), "written": len(cues), "prompt_hash": CUES_PROMPT_HASH}
        return cues, {"cues": {**report, **({"problems": problems} if problems else {})}}

    def start(self, job: dict) -> tuple[UpdateInput, int | None]:
        """What the job's update reads (the user's latest memory, the session's dialogue), and the number of that
        memory version: the base its commit states."""
        session = self.store.sessions.get(job["session_id"])
        previous = self.engine.current(job["user_id"])
        before = self.store.sessions.previous(job["user_id"], job["session_id"])
        inp = UpdateInput(
            previous=list(previous.sentences) if previous else [],
            dialogue=[{"role": t["role"], "text": t["text"]} for t in self.store.turns.of_session(job["session_id"])],
            session_date=self.day(session["started_at"]),  # type: ignore[arg-type]
            previous_date=self.day(before["started_at"]) if before else None,
            records=list(previous.records) if previous else [],
            session_id=job["session_id"],
        )
        return inp, previous.number if previous else None

    def calls(self, strategy: str, inp: UpdateInput) -> int:
        """The model calls `compute` makes for `inp` when its answers are good: the strategy's (Updater.calls), and
        with cue words one per MAX_PER_CALL sentences that have none: the most one session adds (MAX_REFLECTED);
        the others carry theirs."""
        calls = self.updater_for(strategy).calls(inp)
        if self.cue_writer is not None:
            calls += self.cue_writer.calls(MAX_REFLECTED)
        return calls

    def compute(self, strategy: str, inp: UpdateInput, stage: Callable[[str], None]) -> Computed:
        """The model part of a job, and nothing else (no database): the strategy's update, then cue words."""
        result = self.updater_for(strategy).update(inp, stage)
        cues: dict[str, str] = {}
        details = result.details
        if self.cue_writer is not None:
            stage("cues")
            cues, extra = self.write_cues(inp.previous, result.sentences)  # the version start() loaded
            details = {**details, **extra}
        return Computed(result, cues, details)

    def run(
        self, job_id: int | None = None, on_stage: Callable[[str], None] | None = None, compute: Compute | None = None
    ) -> Version | None:
        """Run one pending job (the given one, else the oldest). Returns the new version, or None.

        `compute` runs the model part in place of `self.compute` (on ZeroGPU, inside a GPU function,
        chatbot/deploy/zerogpu.py); claiming, stages and the commit stay here. Exceptions are recorded on the job
        (pending again after a backoff, up to `max_attempts`) and re-raised.
        """
        job = self.store.queue.claim(job_id, lease_s=self.lease_s)
        if job is None:
            return None

        owner = job["owner"]  # every write of this run checks the job is still this process's (a takeover)

        def stage(name: str) -> None:
            self.store.queue.set_stage(job["id"], name, self.lease_s, owner)
            if on_stage:
                on_stage(name)

        try:
            for attempt in range(RECOMPUTES + 1):
                inp, base = self.start(job)
                if not any(t["role"] == "user" for t in inp.dialogue):
                    self.store.queue.finish_without_version(job["id"], "skipped", owner)
                    return None
                done = (compute or self.compute)(job["strategy"], inp, stage)
                result, cues, details = done.result, done.cues, done.details
                sentences = attach(  # where each sentence came from (memory/provenance.py), stored with it
                    inp.previous,
                    result.sentences,
                    details=details,
                    status=result.status,
                    turns=self.store.turns.of_session(job["session_id"]),
                    session_id=job["session_id"],
                    embedder=self.engine.embedder,
                )
                try:
                    version = self.engine.commit(
                        job["user_id"],
                        sentences,
                        cues,
                        base=base,
                        strategy=job["strategy"],
                        status=result.status,
                        author="updater",
                        session_id=job["session_id"],
                        model_spec=result.model_spec,
                        prompt_hash=result.prompt_hash,
                        notes=result.notes,
                        details={**details, "recomputed": attempt} if attempt else details,
                        job_id=job["id"],
                        records=result.records,
                        owner=owner,
                    )
                    break
                except MemoryChangedError as exc:  # another update committed since `base`: compute on top of it
                    if attempt == RECOMPUTES:
                        raise
                    log.info("update job %s: %s; computing it again", job["id"], exc)
                    stage("recompute")
        except JobTakenError as exc:  # this process froze past its lease: the job's new owner carries it on
            log.warning("%s", exc)
            return None
        except Exception as exc:
            if self.record_failure(job, exc):
                if on_stage:
                    on_stage("failed")
                raise
            return None  # taken over meanwhile (or its user forgotten): the failure is this copy's, not the job's
        if on_stage:
            on_stage(version.status)
        return version

    def record_failure(self, job: dict[str, Any], exc: Exception) -> bool:
        """Record a failed attempt on the job (pending again after a backoff, failed for good after `max_attempts`);
        False, and nothing recorded, when the job stopped being this process's meanwhile."""
        retry = job["attempts"] < self.max_attempts
        if not self.store.queue.fail(
            job["id"],
            describe(exc)[:500],
            retry_in_s=retry_delay(job["attempts"]) if retry else None,
            owner=job["owner"],
        ):
            log.warning("update job %s failed after it stopped being this process's: %s", job["id"], exc)
            return False
        log.warning(
            "update job %s failed (attempt %s, %s): %s",
            job["id"],
            job["attempts"],
            "will retry" if retry else "giving up",
            exc,
        )
        return True

    def resume(self) -> int:
        """At a start: jobs a dead process left running, and jobs that failed for good, go back to pending (a job
        another live process runs stays its; one waiting in its backoff keeps its time). Returns how many wait."""
        self.store.queue.requeue_running()
        self.store.queue.retry(backoff=False)
        return len(self.store.queue.jobs(statuses=("pending",)))
