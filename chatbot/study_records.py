"""What a user trial stores beside the memory engine's tables: consent to a study and questionnaire answers.

The tables have a migration set of their own ("keem_trials"), applied the first time trial code opens the records of
a store (`records(store)`). Both reference the user (and answers their session) with ON DELETE CASCADE, so forgetting
a user (memory/store/users.py `Users.delete`) deletes their trial records too, without memory/ knowing of trials.
Databases from before this set, whose memory migration m005 made the same tables, keep them unchanged.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from sqlite_utils import Database

from memory.store import Store, now_iso
from memory.store.rebuild import never_reuse_ids
from memory.store.schema import Schema
from models.errors import InputError

schema = Schema("keem_trials")


@schema
def t001_consents_and_answers(db: Database) -> None:
    """A participant's consent to a study, and their questionnaire answers per session. A no-op where memory's
    former migration m005_trial_questionnaires made these tables already (same definition)."""
    db.execute("""create table if not exists consents (
        id integer primary key,
        user_id integer not null references users(id) on delete cascade,
        study_id text not null,
        text_hash text not null,
        created_at text not null)""")
    db.execute("create index if not exists idx_consents_user_study on consents (user_id, study_id)")
    db.execute("""create table if not exists answers (
        id integer primary key,
        session_id integer not null references sessions(id) on delete cascade,
        user_id integer not null references users(id) on delete cascade,
        study_id text not null,
        item text not null,
        kind text not null,
        question text,
        value text not null,
        created_at text not null)""")
    db.execute("create unique index if not exists idx_answers_session_item on answers (session_id, study_id, item)")
    db.execute("create index if not exists idx_answers_user on answers (user_id, study_id)")


@schema.outside_transaction
def t002_ids_never_reused(db: Database) -> None:
    """Consent and answer ids are never given twice (AUTOINCREMENT), like the memory engine's ids (memory migration
    m006): the tables are rebuilt with their rows, indexes and foreign keys (ON DELETE CASCADE to users and
    sessions), each sequence starting above its highest id. An id deleted before this migration that no row holds
    any more is not knowable (memory/store/migrations.py m006 says what that means)."""
    never_reuse_ids(db, {"consents": [], "answers": []})


@schema
def t003_guess_limits(db: Database) -> None:
    """The organiser password's limiter, shared by every process of one store (`keem serve`): per login (a SHA-256 of
    its name, not the name), when its last guess was let through, in seconds since the epoch."""
    db.execute("create table if not exists guess_limits (key text primary key, last_at real not null)")


# The same tables on Postgres (memory/store/postgres.py applies the set). EVERY future change of these tables needs a
# migration in both sets: the next t0NN above and the next pgt0NN here. Ids are identity columns, never reused.
schema.add_postgres(
    "pgt001_schema_of_t002",
    """
    create table consents (
        id bigint generated always as identity primary key,
        user_id bigint not null references users (id) on delete cascade,
        study_id text not null,
        text_hash text not null,
        created_at text not null);
    create index idx_consents_user_study on consents (user_id, study_id);
    create table answers (
        id bigint generated always as identity primary key,
        session_id bigint not null references sessions (id) on delete cascade,
        user_id bigint not null references users (id) on delete cascade,
        study_id text not null,
        item text not null,
        kind text not null,
        question text,
        value text not null,
        created_at text not null);
    create unique index idx_answers_session_item on answers (session_id, study_id, item);
    create index idx_answers_user on answers (user_id, study_id);
    """,
)


schema.add_postgres(
    "pgt002_guess_limits", "create table guess_limits (key text primary key, last_at double precision not null);"
)


_opened: weakref.WeakKeyDictionary[Store, TrialRecords] = weakref.WeakKeyDictionary()


def records(store: Store) -> TrialRecords:
    """The trial records of `store`, migrating its trial tables the first time (once per store object)."""
    with store.lock:
        found = _opened.get(store)
        if found is None:
            found = _opened[store] = TrialRecords(store)
        return found


class TrialRecords:
    """Consents, questionnaire answers and the organiser's guess limits in one store (use `records(store)`, which
    migrates once)."""

    def __init__(self, store: Store):
        self.store = store
        store.migrate(schema)

    def take_guess(self, login: str | None, interval_s: float, now: float | None = None) -> bool:
        """Whether a guess at the organiser password by `login` may be checked now, counted across every process of
        this store: at most one per `interval_s` for each login (True starts its interval again). A clock that went
        back (a last guess "in the future") does not lock anyone out."""
        key = hashlib.sha256(f"login:{login or ''}".encode()).hexdigest()
        with self.store.write():
            now = time.time() if now is None else now  # read holding the write lock: the order guesses are let in
            last = self.store.one("select last_at from guess_limits where key = ?", [key])
            if last is not None and 0 <= now - float(last["last_at"]) < interval_s:
                return False
            self.store.execute(
                "insert into guess_limits (key, last_at) values (?, ?) "
                "on conflict (key) do update set last_at = excluded.last_at",
                [key, now],
            )
        return True

    def record_consent(
        self, user_id: int, study_id: str, text_hash: str, at: datetime | str | None = None
    ) -> dict[str, Any]:
        """Record that the user agreed to this study's consent text (its hash); agreeing again to the same text
        keeps the first record. Returns the record."""
        if isinstance(at, datetime):
            at = (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
        when = at.isoformat(timespec="seconds") if isinstance(at, datetime) else (at or now_iso())
        same = "select * from consents where user_id = ? and study_id = ? and text_hash = ? order by id limit 1"
        with self.store.write():
            if self.store.one(same, [user_id, study_id, text_hash]) is None:
                self.store.execute(
                    "insert into consents (user_id, study_id, text_hash, created_at) values (?, ?, ?, ?)",
                    [user_id, study_id, text_hash, when],
                )
            row = self.store.one(same, [user_id, study_id, text_hash])
        assert row is not None
        return row

    def consent(self, user_id: int, study_id: str) -> dict[str, Any] | None:
        """The user's latest consent to this study (user_id, study_id, text_hash, created_at), or None."""
        return self.store.one(
            "select * from consents where user_id = ? and study_id = ? order by id desc limit 1", [user_id, study_id]
        )

    def save_answers(
        self,
        session_id: int,
        user_id: int,
        study_id: str,
        answers: dict[str, Any],
        check: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None,
    ) -> int:
        """Store one session's questionnaire, all answers or none; returns how many were written.

        `check(answers) -> rows` (chatbot/study.py: Study.check_answers) validates the answers against the study
        and returns rows of item, kind, question and value; it raises InputError naming the first bad answer.
        Without it, an int is a rating and a str a free text. A second submission for the same session is refused.
        The errors carry a code the page shows in Korean (chatbot/web/render.py).
        """
        session = self.store.one("select user_id from sessions where id = ?", [session_id])
        if session is None or session["user_id"] != user_id:
            raise InputError(
                f"no session {session_id} of this participant; answer the questionnaire of one of their own sessions",
                code="questionnaire_no_session",
            )
        answered = "select 1 from answers where session_id = ? and study_id = ? limit 1"
        twice = InputError(
            f"the questionnaire of session {session_id} was answered already; each session's is submitted once",
            code="questionnaire_done",
        )
        if self.store.one(answered, [session_id, study_id]):
            raise twice
        rows = (
            check(answers)
            if check
            else [
                {"item": k, "kind": "likert" if isinstance(v, int) else "text", "question": None, "value": v}
                for k, v in answers.items()
            ]
        )
        if not rows:
            raise InputError("no answer given; choose the answers, then submit", code="questionnaire_empty")
        created = now_iso()
        with self.store.write():
            if self.store.one(answered, [session_id, study_id]):  # another tab submitted meanwhile
                raise twice
            for r in rows:
                self.store.execute(
                    "insert into answers (session_id, user_id, study_id, item, kind, question, value, "
                    "created_at) values (?, ?, ?, ?, ?, ?, ?, ?)",
                    [session_id, user_id, study_id, r["item"], r["kind"], r.get("question"), str(r["value"]), created],
                )
        return len(rows)

    def answers(
        self, study_id: str | None = None, user_id: int | None = None, session_id: int | None = None
    ) -> list[dict[str, Any]]:
        """Stored questionnaire answers, filtered by any of study, user and session; ratings come back as int."""
        where, params = [], []
        for column, value in (("study_id", study_id), ("user_id", user_id), ("session_id", session_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        rows = self.store.rows(
            "select * from answers" + (" where " + " and ".join(where) if where else "") + " order by session_id, id",
            params,
        )
        for r in rows:
            if r["kind"] == "likert":
                r["value"] = int(r["value"])
        return rows

    def unanswered_sessions(self, user_id: int, study_id: str) -> list[dict[str, Any]]:
        """The user's ended sessions in which they said something and whose questionnaire for this study is
        still unanswered, oldest first."""
        return self.store.rows(
            "select * from sessions s where user_id = ? and status = 'ended' "
            "and exists (select 1 from turns t where t.session_id = s.id and t.role = 'user') "
            "and not exists (select 1 from answers a where a.session_id = s.id and a.study_id = ?) order by id",
            [user_id, study_id],
        )
