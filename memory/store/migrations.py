"""The memory engine's numbered schema migrations (the set "keem"). Never edit one that shipped: add the next number.

The user-trial tables (consents, answers) were this set's m005; they belong to chatbot/study_records.py's own set
now, which leaves them as they are in a database that already has them.
"""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database

from memory.store.notes import dumps, from_legacy
from memory.store.rebuild import never_reuse_ids
from memory.store.schema import Schema

schema = Schema("keem", retired=["m005_trial_questionnaires"])


@schema
def m001_initial(db: Database) -> None:
    db.table("users").create({"id": int, "name": str, "created_at": str}, pk="id", not_null={"name", "created_at"})
    db.table("users").create_index(["name"], unique=True)
    db.table("sessions").create(
        {
            "id": int,
            "user_id": int,
            "started_at": str,
            "ended_at": str,
            "strategy": str,
            "chat_model": str,
            "status": str,
            "end_reason": str,
        },
        pk="id",
        foreign_keys=[("user_id", "users", "id")],
        not_null={"user_id", "started_at", "status"},
    )
    db.table("sessions").create_index(["user_id", "started_at"])
    db.table("turns").create(
        {"id": int, "session_id": int, "user_id": int, "role": str, "text": str, "created_at": str},
        pk="id",
        foreign_keys=[("session_id", "sessions", "id"), ("user_id", "users", "id")],
        not_null={"session_id", "user_id", "role", "text", "created_at"},
    )
    db.table("turns").create_index(["session_id", "id"])
    db.table("memory_versions").create(
        {
            "id": int,
            "user_id": int,
            "number": int,
            "session_id": int,
            "strategy": str,
            "status": str,
            "model_spec": str,
            "prompt_hash": str,
            "author": str,
            "note": str,
            "details": str,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("user_id", "users", "id")],
        not_null={"user_id", "number", "strategy", "status", "author", "created_at"},
    )
    db.table("memory_versions").create_index(["user_id", "number"], unique=True)
    db.table("memory_sentences").create(
        {
            "id": int,
            "version_id": int,
            "user_id": int,
            "position": int,
            "text": str,
            "embedding": bytes,
            "embedder": str,
            "provenance": str,
            "origin_id": int,
        },
        pk="id",
        foreign_keys=[("version_id", "memory_versions", "id"), ("user_id", "users", "id")],
        not_null={"version_id", "user_id", "position", "text", "provenance"},
    )
    db.table("memory_sentences").create_index(["version_id", "position"])
    db.table("update_jobs").create(
        {
            "id": int,
            "user_id": int,
            "session_id": int,
            "strategy": str,
            "status": str,
            "stage": str,
            "attempts": int,
            "last_error": str,
            "version_id": int,
            "created_at": str,
            "updated_at": str,
        },
        pk="id",
        foreign_keys=[("user_id", "users", "id"), ("session_id", "sessions", "id")],
        not_null={"user_id", "session_id", "strategy", "status", "attempts", "created_at"},
        defaults={"attempts": 0},
    )
    db.table("update_jobs").create_index(["status", "id"])
    db.table("update_jobs").create_index(["session_id"], unique=True)


@schema
def m002_memory_cues(db: Database) -> None:
    """Cue words the update model wrote for a sentence (memory/cues.py) and their vector, both optional."""
    db.table("memory_sentences").add_column("cues", str)
    db.table("memory_sentences").add_column("cue_embedding", bytes)


@schema
def m003_user_strategy(db: Database) -> None:
    """The strategy a user trial assigned to the user (KEEM_STRATEGY=balanced); empty outside trials."""
    db.table("users").add_column("strategy", str)


@schema
def m004_job_leases(db: Database) -> None:
    """Update jobs are leased by the process that runs them (owner, lease expiry), and a failed attempt's retry
    time is stored with the job (epoch seconds), so no second process takes a live job and backoff survives
    restarts."""
    db.table("update_jobs").add_column("owner", str)
    db.table("update_jobs").add_column("lease_until", float)
    db.table("update_jobs").add_column("next_attempt_at", float)


