"""N simultaneous users against the real app (`python app.py`, its own process) and a loopback model server.

Each user logs in under their own name, has S sessions of T turns (send, then the reply streams), ends each
session and waits (following it as the page does, with one `watch` event held open) until its memory update is
done, then starts the next
session. The users are driven through the app's Gradio server exactly as the page drives it (queue/join and the
SSE stream, `/run/predict` for the unqueued "end session"), one thread and one Gradio session per user, no
browser (20 Chromium contexts alone load these 2 cores); so the Gradio queue, its concurrency limits, the
server-side state and the job worker are all the real ones. Chat and update model: `openai:` against
tests/fake_openai.py with `--latency` per call, so updates run in a pool of KEEM_UPDATE_WORKERS.

Measured per `--workers` setting (fresh database, fresh app): login time (the N logins at once, and a probe that
logs in a new name every `--probe-every` s while the others chat), reply latency (send to the reply's last
frame), update wait (end session to the page's `watch` event bringing the memory tab; the API's users poll
their job every `--poll` s), turns sent vs stored in the database once the app has stopped (lost turns), missing
replies, leaks (any frame, poll or memory panel a user sees, or a final memory, holding another user's marker
word), errors in the app's log, CPU seconds, wall time. The users start once the app has answered a first login
and then three in a row in under 1 s (its start-up work is over; reported as "settled").

    python benchmarks/load.py                                  # 20 users x 3 sessions x 3 turns, workers 1 and 4
    python benchmarks/load.py --users 5 --sessions 1 --turns 2 --workers 4 --json
    python benchmarks/load.py --users 20,40,80,160 --workers 4   # capacity: a 1-user row, then each size; the knee
    python benchmarks/load.py --processes 1,2 --users 40         # 1, then 2 app processes behind HAProxy
    python benchmarks/load.py --front api --processes 1,2 --users 40   # the same users through the HTTP API

With `--processes` each row is `keem serve --processes N --workers M` (N app processes without their own worker,
`--update-processes` M `keem worker`s, HAProxy with cookie stickiness, under supervisord: docs/scaling.md), the same
users driven through HAProxy (each user's client keeps HAProxy's cookie, as a browser does); app CPU and RSS are the
app processes' together.

With `--front api` each user is a builder's bot on the HTTP API (docs/api.md) instead: its own bearer token (made in
the store before the app starts, as `keem token create --user NAME` makes one), each message sent with the
session's conversation so far as the openai client sends it, streamed (reply latency: send to the last chunk) and
with an `Idempotency-Key` of its own (as the openai client retries, a 429 or 503 is sent again after its
Retry-After, and a request whose connection failed before any answer after 0.5 s, with the same key); each
session ends with `POST /v1/sessions/end` and `GET /v1/jobs/{id}?wait=30` waits for the update (`--job-wait 0`:
polled every `--poll` s but at least 0.5 s, the API allowing 120 requests a minute per user), then `GET /v1/memory`
is read. The
same counts (lost turns in the store, leaks in every answer, job and memory and in the final memories, errors in
the logs, CPU); login times are the page's only (the prober still logs in on the page). Through HAProxy its
requests go to the `api` backend, which hashes the Authorization header: the rows say how many callers each app
process answered (`X-Keem-Process`) and how many were answered by more than one. `--front page,api` runs a row of
each.

The users start together, so the first session's turns come from all of them at once; later sessions are spread by
the update waits between them. Each row gives the reply p95 of each session apart. `--pg URL` puts each row's store
in a throwaway schema of that Postgres database instead of a new SQLite file:

    pg_virtualenv bash -c 'python benchmarks/load.py --front api --processes 1,2 --users 40 \
        --pg "postgresql://$PGUSER:$PGPASSWORD@$PGHOST:$PGPORT/postgres"'
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.store_writes import PostgresSchema  # noqa: E402
from models.fake import section, stage_of  # noqa: E402
from tests.fake_openai import FakeOpenAIServer  # noqa: E402
from tests.procs import free_block  # noqa: E402

TOPICS = [
    "부산으로 이사한",
    "테니스를 시작한",
    "고양이가 아픈",
    "시험에 붙은",
    "제주도에 다녀온",
    "카페를 연",
    "마라톤을 뛴",
    "요리를 배운",
    "딸이 걸음마를 뗀",
]


def marker(user: int) -> str:
    """A word only this user ever types (ends in 호, so no marker is a prefix of another)."""
    return f"표식{user:03d}호"


def reply(body: dict[str, Any]) -> str:
    """A model that does every stage's job: summaries state what the user said, updates keep every old sentence
    and add the new ones, checks pass; chat echoes the user's message (so a reply sent to the wrong user leaks)."""
    messages = body["messages"]
    prompt = str(messages[-1]["content"])
    stage = stage_of(prompt) or "chat"
    if stage == "summarize":
        users = [
            line[4:].strip() for line in prompt.rsplit("\n대화 (", 1)[-1].splitlines() if line.startswith("사용자:")
        ]
        return "\n".join(f"사용자는 '{u[:60]}'라고 말했다." for u in users) or "사용자는 인사했다."
    if stage == "reflect":
        return "\n".join(section(prompt, "\n요약:\n", "\n답:"))
    if stage == "update":
        return "\n".join(
            dict.fromkeys(
                section(prompt, "\n이전 기억:\n", "\n이번 요약:") + section(prompt, "\n이번 요약:\n", "\n새 기억:")
            )
        )
    if stage == "verify":
        return "통과"
    if stage in ("guard", "operations", "cues"):
        return {"guard": "아니오", "operations": "APPEND", "cues": ""}[stage]
    said = next((str(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")
    return f"네, 잘 들었어요: {said[:60]} 그 이야기를 더 들려줄래요? 요즘 기분은 어때요?"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def rows(store: Any, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """A query's rows as tuples, through the store's API (whichever database KEEM_DB names)."""
    return [tuple(r.values()) for r in store.rows(sql, params or [])]


# -- the app, in its own process --------------------------------------------------------------------
class App:
    """`python app.py` on a free port with an openai: model at the loopback server; its log goes to a file."""

    def __init__(self, db: str, log: Path, model_url: str, workers: int, embedder: str):
        self.port = free_block(1)
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {
            **os.environ,
            "GRADIO_ANALYTICS_ENABLED": "False",
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": "k",
            "KEEM_UPDATE_WORKERS": str(workers),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        for name in (
            "KEEM_MODEL",
            "KEEM_UPDATE_MODEL",
            "KEEM_DB",
            "KEEM_HOST",
            "KEEM_PORT",
            "KEEM_BACKUP_DIR",
            "KEEM_AUTH",
            "KEEM_IDENTITY",
            "KEEM_STRATEGY",
            "KEEM_STUDY",
        ):
            env.pop(name, None)
        self.log, self._log_file = log, log.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "app.py"),
                "--db",
                str(db),
                "--model",
                "openai:fake",
                "--embedder",
                embedder,
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.fns: dict[str, int] = {}

    def settle(self, limit_s: float = 60.0) -> tuple[float, float]:
        """Log in new names every 0.5 s until three in a row take under 1 s (the app's start-up work, such as
        warming Kiwi, is over); returns (seconds it took, the slowest of those logins)."""
        started, fast, slowest, k = time.perf_counter(), 0, 0.0, 0
        while fast < 3 and time.perf_counter() - started < limit_s:
            client, k = Client(self), k + 1
            began = time.perf_counter()
            client.event("login", [f"settle{k:02d}"])
            took = time.perf_counter() - began
            client.close()
            slowest, fast = max(slowest, took), (fast + 1 if took < 1.0 else 0)
            time.sleep(0.5)
        return time.perf_counter() - started, slowest

    def wait_ready(self, limit_s: float = 120.0) -> float:
        """Seconds until the page serves and a login succeeds (the models are loaded)."""
        started = time.perf_counter()
        while time.perf_counter() - started < limit_s:
            if self.proc.poll() is not None:
                raise SystemExit(f"app.py exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                config = httpx.get(self.url + "config", timeout=2).json()
                self.fns = {
                    d["api_name"]: d.get("id", i) for i, d in enumerate(config["dependencies"]) if d.get("api_name")
                }
                out = Client(self).event("login", ["warmup"])
                if out.ok and "warmup" in json.dumps(out.data, ensure_ascii=False):
                    return time.perf_counter() - started
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        self.stop()
        raise SystemExit(f"app.py was not ready within {limit_s:.0f} s:\n{self.log.read_text()[-3000:]}")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the app process has used so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_peak_mb(self) -> float:
        """The app process's peak resident memory so far, MB (Linux /proc VmHWM)."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the app ends open sessions and stops its worker
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


class Cluster(App):
    """`keem serve --processes N --workers M` on a free port: N app processes, M update workers and HAProxy under
    supervisord; `url` is HAProxy's."""

    def __init__(self, db: str, log: Path, model_url: str, workers: int, embedder: str, processes: int, updaters: int):
        # HAProxy's port and the next `processes` (the apps'), below the ephemeral range: the users' connections
        # took one of them between a check and keem serve's bind
        self.port, self.processes = free_block(processes + 1), processes
        self.url = f"http://127.0.0.1:{self.port}/"
        self.run_dir = log.parent / f"run-{log.stem}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEM_", "OPENAI_", "SPACE", "OAUTH_"))}
        env.update(
            GRADIO_ANALYTICS_ENABLED="False",
            OPENAI_BASE_URL=model_url,
            OPENAI_API_KEY="k",
            KEEM_UPDATE_WORKERS=str(workers),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
        )
        self.log, self._log_file = log, log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chatbot.cli.main", "serve", "--processes", str(processes), "--workers"]
            + [str(updaters), "--port", str(self.port), "--run-dir", str(self.run_dir), "--db", str(db)]
            + ["--model", "openai:fake", "--embedder", embedder],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.fns = {}

    def wait_ready(self, limit_s: float = 180.0) -> float:
        """Seconds until every app process serves its page through HAProxy and a login succeeds."""
        started = time.perf_counter()
        for i in range(1, self.processes + 1):
            while True:
                if self.proc.poll() is not None or time.perf_counter() - started > limit_s:
                    self.stop()
                    raise SystemExit(f"keem serve did not come up:\n{self.log.read_text()[-3000:]}")
                try:
                    if httpx.get(self.url + "config", cookies={"keem_proc": f"app{i}"}, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.3)
        ready = super().wait_ready(max(1.0, limit_s - (time.perf_counter() - started)))
        for log in (self.run_dir / "logs").glob("worker*.log"):  # and the update workers have loaded their models
            while "running memory updates" not in log.read_text(errors="replace"):
                if time.perf_counter() - started > limit_s:
                    self.stop()
                    raise SystemExit(f"keem worker did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
        return ready

    def _apps(self) -> list[Any]:
        import psutil

        try:
            return [
                p
                for p in psutil.Process(self.proc.pid).children(recursive=True)
                if " chat " in " ".join(p.cmdline()) + " "
            ]
        except psutil.Error:
            return []

    def cpu_s(self) -> float:
        total = 0.0
        for p in self._apps():
            try:
                times = p.cpu_times()
                total += times.user + times.system
            except Exception:
                pass
        return total

    def rss_peak_mb(self) -> float:
        """The largest app process's peak resident memory, MB."""
        peaks = []
        for p in self._apps():
            try:
                for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks.append(int(line.split()[1]) / 1024)
            except OSError:
                pass
        return max(peaks, default=float("nan"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # supervisord stops the apps (ending open sessions) and workers
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        for app_log in sorted((self.run_dir / "logs").glob("*.log")):  # the apps' and workers' logs, for the checks
            self.log.open("a", encoding="utf-8").write(app_log.read_text(encoding="utf-8", errors="replace"))


class Result:
    def __init__(self, messages: list[dict[str, Any]], text: str):
        self.messages, self.text = messages, text
        done = next((m for m in messages if m.get("msg") == "process_completed"), None)
        self.ok = bool(done and done.get("success"))
        self.data = (done or {}).get("output", {}).get("data")


class Client:
    """One browser tab, spoken as Gradio's page speaks: one session hash, events joined to the queue."""

    def __init__(self, app: App):
        self.app = app
        self.session_hash = uuid.uuid4().hex
        self.http = httpx.Client(base_url=app.url, timeout=120)

    def body(self, name: str, data: list[Any]) -> dict[str, Any]:
        """What the page posts to run an event (queued or not)."""
        fn = self.app.fns[name]
        return {"data": data, "fn_index": fn, "session_hash": self.session_hash, "event_data": None, "trigger_id": None}

    def event(self, name: str, data: list[Any]) -> Result:
        """Run a queued event; returns every SSE message (the frames the page would render)."""
        joined = self.http.post(
            "gradio_api/queue/join",
            json=self.body(name, data),
        )
        joined.raise_for_status()
        messages: list[dict[str, Any]] = []
        with self.http.stream("GET", "gradio_api/queue/data", params={"session_hash": self.session_hash}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    messages.append(msg)
                    if msg.get("msg") in ("process_completed", "close_stream", "unexpected_error"):
                        break
        return Result(messages, json.dumps(messages, ensure_ascii=False))

    def direct(self, name: str, data: list[Any]) -> Result:
        """An unqueued event (queue=False), posted as the page posts it."""
        answer = self.http.post(
            "gradio_api/run/predict",
            json=self.body(name, data),
        )
        body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        msg = {"msg": "process_completed", "success": answer.status_code == 200, "output": body}
        return Result([msg], json.dumps(body, ensure_ascii=False))

    def close(self) -> None:
        self.http.close()


# -- the users --------------------------------------------------------------------------------------
def user_name(index: int) -> str:
    return f"user{index:02d}"


class User(threading.Thread):
    """A user on the page: logs in, sends, reads the streamed reply, ends each session and follows its update with
    the page's `watch` event (one event held open, a frame per change) until it is done (see ApiUser for the same
    user through the HTTP API)."""

    def __init__(self, index: int, app: App, args: argparse.Namespace, start: threading.Barrier):
        super().__init__(name=user_name(index), daemon=True)
        self.index, self.app, self.args, self.start_line = index, app, args, start
        self.name_ = user_name(index)
        self.mark = marker(index)
        self.login_s: float | None = None
        self.reply_s: list[float] = []
        self.update_s: list[float] = []
        self.end_s: list[float] = []
        self.sent: list[str] = []
        self.seen: list[str] = []  # every answer's text, scanned for other users' markers afterwards
        self.failures: list[str] = []
        self.frames = 0  # reply frames streamed to this user
        self.polls = 0  # update events (the page's watch frames, or the API's job requests)

    def look(self, result: Result, what: str) -> Result:
        self.seen.append(result.text)
        if not result.ok:
            self.failures.append(f"{what}: {result.text[-300:]}")
        return result

    def says(self, session: int, turn: int) -> str:
        """The user's message in a session's turn: their marker, then a topic of theirs."""
        return (
            f"{self.mark} {session + 1}번째 대화 {turn + 1}번째 이야기: 나 요즘 "
            f"{TOPICS[(self.index + session * 3 + turn) % len(TOPICS)]} 일로 정신이 없어."
        )

    def run(self) -> None:
        client = Client(self.app)
        try:
            self.start_line.wait()
            started = time.perf_counter()
            out = self.look(client.event("login", [self.name_]), "login")
            self.login_s = time.perf_counter() - started
            if self.name_ not in json.dumps(out.data, ensure_ascii=False):
                self.failures.append("login: the greeting does not name the user")
                return
            for s in range(self.args.sessions):
                if s:
                    self.look(client.event("new_session", [None]), "new session")
                for t in range(self.args.turns):
                    text = self.says(s, t)
                    started = time.perf_counter()
                    sent = self.look(client.event("send", [text, None]), "send")
                    if sent.ok and sent.data and sent.data[0] == "":  # accepted: the box was cleared
                        self.sent.append(text)
                    answer = self.look(client.event("respond", [None]), "respond")
                    self.frames += sum(m.get("msg") == "process_generating" for m in answer.messages)
                    self.reply_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                ended = self.look(client.direct("end_session", [None, ""]), "end session")
                self.end_s.append(time.perf_counter() - started)
                if not ended.ok or "기억 갱신" not in ended.text:
                    self.failures.append(f"end session {s + 1}: {ended.text[-200:]}")
                    continue
                watched = self.look(client.event("watch", [None]), "watch")
                frames = [m["output"]["data"] for m in watched.messages if m.get("output", {}).get("data")]
                self.polls += sum(m.get("msg") == "process_generating" for m in watched.messages)
                lines = [str(f[0]) for f in frames if isinstance(f[0], str)]
                if not frames or not isinstance(frames[-1][1], str):  # the memory tab (its jobs) came last
                    self.failures.append(f"update {s + 1}: not followed to its end: {watched.text[-200:]}")
                    continue
                self.update_s.append(time.perf_counter() - started)
                if any("실패" in line for line in lines):
                    self.failures.append(f"update {s + 1}: {lines[-1]}")
        except Exception as exc:
            self.failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            client.close()


API_POLL_S = 0.5  # the API's shortest job poll: 120 requests a minute per user (KEEM_API_RATE)
API_TRIES = 5


def api_tokens(db: str, count: int) -> list[str]:
    """A bearer token for each of `count` users, made in the store before the app starts, as `keem token create
    --user NAME` makes one against the same database."""
    from chatbot.bot import Chatbot
    from memory.backup import open_store

    store = open_store(db)
    try:
        return [store.tokens.create(store.users.get_or_create(Chatbot.user_key(user_name(i))))[1] for i in range(count)]
    finally:
        store.close()


class ApiUser(User):
    """The same user through the HTTP API, as a builder's bot using the openai client drives it: its own bearer
    token, each message sent with the session's conversation so far, streamed (SSE; the reply time is send to the
    last chunk) and with an Idempotency-Key of its own; `POST /v1/sessions/end` after each session, then
    `GET /v1/jobs/{id}?wait=` until the update is done and `GET /v1/memory` (the memory panel's counterpart)."""

    def __init__(self, index: int, app: App, args: argparse.Namespace, start: threading.Barrier, token: str):
        super().__init__(index, app, args, start)
        self.http = httpx.Client(base_url=f"{app.url}v1/", headers={"Authorization": f"Bearer {token}"}, timeout=120)
        self.processes = Counter[str]()  # X-Keem-Process of every answer through HAProxy: one process per caller
        self.retries: list[str] = []  # requests sent again (429, 503, or no answer at all): what and why

    @contextlib.contextmanager
    def answer(self, method: str, path: str, **options: Any) -> Iterator[httpx.Response]:
        """The response to a request, streamed. As the openai client retries (`max_retries`), the same request is
        sent again (the same headers, so the same Idempotency-Key) after 429 (rate limited) or 503 (models loading),
        after its Retry-After, and when the connection failed before any answer came; each retry is noted."""
        answered = False
        for attempt in range(API_TRIES):
            try:
                with self.http.stream(method, path, **options) as response:
                    self.processes[response.headers.get("X-Keem-Process", "app")] += 1
                    if response.status_code not in (429, 503) or attempt == API_TRIES - 1:
                        answered = True
                        yield response
                        return
                    response.read()
                    wait, why = float(response.headers.get("Retry-After") or 1), str(response.status_code)
            except httpx.TransportError as exc:
                if answered or attempt == API_TRIES - 1:  # failed mid-answer: a failure, as for the openai client
                    raise
                wait, why = 0.5, f"{type(exc).__name__}: {exc}"
            self.retries.append(f"{method} {path.split('/')[0]} {why}")
            time.sleep(wait)

    def call(self, method: str, path: str, what: str, expect: int = 200, **options: Any) -> dict[str, Any] | None:
        """A request's JSON answer (its text is scanned for leaks), or None with a failure noted."""
        with self.answer(method, path, **options) as response:
            response.read()
        self.seen.append(response.text)
        if response.status_code != expect:
            self.failures.append(f"{what}: {response.status_code} {response.text[-300:]}")
            return None
        body: dict[str, Any] = response.json()
        return body

    def chat(self, conversation: list[dict[str, str]]) -> str | None:
        """The streamed reply to the conversation's last message (None: refused); every event is kept for the leak
        check."""
        body = {"model": "keem", "stream": True, "messages": conversation}
        with self.answer("POST", "chat/completions", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}) as r:
            if r.status_code != 200:
                r.read()
                self.seen.append(r.text)
                self.failures.append(f"chat: {r.status_code} {r.text[-300:]}")
                return None
            events, pieces = [], []
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                events.append(line[5:].strip())
                if events[-1] == "[DONE]":
                    break
                event = json.loads(events[-1])
                if "error" in event:
                    self.failures.append(f"chat stream: {events[-1][-300:]}")
                pieces += [c["delta"].get("content") or "" for c in event.get("choices", [])]
                self.frames += 1
        self.seen.append("\n".join(events))
        return "".join(pieces)

    def run(self) -> None:
        try:
            self.start_line.wait()
            for s in range(self.args.sessions):
                conversation: list[dict[str, str]] = []  # as an openai client keeps it: resent whole every time
                for t in range(self.args.turns):
                    text = self.says(s, t)
                    conversation.append({"role": "user", "content": text})
                    started = time.perf_counter()
                    said = self.chat(conversation)
                    self.reply_s.append(time.perf_counter() - started)
                    if said is not None:  # 200: the message was stored before the reply
                        self.sent.append(text)
                        conversation.append({"role": "assistant", "content": said})
                started = time.perf_counter()
                ended = self.call("POST", "sessions/end", f"end session {s + 1}", expect=202)
                self.end_s.append(time.perf_counter() - started)
                if ended is None:
                    continue
                while True:
                    wait = {"wait": self.args.job_wait} if self.args.job_wait else {}
                    job = self.call("GET", f"jobs/{ended['job_id']}", "job", params=wait)
                    self.polls += 1
                    if job is None or job["status"] in ("done", "failed"):
                        self.update_s.append(time.perf_counter() - started)
                        if job is not None and job["status"] == "failed":
                            self.failures.append(f"update {s + 1}: {job['error']}")
                        self.call("GET", "memory", "memory")
                        break
                    if time.perf_counter() - started > 600:
                        self.failures.append(f"update {s + 1}: not done after 600 s")
                        break
                    time.sleep(max(self.args.poll, API_POLL_S))
        except Exception as exc:
            self.failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.http.close()


class Prober(threading.Thread):
    """Logs in a new name every `every` seconds until stopped: login time under load."""

    def __init__(self, app: App, every: float):
        super().__init__(name="prober", daemon=True)
        self.app, self.every = app, every
        self.stop = threading.Event()
        self.times: list[float] = []
        self.at: list[float] = []  # when each probe began, seconds from the start
        self.failures = 0

    def run(self) -> None:
        k, origin = 0, time.perf_counter()
        while not self.stop.wait(self.every):
            client, k = Client(self.app), k + 1
            try:
                started = time.perf_counter()
                self.at.append(started - origin)
                out = client.event("login", [f"probe{k:03d}"])
                self.times.append(time.perf_counter() - started)
                self.failures += not (out.ok and f"probe{k:03d}" in out.text)
            except Exception:
                self.failures += 1
            finally:
                client.close()


# -- one run ----------------------------------------------------------------------------------------
def check_database(db: str, users: list[User]) -> dict[str, int]:
    """Turns sent vs stored, replies, jobs and memories, read from the app's store after it stopped."""
    from memory.backup import open_store

    conn = open_store(db)
    try:
        stored: dict[str, Counter[str]] = {}
        replies = Counter[str]()
        for name, role, text in rows(
            conn, "select u.name, t.role, t.text from turns t join users u on u.id = t.user_id order by t.id"
        ):
            if role == "user":
                stored.setdefault(name, Counter())[text] += 1
            else:
                replies[name] += 1
        jobs = Counter(status for (status,) in rows(conn, "select status from update_jobs"))
        memory_leaks, own_in_memory = 0, 0
        for user in users:
            texts = [
                t
                for (t,) in rows(
                    conn,
                    "select s.text from memory_sentences s join memory_versions v on v.id = s.version_id "
                    "join users u on u.id = v.user_id where u.name = ? and v.id = (select max(id) from memory_versions "
                    "where user_id = u.id)",
                    [user.name_],
                )
            ]
            others = {marker(u.index) for u in users if u is not user}
            memory_leaks += sum(any(m in t for m in others) for t in texts)
            own_in_memory += sum(user.mark in t for t in texts)
    finally:
        conn.close()
    lost = sum(max(0, Counter(u.sent)[t] - stored.get(u.name_, Counter())[t]) for u in users for t in set(u.sent))
    extra = sum(max(0, n - Counter(u.sent)[t]) for u in users for t, n in stored.get(u.name_, Counter()).items())
    user_turns = sum(sum(stored.get(u.name_, Counter()).values()) for u in users)
    return {
        "turns_sent": sum(len(u.sent) for u in users),
        "turns_stored": user_turns,
        "lost_turns": lost,
        "unsent_stored": extra,
        "replies_stored": sum(replies[u.name_] for u in users),
        "jobs_done": jobs.get("done", 0),
        "jobs_not_done": sum(n for s, n in jobs.items() if s != "done"),
        "memory_leaks": memory_leaks,
        "own_sentences_in_memory": own_in_memory,
    }


def run(
    workers: int, args: argparse.Namespace, server: FakeOpenAIServer, tmp: Path, processes: int | None = None
) -> dict[str, Any]:
    """One row: a fresh store and a fresh app (`python app.py`), or with `processes` a fresh `keem serve` cluster;
    the users on the page, or with `args.front` "api" through the HTTP API (their tokens made before the app starts)."""
    tag = (f"w{workers}" if processes is None else f"p{processes}w{workers}") + ("-api" if args.front == "api" else "")
    log = tmp / f"app-{tag}.log"
    schema = PostgresSchema(args.pg) if args.pg else None  # a fresh store: a schema of its own, or a new file
    db = schema.url if schema is not None else str(tmp / f"keem-{tag}.db")
    try:
        return measure(db, log, workers, args, server, processes)
    finally:
        if schema is not None:
            schema.close()


def measure(
    db: str, log: Path, workers: int, args: argparse.Namespace, server: FakeOpenAIServer, processes: int | None
) -> dict[str, Any]:
    """`run`'s row on the store `db`."""
    tokens = api_tokens(db, args.users) if args.front == "api" else []
    app = (
        App(db, log, server.url, workers, args.embedder)
        if processes is None
        else Cluster(db, log, server.url, workers, args.embedder, processes, args.update_processes)
    )
    try:
        ready_s = app.wait_ready()
        settle_s, settle_max_s = app.settle()
        calls_before = len(server.requests)
        app_cpu, own_cpu = app.cpu_s(), resource.getrusage(resource.RUSAGE_SELF)
        gate = threading.Barrier(args.users)
        users = [ApiUser(i, app, args, gate, t) for i, t in enumerate(tokens)] or [
            User(i, app, args, gate) for i in range(args.users)
        ]
        prober = Prober(app, args.probe_every)
        started = time.perf_counter()
        for user in users:
            user.start()
        prober.start()
        for user in users:
            user.join()
        wall = time.perf_counter() - started
        prober.stop.set()
        prober.join()
        calls = len(server.requests) - calls_before
        app_cpu = app.cpu_s() - app_cpu
        rss_mb = app.rss_peak_mb()
        now = resource.getrusage(resource.RUSAGE_SELF)
        own_cpu = now.ru_utime + now.ru_stime - own_cpu.ru_utime - own_cpu.ru_stime
    finally:
        app.stop()
    found = check_database(db, users)
    leaks = 0
    for user in users:
        others = [marker(u.index) for u in users if u is not user]
        leaks += sum(any(m in text for m in others) for text in user.seen)
    log_text = log.read_text(encoding="utf-8", errors="replace")
    problems = [
        line for line in log_text.splitlines() if re.search(r"\b(ERROR|CRITICAL|Traceback)\b|WARNING (?!gradio)", line)
    ]
    if args.keep_logs:
        keep = Path(args.keep_logs)
        keep.mkdir(parents=True, exist_ok=True)
        (keep / log.name).write_text(log_text, encoding="utf-8")
    logins = [u.login_s for u in users if u.login_s is not None]
    replies = [x for u in users for x in u.reply_s]
    updates = [x for u in users for x in u.update_s]
    ends = [x for u in users for x in u.end_s]
    callers = [u for u in users if isinstance(u, ApiUser)]
    return {
        "front": args.front,
        "processes": processes,
        "workers": workers,
        "users": args.users,
        "sessions": args.sessions,
        "turns": args.turns,
        "latency_s": args.latency,
        "embedder": args.embedder,
        "app_ready_s": round(ready_s, 2),
        "settle_s": round(settle_s, 2),
        "settle_login_max_s": round(settle_max_s, 2),
        **found,
        "frame_leaks": leaks,
        "leaks": leaks + found["memory_leaks"],
        "login_p50_s": pct(logins, 50),
        "login_p95_s": pct(logins, 95),
        "login_max_s": max(logins, default=float("nan")),
        "probe_logins": len(prober.times),
        "probe_login_failures": prober.failures,
        "probe_login_p50_s": pct(prober.times, 50),
        "probe_login_p95_s": pct(prober.times, 95),
        "probe_login_max_s": max(prober.times, default=float("nan")),
        "probe_slow": [[round(a, 1), round(t, 2)] for a, t in zip(prober.at, prober.times) if t > 1.0],
        "reply_p50_s": pct(replies, 50),
        "reply_p95_s": pct(replies, 95),
        # the first session's turns come from every user at once (they start together); later ones are spread by
        # the update waits between sessions
        "reply_p95_by_session_s": [
            pct([x for u in users for x in u.reply_s[s * args.turns : (s + 1) * args.turns]], 95)
            for s in range(args.sessions)
        ],
        "end_session_p95_s": pct(ends, 95),
        "update_wait_p50_s": pct(updates, 50),
        "update_wait_p95_s": pct(updates, 95),
        "updates_seen": len(updates),
        "model_calls": calls,
        "wall_s": wall,
        "reply_frames": sum(u.frames for u in users),
        "polls": sum(u.polls for u in users),
        "app_cpu_s": app_cpu,
        "app_rss_peak_mb": rss_mb,
        "bench_cpu_s": own_cpu,
        "load_average": os.getloadavg()[0],
        "client_failures": [f"{u.name_}: {f}" for u in users for f in u.failures][:20],
        "api_retries": sum(len(u.retries) for u in callers),
        "api_retried": dict(Counter(r for u in callers for r in u.retries).most_common(10)),
        # the api front through HAProxy: how many callers each process answered, and callers answered by several
        "api_callers_per_process": dict(sorted(Counter(p for u in callers for p in u.processes).items())),
        "api_callers_on_several_processes": sum(len(u.processes) > 1 for u in callers),
        "log_problems": problems[:20],
        "log_problem_count": len(problems),
    }


def run_processes(args: argparse.Namespace, sizes: list[int]) -> int:
    """`--processes 1,2`: a row per user count and process count, through HAProxy; a table, or JSON."""
    counts = [int(n) for n in str(args.processes).split(",") if n.strip()]
    results = []
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(reply=reply, latency_s=args.latency) as server:
        for n in sizes:
            for front in fronts(args):
                for processes in counts:
                    here = Path(tmp) / f"u{n}"
                    here.mkdir(exist_ok=True)
                    row_args = argparse.Namespace(**{**vars(args), "users": n, "front": front})
                    results.append(run(args.workers[0], row_args, server, here, processes))
                    print(
                        f"{n} users ({front}), {processes} app processes: done in {results[-1]['wall_s']:.1f} s",
                        file=sys.stderr,
                    )
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
        (Path(args.keep_logs) / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return 0
    print(
        f"{args.sessions} sessions x {args.turns} turns a user ({', '.join(fronts(args))}), through HAProxy "
        "(keem serve) with "
        f"{args.update_processes} update worker process(es), openai: model at a loopback server "
        f"({args.latency * 1000:.0f} ms a call), embedder {args.embedder}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{front_head(args)}{'processes':>9} {'users':>5} {'sent':>5} {'stored':>6} {'lost':>4} {'leaks':>5} "
        f"{'reply_p50_s':>11} {'reply_p95_s':>11} {'update_wait_p95_s':>17} {'wall_s':>7} {'app_cores':>9} "
        f"{'app_ms_turn':>11} {'polls':>6} {'problems':>8}"
    )
    for r in results:
        print(
            f"{front_cell(args, r)}{r['processes']:>9} {r['users']:>5} {r['turns_sent']:>5} {r['turns_stored']:>6} "
            f"{r['lost_turns']:>4} "
            f"{r['leaks']:>5} {r['reply_p50_s']:>11.2f} {r['reply_p95_s']:>11.2f} {r['update_wait_p95_s']:>17.2f} "
            f"{r['wall_s']:>7.1f} {r['app_cpu_s'] / r['wall_s']:>9.2f} "
            f"{1000 * r['app_cpu_s'] / max(1, r['turns_sent']):>11.0f} {r['polls']:>6} "
            f"{len(r['client_failures']) + r['log_problem_count']:>8}"
        )
        by_session = " / ".join(f"{x:.2f}" for x in r["reply_p95_by_session_s"])
        print(f"  reply p95 by session: {by_session} s (the first: all {r['users']} users at once)")
        if r["front"] == "api":
            spread = ", ".join(f"{p} {k}" for p, k in r["api_callers_per_process"].items())
            print(
                f"  api callers per process: {spread}; on several processes {r['api_callers_on_several_processes']}; "
                f"requests sent again {r['api_retries']} {r['api_retried'] or ''}"
            )
        for line in r["client_failures"][:5] + r["log_problems"][:5]:
            print(f"  ! {line[:240]}")
    for n in sizes:
        for front in fronts(args):
            rows_n = [r for r in results if r["users"] == n and r["front"] == front]
            one = next((r for r in rows_n if r["processes"] == 1), None)
            for r in rows_n:
                if one is not None and r is not one:
                    print(
                        f"{n} users{front_note(args, front)}: reply p95 with {r['processes']} processes / 1 process: "
                        f"{r['reply_p95_s'] / one['reply_p95_s']:.2f}"
                    )
        for processes in counts if len(fronts(args)) > 1 else []:
            page, api = (
                next((r for r in results if (r["users"], r["front"], r["processes"]) == (n, f, processes)), None)
                for f in ("page", "api")
            )
            if page is not None and api is not None:
                print(
                    f"{n} users, {processes} processes: reply p95 api / page: "
                    f"{api['reply_p95_s'] / page['reply_p95_s']:.2f}"
                )
    return 0


def fronts(args: argparse.Namespace) -> list[str]:
    """`--front page,api`: the front ends to drive, each its own row."""
    return [f.strip() for f in str(args.front).split(",") if f.strip()]


def front_head(args: argparse.Namespace) -> str:
    """The tables' front column, shown only when a run drives the API (the page-only tables stay as they were)."""
    return f"{'front':>5} " if fronts(args) != ["page"] else ""


def front_cell(args: argparse.Namespace, row: dict[str, Any]) -> str:
    return f"{row['front']:>5} " if fronts(args) != ["page"] else ""


def front_note(args: argparse.Namespace, front: str) -> str:
    return f" ({front})" if fronts(args) != ["page"] else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--users",
        default="20",
        help="simultaneous users, or a comma-separated list of row sizes (e.g. 20,40,80,160); with a list, a 1-user "
        "row comes first and the knee is the first row whose reply p95 is over twice that one's",
    )
    parser.add_argument("--sessions", type=int, default=3, help="sessions per user")
    parser.add_argument("--turns", type=int, default=3, help="turns per session")
    parser.add_argument("--latency", type=float, default=0.3, help="model server latency per call, seconds")
    parser.add_argument(
        "--pg",
        metavar="URL",
        help="the store in this Postgres database (postgresql://...), a throwaway schema of its own per row, "
        "instead of a new SQLite file per row",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4], help="KEEM_UPDATE_WORKERS settings to run")
    parser.add_argument(
        "--processes",
        help="app process counts to compare behind HAProxy (e.g. 1,2): a row per count, each a fresh `keem serve` "
        "with --update-processes workers; --workers then sets KEEM_UPDATE_WORKERS (its first value)",
    )
    parser.add_argument("--update-processes", type=int, default=1, help="`keem worker` processes per row (default 1)")
    parser.add_argument(
        "--front",
        default="page",
        help="how the users talk to the app: page (the page's Gradio protocol, the default), api (the HTTP API under "
        "/v1/ with a bearer token each, streamed chat, POST /v1/sessions/end, GET /v1/jobs/{id}), or page,api for a "
        "row of each",
    )
    parser.add_argument("--embedder", default="ngram", help="embedder spec for the app (default ngram: cheap)")
    parser.add_argument(
        "--poll",
        type=float,
        default=API_POLL_S,
        help=f"seconds between an API user's job polls (default and least: {API_POLL_S}, the API's rate limit; the "
        "page's users follow their update with one event)",
    )
    parser.add_argument(
        "--job-wait",
        type=float,
        default=30.0,
        help="the api front's `GET /v1/jobs/{id}?wait=` (default 30: one request an update, answered when it is "
        "done); 0 polls every --poll seconds instead",
    )
    parser.add_argument("--probe-every", type=float, default=1.0, help="seconds between probe logins")
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the app's logs, and the results as JSON, into DIR")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    args = parser.parse_args()
    if not fronts(args) or set(fronts(args)) - {"page", "api"}:
        parser.error("--front: page, api or page,api")
    sizes = [int(n) for n in str(args.users).split(",") if n.strip()]
    if len(sizes) > 1 and 1 not in sizes:
        sizes.insert(0, 1)  # the single-user figure the knee is measured against
    results = []
    if args.processes:
        return run_processes(args, sizes)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(reply=reply, latency_s=args.latency) as server:
        for n in sizes:
            for front in fronts(args):
                row_args = argparse.Namespace(**{**vars(args), "users": n, "front": front})
                for workers in args.workers:
                    here = Path(tmp) / f"u{n}"
                    here.mkdir(exist_ok=True)
                    results.append(run(workers, row_args, server, here))
                    print(
                        f"{n} users{front_note(args, front)}, workers {workers}: done in {results[-1]['wall_s']:.1f} s",
                        file=sys.stderr,
                    )
    if args.keep_logs:
        (Path(args.keep_logs) / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return 0
    print(
        f"{args.users} users x {args.sessions} sessions x {args.turns} turns, real app (python app.py) over HTTP"
        f"{front_note(args, args.front)}, "
        f"openai: model at a loopback server ({args.latency * 1000:.0f} ms a call), embedder {args.embedder}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    head = (
        f"{front_head(args)}{'users':>5} {'workers':>7} {'sent':>5} {'stored':>6} {'lost':>4} {'leaks':>5} "
        f"{'login p50/p95':>14} "
        f"{'probe login p50/p95':>20} {'reply p50/p95':>14} {'update wait p50/p95':>20} {'wall':>7} "
        f"{'app CPU':>11} {'app RSS peak':>12}"
    )
    print(head)
    for r in results:
        print(
            f"{front_cell(args, r)}{r['users']:>5} {r['workers']:>7} {r['turns_sent']:>5} {r['turns_stored']:>6} "
            f"{r['lost_turns']:>4} {r['leaks']:>5} "
            f"{r['login_p50_s']:>6.2f}/{r['login_p95_s']:<6.2f}s "
            f"{r['probe_login_p50_s']:>9.2f}/{r['probe_login_p95_s']:<6.2f}s "
            f"{r['reply_p50_s']:>6.2f}/{r['reply_p95_s']:<6.2f}s "
            f"{r['update_wait_p50_s']:>9.2f}/{r['update_wait_p95_s']:<6.2f}s {r['wall_s']:>6.1f}s "
            f"{r['app_cpu_s'] / r['wall_s']:>5.2f} cores {r['app_rss_peak_mb']:>5.0f} MB"
        )
    for r in results:
        notes = [
            f"replies stored {r['replies_stored']}",
            "reply p95 by session " + " / ".join(f"{x:.2f}" for x in r["reply_p95_by_session_s"]) + " s",
            f"jobs done {r['jobs_done']} (not done {r['jobs_not_done']})",
            f"own marker sentences in final memories {r['own_sentences_in_memory']}",
            f"end session p95 {r['end_session_p95_s'] * 1000:.0f} ms",
            f"app ready (first login) {r['app_ready_s']:.1f} s, then settled in {r['settle_s']:.1f} s "
            f"(slowest login {r['settle_login_max_s']:.2f} s)",
            f"login max {r['login_max_s']:.2f} s, probe max {r['probe_login_max_s']:.2f} s "
            f"({r['probe_logins']} probes, {r['probe_login_failures']} failed)",
            f"model calls {r['model_calls']}",
            f"log problems {r['log_problem_count']}",
            f"reply frames {r['reply_frames']}",
            f"CPU s: app {r['app_cpu_s']:.0f}, "
            f"clients + model server {r['bench_cpu_s']:.0f} (of {os.cpu_count() * r['wall_s']:.0f} "
            f"on {os.cpu_count()} cores), "
            f"load average {r['load_average']:.1f}",
        ]
        if r["front"] == "api":
            notes.append(f"requests sent again {r['api_retries']} {r['api_retried'] or ''}")
        print(f"{r['users']} users{front_note(args, r['front'])}, workers {r['workers']}: " + "; ".join(notes))
        for line in r["client_failures"] + r["log_problems"][:5]:
            print(f"  ! {line[:240]}")
    for front in fronts(args):
        for workers in args.workers:
            rows = [r for r in results if r["workers"] == workers and r["front"] == front]
            single = next((r for r in rows if r["users"] == 1), None)
            if single is None or len(rows) < 2:
                continue
            knee = next((r for r in rows if r["reply_p95_s"] > 2 * single["reply_p95_s"]), None)
            print(
                f"workers {workers}{front_note(args, front)}: single-user reply p95 {single['reply_p95_s']:.2f} s; "
                "knee "
                + (
                    f"at {knee['users']} users (reply p95 {knee['reply_p95_s']:.2f} s)"
                    if knee
                    else f"not reached up to {rows[-1]['users']} users"
                )
            )
        if len(args.workers) > 1 and len(sizes) == 1:
            rows = [r for r in results if r["front"] == front]
            one = next((r for r in rows if r["workers"] == 1), rows[0])
            for r in rows:
                if r is not one:
                    print(
                        f"update wait p95{front_note(args, front)}, {r['workers']} workers / 1 worker: "
                        f"{r['update_wait_p95_s'] / one['update_wait_p95_s']:.2f}"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
