"""The background job worker: runs memory updates off the durable queue; ends idle sessions, and open ones on exit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime

from chatbot.bot import Chatbot
from chatbot.deploy import zerogpu
from chatbot.exports import Exports
from chatbot.session import ChatSession
from memory.backup import Backups
from memory.store.queue import owner_is_dead
from memory.store.users import FORGET_CHANNEL
from models.errors import UserForgottenError

log = logging.getLogger(__name__)


def pool_size(bot: Chatbot) -> int:
    """Update jobs run at once: KEEM_UPDATE_WORKERS, else 4 for a model behind a server (it serves calls in
    parallel) and 1 for a model in this process (one generation at a time is all it does well)."""
    if bot.settings.update_workers > 0:
        return bot.settings.update_workers
    return 4 if bot.update_model.spec.startswith("openai:") else 1


class Worker:
    """A daemon thread that hands pending update jobs to a small pool and watches live sessions for idleness.

    Jobs of different users run at once (`pool_size`), one user's jobs one at a time, in order, so a session's
    update never races the next one's.

    A job that fails goes back to pending with its retry time in the database (memory/jobs.py retry_delay: 30 s,
    doubling to 1,920 s, 63.5 minutes over its 8 attempts) and is retried here when that time comes, not in a hot loop.
    On ZeroGPU (chatbot/deploy/zerogpu.py) it runs no jobs (`run_jobs` is False): each user's own events run them.
    With KEEM_BACKUP_DIR set it also snapshots the database there every KEEM_BACKUP_EVERY_MIN when something
    changed, at once after a forget or a sentence's erasure (dropping the snapshots that still hold the text), and at
    shutdown.
    """

    def __init__(
        self,
        bot: Chatbot,
        *,
        idle_timeout_s: float | None = None,
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        run_jobs: bool | None = None,
        shared: bool | None = None,
    ):
        """`run_jobs`: whether this process runs update jobs (default: KEEM_WORKER=on, and not on ZeroGPU).
        `shared`: other app processes keep open sessions in this store (default: KEEM_WORKER=off, a deployment
        of several processes, docs/scaling.md); a start then ends only the open sessions idle past the timeout,
        not every open one, and a worker running jobs ends such abandoned sessions as it goes."""
        self.bot = bot
        self.store = bot.store
        self.idle_timeout_s = (bot.settings.idle_timeout_min * 60.0) if idle_timeout_s is None else idle_timeout_s
        self.poll_s = poll_s
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._live: dict[int, tuple[ChatSession, float]] = {}  # session_id -> (session, last activity)
        self._generation: int | None = None  # the store's forget count when _live was last checked
        self._evicted: int | None = None  # the forget count when evict_forgotten last looked
        self._thread: threading.Thread | None = None
        self.pool = ThreadPoolExecutor(max_workers=pool_size(bot), thread_name_prefix="keem-update")
        self._running: dict[int, tuple[int, Future]] = {}  # job id -> (user id, its run)
        settings = bot.settings
        self.backups = Backups(settings.backup_dir) if settings.backup_dir else None
        self.backup_every_s = settings.backup_every_min * 60.0
        self._backed_up: tuple[int, int] | None = None  # (store changes, erasures) at the last snapshot
        self._backed_up_at = self.clock()
        # on ZeroGPU a model runs only inside a GPU function a user's event calls: jobs run there, not here
        self.run_jobs = (settings.worker == "on" and not zerogpu.active()) if run_jobs is None else run_jobs
        self.shared = (settings.worker == "off") if shared is None else shared
        self._swept_at: float | None = None  # when abandoned sessions were last looked for (shared)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> Worker:
        """Recover what a crash or shutdown left (running jobs, open sessions), then start the thread (and, on
        Postgres, the one that hears other processes' forgets)."""
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="keem-worker", daemon=True)
        self._thread.start()
        if self.store.dialect == "postgres":
            threading.Thread(target=self._hear_forgets, name="keem-listen", daemon=True).start()
        return self

    def recover(self) -> int:
        """Jobs left running go back to pending; sessions left open get ended and enqueued. Returns jobs waiting."""
        self.bot.runner.resume()
        self.end_abandoned("restart")
        return len(self.store.queue.jobs(statuses=("pending",)))

    def end_abandoned(self, reason: str = "idle", *, only_api: bool = False) -> list[int]:
        """End the open sessions no one here watches, and queue their updates: every one (alone on the store, at a
        start: what a crash left), or (`shared`) the ones silent past the idle timeout, whose process would have
        ended them had it been alive. An API conversation belongs to the store, not to a process (any process
        goes on with it, a restart keeps it): it ends only when silent past the idle timeout. `only_api`: only
        those. Returns their session ids."""
        now, ended = time.time(), []
        api = self.store.api.sessions()
        for row in self.store.sessions.all_open():
            with self._lock:
                if row["id"] in self._live:
                    continue
            if only_api and row["id"] not in api:
                continue
            turns = self.store.turns.of_session(row["id"])
            if self.shared or row["id"] in api:
                last = max([row["started_at"], *(t["created_at"] for t in turns)])
                if now - datetime.fromisoformat(last).timestamp() < self.idle_timeout_s:
                    continue
            with self.store.write():  # ended and queued once, though every process's worker sweeps
                if not self.store.sessions.end(row["id"], reason):
                    continue
                if any(t["role"] == "user" for t in turns):
                    self.store.queue.enqueue(row["user_id"], row["id"], row["strategy"])
            ended.append(row["id"])
        return ended

    def stop(self, *, end_open: bool = True, timeout: float = 5.0, grace_s: float = 0.0) -> list[int]:
        """End every live session (reason 'shutdown'; its job runs at the next start) and stop the thread; the
        jobs already running get `grace_s` to finish. A job still running then goes back to pending (Queue.release),
        for the next worker to take at once, here or on another machine; its copy here writes nothing more."""
        self._stop.set()  # first, so the jobs the shutdown enqueues wait for the next start
        job_ids = []
        if end_open:
            api = self._api_sessions()  # an API conversation outlives the process: another one goes on with it
            with self._lock:
                live = [s for s, _ in self._live.values() if s.session_id not in api]
                self._live.clear()
            for session in live:
                job_id = self._end(session, "shutdown")
                if job_id is not None:
                    job_ids.append(job_id)
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.pool.shutdown(wait=False, cancel_futures=True)  # jobs not started stay pending for the next start
        if grace_s > 0:
            with self._lock:
                running = [f for _, f in self._running.values()]
            wait(running, timeout=grace_s)
        with self._lock:
            unfinished = [job_id for job_id, (_, f) in self._running.items() if not f.done()]
        released = []
        for job_id in unfinished:
            try:
                if self.store.queue.release(job_id):
                    released.append(job_id)
            except Exception as exc:  # the store is out of reach: the job's lease frees it later
                log.warning("could not release update job %s at shutdown: %s", job_id, exc)
        if released:
            log.info("update job(s) %s not finished at shutdown: pending again, for the next worker", released)
        self.backup(force=True)
        self.store.checkpoint()  # a clean shutdown leaves the WAL empty: no erased text waits in it
        return job_ids

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- sessions ---------------------------------------------------------------------------------
    def track(self, session: ChatSession) -> None:
        """Watch a session for idleness (and end it at shutdown)."""
        with self._lock:
            self._live[session.session_id] = (session, self.clock())

    def watching(self) -> list[int]:
        """The ids of the live sessions this worker watches for idleness."""
        with self._lock:
            return list(self._live)

    def touch(self, session: ChatSession) -> None:
        self.track(session)

    def end(self, session: ChatSession, reason: str = "user") -> int | None:
        """End a session now and queue its update; returns at once with the job id (None when nothing was said).

        A storage error is raised (the session stays open and watched), so the page can tell the truth."""
        job_id = session.end(reason)
        with self._lock:
            self._live.pop(session.session_id, None)
        if job_id is not None:
            self._wake.set()
        return job_id

    def drop_forgotten(self) -> list[int]:
        """Stop watching the sessions of users forgotten since the last look, by this or any other process (the
        store's forget counter moved): nothing is ended or queued for them, and their turns leave this process's
        memory. Returns the session ids dropped."""
        generation = self.store.users.generation()
        if generation == self._generation:
            return []
        with self._lock:
            ids = list(self._live)
        alive = self.store.sessions.existing(ids)
        gone = []
        with self._lock:
            for session_id in ids:
                if session_id not in alive and session_id in self._live:
                    session, _ = self._live.pop(session_id)
                    session.ended = True
                    session.history.clear()
                    gone.append(session_id)
        self._generation = generation
        return gone

    def _end(self, session: ChatSession, reason: str) -> int | None:
        try:
            job_id = session.end(reason)
        except UserForgottenError:  # forgotten meanwhile: nothing to end or update
            return None
        except Exception:  # the database went away under us: nothing more to do here
            log.exception("ending session %s failed", session.session_id)
            return None
        if job_id is not None:
            self._wake.set()
        return job_id

    def end_idle(self) -> list[int]:
        """End sessions idle longer than the timeout; returns their session ids. An API conversation another
        process went on with since (or ended) is only let go here: it is that process's to watch now."""
        self.drop_forgotten()
        now = self.clock()
        with self._lock:
            idle = [s for s, seen in self._live.values() if now - seen >= self.idle_timeout_s]
            for s in idle:
                self._live.pop(s.session_id, None)
        api = self._api_sessions() if idle else set()
        ended = []
        for s in idle:
            known = max(i for i in (s.replying_to, s.last_reply, s.stored_reply, 0) if i is not None)
            if s.session_id in api and self.store.api.went_on(s.session_id, known):
                continue
            self._end(s, "idle")
            ended.append(s.session_id)
        return ended

    def _api_sessions(self) -> set[int]:
        try:
            return self.store.api.sessions()
        except Exception:  # the database went away under us: treat every session as this process's
            log.exception("reading the open API conversations failed")
            return set()

    # -- jobs -------------------------------------------------------------------------------------
    def notify(self) -> None:
        self._wake.set()

    def take_over(self) -> int:
        """Running jobs another worker left (its lease ran out, or its pid on this host is dead: a `kill -9`, a
        crash) go back to pending for any worker to take; a live worker's job is left alone. One read when none."""
        now = time.time()
        with self._lock:
            mine = set(self._running)
        stale = [
            job
            for job in self.store.queue.jobs(statuses=("running",))
            if job["id"] not in mine and ((job["lease_until"] or 0) < now or owner_is_dead(job["owner"]))
        ]
        if not stale:
            return 0
        taken = self.store.queue.requeue_running()
        log.info("took over %d update job(s) whose worker is gone: %s", taken, [j["id"] for j in stale])
        return taken

    def dispatch(self) -> int:
        """Hand every pending job whose retry time has come to the pool, at most one per user at a time and at
        most one try per job per call (after taking over the jobs of workers that are gone); returns how many were
        handed over."""
        now, handed = time.time(), 0
        with self._lock:
            for done in [j for j, (_, f) in self._running.items() if f.done()]:
                del self._running[done]
            busy = {user for user, _ in self._running.values()}
        self.take_over()
        for job in self.store.queue.jobs(statuses=("pending",)):
            if self._stop.is_set() or (job["next_attempt_at"] or 0) > now or job["user_id"] in busy:
                continue
            with self._lock:
                if job["id"] in self._running:
                    continue
                busy.add(job["user_id"])
                self._running[job["id"]] = (job["user_id"], self.pool.submit(self._run, job["id"]))
            handed += 1
        return handed

    def _run(self, job_id: int) -> None:
        try:
            self.bot.run_update(job_id)
        except Exception as exc:  # recorded on the job by the runner (pending again unless out of attempts)
            job = self.store.one("select attempts from update_jobs where id = ?", [job_id])
            if job is None:  # its user was forgotten while it ran: the job went with them, and no version was made
                log.info("memory update job %s stopped: its user was forgotten meanwhile", job_id)
            else:
                log.warning("memory update job %s failed (attempt %s): %s", job_id, job["attempts"], exc)
        finally:
            self._wake.set()  # the next of this user's jobs may go now

    def run_pending(self) -> int:
        """Run the pending jobs whose time has come and wait for them (each at most once per call); returns how many
        were run."""
        ran, tried = 0, set()
        while not self._stop.is_set():
            before = set(self._running)
            handed = self.dispatch()
            new = [f for j, (_, f) in list(self._running.items()) if j not in before and j not in tried]
            tried |= set(self._running) - before
            for future in new:
                future.result()
            ran += len(new)
            if not handed:
                break
        return ran

    # -- backups ----------------------------------------------------------------------------------
    def backup(self, force: bool = False) -> bool:
        """Snapshot the database when it changed and a snapshot is due (or forced), or a user was forgotten."""
        if self.backups is None:
            return False
        erasures = self.store.users.forgotten + self.store.erasure.sentences_erased
        state = (self.store.changes, erasures)
        if state == self._backed_up:
            return False
        forgot = state[1] != (self._backed_up[1] if self._backed_up else 0)
        if not (force or forgot or self._backed_up is None or self.clock() - self._backed_up_at >= self.backup_every_s):
            return False
        try:
            # another process sharing the database (keem serve) may have taken this interval's snapshot already
            periodic = not (force or forgot or self._backed_up is None)
            made = self.backups.snapshot(
                self.store, drop_older=forgot, unless_within_s=self.backup_every_s if periodic else None
            )
        except Exception:  # a full or vanished volume must not stop chat; the next tick tries again
            log.exception("backup to %s failed", self.backups.folder)
            return False
        if made is None:  # skipped: this process's changes go into the next interval's snapshot
            self._backed_up_at = self.clock()
            return False
        self._backed_up, self._backed_up_at = state, self.clock()
        return True

    def _hear_forgets(self) -> None:
        """LISTEN for forgets in any process (memory/store/users.py FORGET_CHANNEL) and wake the loop, whose
        `evict_forgotten` then drops the user from this process's memory within milliseconds instead of at the next
        tick. A hint only: a notification missed while reconnecting is caught by the tick's forget-counter check."""
        while not self._stop.is_set():
            try:
                listening = self.store.listen([FORGET_CHANNEL], timeout=1.0, running=lambda: not self._stop.is_set())
                for _channel, _user in listening:
                    self._wake.set()
                    if self._stop.is_set():
                        return
            except Exception as exc:  # the server restarting, the connection cut: listen again shortly
                # one line, no traceback: an expected interruption, not a fault (the tick's check covers the gap)
                log.warning("listening for forgets failed (%s: %s); retrying in 5 s", type(exc).__name__, exc)
                self._stop.wait(5.0)

    def evict_forgotten(self) -> None:
        """Drop what this process holds of users forgotten by any process: their live sessions, their cached search
        indexes, and this process's export zips, which may hold them (a forget run elsewhere, `keem memory forget`
        from a shell with another GRADIO_TEMP_DIR, cannot see them: chatbot/exports.py). One small query when
        nothing changed."""
        generation = self.store.users.generation()
        if generation == self._evicted:
            return
        self.drop_forgotten()
        self.bot.engine.sweep()
        if self._evicted is not None:
            Exports().remove_all()
        self._evicted = generation

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.evict_forgotten()
                if self.run_jobs:
                    self.dispatch()
                    if self._swept_at is None or self.clock() - self._swept_at >= 60.0:
                        self._swept_at = self.clock()
                        self.end_abandoned(only_api=not self.shared)  # API conversations silent past the timeout
                        self.store.tokens.prune_rates(time.time())  # API rate counters whose bucket is full again
                self.end_idle()
                self.backup()
            except Exception:  # never let the worker die; the next tick tries again
                log.exception("worker tick failed")
            self._wake.wait(self.poll_s)
            self._wake.clear()