@schema.outside_transaction
def m006_ids_never_reused(db: Database) -> None:
    """Ids are never given twice (AUTOINCREMENT): a forgotten user's user, session, turn, version, sentence and job ids
    never come back for the next user, so an open tab, a cache or another process that still holds one finds
    nothing rather than someone else. Each table is rebuilt (rows, indexes and foreign keys kept) and its sequence
    starts above the highest id it or any table referring to it holds. Limit: an id deleted before this migration
    that no remaining row mentions (say the last user, forgotten before the upgrade) is not knowable, and may be
    given once more; nothing that held it survives the restart that upgrades (tabs, caches), only files made
    outside the database (an export) could name it."""
    users = ("sessions", "turns", "memory_versions", "memory_sentences", "update_jobs", "consents", "answers")
    never_reuse_ids(
        db,
        {
            "users": [(table, "user_id") for table in users],
            "sessions": [(t, "session_id") for t in ("turns", "memory_versions", "update_jobs", "answers")],
            "turns": [],
            "memory_versions": [("memory_sentences", "version_id"), ("update_jobs", "version_id")],
            "memory_sentences": [("memory_sentences", "origin_id")],
            "update_jobs": [],
        },
    )


@schema
def m007_forget_generation(db: Database) -> None:
    """A counter every forget bumps, in the same transaction, in any process: caches keyed by user (the engine's
    indexes, the worker's live sessions) compare it to the value they last saw and drop the users that are gone."""
    db.execute("create table data_generation (id integer primary key check (id = 1), forgets integer not null)")
    db.execute("insert into data_generation (id, forgets) values (1, 0)")


@schema
def m008_turn_replies(db: Database) -> None:
    """An assistant turn names the user turn it answers: a message typed while a reply streams is stored the moment
    it is sent, before that reply, and the session still reads in conversation order (memory/store/users.py
    Turns.of_session). (m005 was the trial tables', retired above.)"""
    db.table("turns").add_column("reply_to", int)


@schema
def m009_erasure_audit(db: Database) -> None:
    """One row per erasure ("나를 잊기", "이 내용을 완전히 지우기"): what kind of thing, how many rows of each
    table, and when; never the text. `user_id` has no foreign key: the row outlives a forgotten user (ids are
    never reused)."""
    db.table("erasures").create(
        {"id": int, "kind": str, "user_id": int, "rows": int, "details": str, "created_at": str},
        pk="id",
        not_null={"kind", "rows", "created_at"},
    )


@schema
def m010_provenance(db: Database) -> None:
    """Where each memory sentence came from (memory/provenance.py), as JSON of ids and scores, never texts: the
    sentences of the previous version it continues, the session and its user turns that support what is new in it
    (with their scores), the step it came through. Carried with the sentence while its text is unchanged. The
    older column `provenance` keeps its one word (kept, added, rewritten, ...): what the commit did, not the
    sources. Ids only, so erasing a sentence or redacting a turn leaves no copy of its text here."""
    db.table("memory_sentences").add_column("sources", str)


@schema
def m011_emotion_records(db: Database) -> None:
    """Emotion-and-cause records stored with each memory version (memory/store/emotions.py): the emotion in the
    user's word, its cause, the sentence it belongs to, when it was first and last seen, its status (ongoing,
    resolved, past), the user's words behind that status and how it ended. A record keeps its `key` from version to
    version. It goes with its version, its sentence (an erased sentence takes its records) and its user. And
    `session_openings`: which record a session's opening question asked about (chatbot/opening.py), so the next
    session does not ask the same thing again. Independent of m010."""
    db.execute(
        """create table emotion_records (
        id integer primary key autoincrement,
        version_id integer not null references memory_versions(id) on delete cascade,
        user_id integer not null references users(id) on delete cascade,
        position integer not null,
        key text not null,
        emotion text not null,
        cause text not null,
        status text not null check (status in ('ongoing', 'resolved', 'past')),
        sentence_id integer references memory_sentences(id) on delete cascade,
        quote text not null default '',
        first_seen text not null,
        last_seen text not null,
        first_session integer,
        last_session integer,
        due text,
        ended text,
        ended_at text
        )"""
    )
    db.execute("create index emotion_records_version on emotion_records (version_id, position)")
    db.execute("create index emotion_records_user on emotion_records (user_id)")
    db.execute(
        """create table session_openings (
        session_id integer primary key references sessions(id) on delete cascade,
        user_id integer not null references users(id) on delete cascade,
        record_key text not null,
        turn_id integer references turns(id) on delete cascade,
        created_at text not null
        )"""
    )
    db.execute("create index session_openings_user on session_openings (user_id, session_id)")


@schema
def m012_reply_marks(db: Database) -> None:
    """A reply's mark: null for a whole reply, 'stopped' (the user stopped it; what was shown is kept), 'failed'
    (the model failed after these pieces) or 'replaced' (the user asked for another reply to the same message; it
    stays stored, and a session's dialogue leaves it out: memory/store/users.py Turns.of_session)."""
    db.table("turns").add_column("mark", str)


@schema
def m013_api_tokens(db: Database) -> None:
    """Bearer tokens of the HTTP API (memory/store/tokens.py): only a token's SHA-256 is stored, never the token.
    A user's token names its user and goes with them when they are forgotten; an app token (`app` 1, no user) acts
    for any user a request names. Postgres gets the same table in pg002_api_tokens below."""
    db.execute(
        """create table api_tokens (
        id integer primary key autoincrement,
        hash text not null unique,
        user_id integer references users(id) on delete cascade,
        app integer not null default 0,
        label text not null default '',
        created_at text not null,
        last_used_at text,
        revoked_at text
        )"""
    )
    db.execute("create index api_tokens_user on api_tokens (user_id)")


@schema
def m014_version_notes(db: Database) -> None:
    """A version's note is codes with parameters, rendered where it is shown (memory/store/notes.py), no longer Korean
    or English text: the column `note` becomes `notes`, a JSON list of entries, and each old note is converted in
    place (the known patterns with their parameters, the rest verbatim as a `text` entry: notes.from_legacy, which
    this migration uses and so never changes). Renamed, not added beside: no second copy of a note's text is left
    for an erasure to miss, and RENAME COLUMN (SQLite 3.25) needs no table rebuild. Postgres: pg003 below."""
    db.execute("alter table memory_versions rename column note to notes")
    rows = list(db.query("select id, notes from memory_versions where notes is not null"))
    for row in rows:
        db.execute("update memory_versions set notes = ? where id = ?", [dumps(from_legacy(row["notes"])), row["id"]])


@schema
def m015_sentence_dates(db: Database) -> None:
    """The times a sentence holds as they were said (memory/dates.py anchor: "다음 주 화요일" said on 2026-12-03
    is stored as "2026년 12월 8일" in the text, and here as JSON with the words said). Postgres: pg004."""
    db.table("memory_sentences").add_column("dates", str)


@schema
def m016_job_takeovers(db: Database) -> None:
    """How often a running update job was taken from a worker that was gone (killed, crashed, hung past its lease),
    and from whom: `keem jobs list` shows it. Postgres: pg005."""
    db.table("update_jobs").add_column("takeovers", int, not_null_default=0)
    db.table("update_jobs").add_column("taken_from", str)


@schema
def m017_api_state(db: Database) -> None:
    """The HTTP API's state in the store, not in a process (memory/store/api_state.py): each user's open API
    conversation (`api_conversations`, one row per user naming its session) and the Idempotency-Keys of their recent
    requests (`api_requests`: the key's SHA-256, the body's digest, the ids of the turns stored and the reply; never
    text). Postgres: pg006."""
    db.execute(
        """create table api_conversations (
        user_id integer primary key references users(id) on delete cascade,
        session_id integer not null references sessions(id) on delete cascade,
        opened_at text not null
        )"""
    )
    db.execute(
        """create table api_requests (
        id integer primary key autoincrement,
        user_id integer not null references users(id) on delete cascade,
        key_hash text not null,
        digest text not null,
        session_id integer not null references sessions(id) on delete cascade,
        turn_id integer,
        reply_id integer,
        turn_ids text not null default '[]',
        created_at text not null
        )"""
    )
    db.execute("create unique index api_requests_key on api_requests (user_id, key_hash)")


@schema
def m018_api_rates(db: Database) -> None:
    """The HTTP API's rate counters in the store, not in a process (memory/store/tokens.py `Tokens.take`): a row per
    token and caller (the SHA-256 of the user an app token names; '' for a user's own token) holding when its next
    request is due ("theoretical arrival time", epoch seconds) and whether the last one was refused. A row goes
    with its token, and with the user an app token named when they are forgotten. Postgres: pg007."""
    db.execute(
        """create table api_rates (
        token_id integer not null references api_tokens(id) on delete cascade,
        caller text not null,
        tat real not null,
        refused integer not null default 0,
        primary key (token_id, caller)
        ) without rowid"""
    )


# -- Postgres ---------------------------------------------------------------------------------------------------------
# The same schema on Postgres (memory/store/postgres.py applies it; docs/postgres.md). Numbered apart from the SQLite
# set, which grew by small steps: pg001 is the SQLite schema as of m012. EVERY future schema change needs a migration
# in BOTH sets (the next m0NN above and the next pg0NN here), or one engine's store drifts from the other's.
# Ids are identity columns (GENERATED ALWAYS): a sequence never goes back, even after a rollback, so ids are never
# reused, as AUTOINCREMENT promises on SQLite. Vectors are bytea (SQLite BLOB), epoch seconds double precision (REAL).
schema.add_postgres(
    "pg001_schema_of_m012",
    """
    create table users (
        id bigint generated always as identity primary key,
        name text not null,
        created_at text not null,
        strategy text);
    create unique index idx_users_name on users (name);
    create table sessions (
        id bigint generated always as identity primary key,
        user_id bigint not null references users (id),
        started_at text not null,
        ended_at text,
        strategy text,
        chat_model text,
        status text not null,
        end_reason text);
    create index idx_sessions_user_id_started_at on sessions (user_id, started_at);
    create table turns (
        id bigint generated always as identity primary key,
        session_id bigint not null references sessions (id),
        user_id bigint not null references users (id),
        role text not null,
        text text not null,
        created_at text not null,
        reply_to bigint,
        mark text);
    create index idx_turns_session_id_id on turns (session_id, id);
    create table memory_versions (
        id bigint generated always as identity primary key,
        user_id bigint not null references users (id),
        number integer not null,
        session_id bigint,
        strategy text not null,
        status text not null,
        model_spec text,
        prompt_hash text,
        author text not null,
        note text,
        details text,
        created_at text not null);
    create unique index idx_memory_versions_user_id_number on memory_versions (user_id, number);
    create table memory_sentences (
        id bigint generated always as identity primary key,
        version_id bigint not null references memory_versions (id),
        user_id bigint not null references users (id),
        position integer not null,
        text text not null,
        embedding bytea,
        embedder text,
        provenance text not null,
        origin_id bigint,
        cues text,
        cue_embedding bytea,
        sources text);
    create index idx_memory_sentences_version_id_position on memory_sentences (version_id, position);
    create table update_jobs (
        id bigint generated always as identity primary key,
        user_id bigint not null references users (id),
        session_id bigint not null references sessions (id),
        strategy text not null,
        status text not null,
        stage text,
        attempts integer not null default 0,
        last_error text,
        version_id bigint,
        created_at text not null,
        updated_at text,
        owner text,
        lease_until double precision,
        next_attempt_at double precision);
    create index idx_update_jobs_status_id on update_jobs (status, id);
    create unique index idx_update_jobs_session_id on update_jobs (session_id);
    create table data_generation (id integer primary key check (id = 1), forgets bigint not null);
    insert into data_generation (id, forgets) values (1, 0);
    create table erasures (
        id bigint generated always as identity primary key,
        kind text not null,
        user_id bigint,
        rows integer not null,
        details text,
        created_at text not null);
    create table emotion_records (
        id bigint generated always as identity primary key,
        version_id bigint not null references memory_versions (id) on delete cascade,
        user_id bigint not null references users (id) on delete cascade,
        position integer not null,
        key text not null,
        emotion text not null,
        cause text not null,
        status text not null check (status in ('ongoing', 'resolved', 'past')),
        sentence_id bigint references memory_sentences (id) on delete cascade,
        quote text not null default '',
        first_seen text not null,
        last_seen text not null,
        first_session bigint,
        last_session bigint,
        due text,
        ended text,
        ended_at text);
    create index emotion_records_version on emotion_records (version_id, position);
    create index emotion_records_user on emotion_records (user_id);
    create table session_openings (
        session_id bigint primary key references sessions (id) on delete cascade,
        user_id bigint not null references users (id) on delete cascade,
        record_key text not null,
        turn_id bigint references turns (id) on delete cascade,
        created_at text not null);
    create index session_openings_user on session_openings (user_id, session_id);
    """,
)

schema.add_postgres(
    "pg002_api_tokens",
    """
    create table api_tokens (
        id bigint generated always as identity primary key,
        hash text not null unique,
        user_id bigint references users (id) on delete cascade,
        app integer not null default 0,
        label text not null default '',
        created_at text not null,
        last_used_at text,
        revoked_at text);
    create index api_tokens_user on api_tokens (user_id);
    """,
)


def pg003_version_notes(conn: Any) -> None:
    """m014 on Postgres: `note` becomes `notes`, each old note converted to its entries in place."""
    conn.execute("alter table memory_versions rename column note to notes")
    for row in conn.execute("select id, notes from memory_versions where notes is not null").fetchall():
        conn.execute(
            "update memory_versions set notes = %s where id = %s", [dumps(from_legacy(row["notes"])), row["id"]]
        )


schema.add_postgres("pg003_version_notes", pg003_version_notes)

schema.add_postgres("pg004_sentence_dates", "alter table memory_sentences add column dates text;")

schema.add_postgres(
    "pg005_job_takeovers",
    "alter table update_jobs add column takeovers integer not null default 0; "
    "alter table update_jobs add column taken_from text;",
)

schema.add_postgres(
    "pg006_api_state",
    """
    create table api_conversations (
        user_id bigint primary key references users (id) on delete cascade,
        session_id bigint not null references sessions (id) on delete cascade,
        opened_at text not null);
    create table api_requests (
        id bigint generated always as identity primary key,
        user_id bigint not null references users (id) on delete cascade,
        key_hash text not null,
        digest text not null,
        session_id bigint not null references sessions (id) on delete cascade,
        turn_id bigint,
        reply_id bigint,
        turn_ids text not null default '[]',
        created_at text not null);
    create unique index api_requests_key on api_requests (user_id, key_hash);
    """,
)

schema.add_postgres(
    "pg007_api_rates",
    # unlogged: a count needs no WAL flush (Connection.atomic_counter); a Postgres crash empties the table, which
    # lets every caller start with a full bucket, and a standby does not have it
    """
    create unlogged table api_rates (
        token_id bigint not null references api_tokens (id) on delete cascade,
        caller text not null,
        tat double precision not null,
        refused integer not null default 0,
        primary key (token_id, caller));
    """,
)
