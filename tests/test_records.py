"""A user trial's records (chatbot/study_records.py): their own migration set, databases from before it, forgetting."""

from __future__ import annotations

import re

import pytest
from sqlite_utils import Database

from chatbot.study_records import records
from chatbot.study_records import schema as trial_schema
from memory.store import Store
from memory.store.migrations import schema as memory_schema
from models.errors import MigrationError


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's store-level tests run on SQLite and on Postgres (tests/conftest.py `store_url`)."""
    return any_store


# The trial tables as memory's migration m005_trial_questionnaires made them, before they had a set of their own.
OLD_M005 = [
    """create table consents (
        id integer primary key,
        user_id integer not null references users(id) on delete cascade,
        study_id text not null,
        text_hash text not null,
        created_at text not null)""",
    "create index idx_consents_user_study on consents (user_id, study_id)",
    """create table answers (
        id integer primary key,
        session_id integer not null references sessions(id) on delete cascade,
        user_id integer not null references users(id) on delete cascade,
        study_id text not null,
        item text not null,
        kind text not null,
        question text,
        value text not null,
        created_at text not null)""",
    "create unique index idx_answers_session_item on answers (session_id, study_id, item)",
    "create index idx_answers_user on answers (user_id, study_id)",
]


def _schema(db: Database) -> dict[str, str]:
    return {r[0]: r[1] for r in db.execute("select name, sql from sqlite_master where name not like '%migrations%'")}


def _unquoted(sql: str | None) -> str | None:
    """A table's definition, whatever quoting SQLite's rename gave its name, without AUTOINCREMENT (ids never
    reused: memory m006, trials t002)."""
    if sql is None:
        return None
    sql = re.sub(
        r"^CREATE TABLE (\[(\w+)\]|\"(\w+)\"|(\w+))",
        lambda m: f"CREATE TABLE {m.group(2) or m.group(3) or m.group(4)}",
        sql,
    )
    return sql.replace(" AUTOINCREMENT", "")


def _participant(store: Store, name: str) -> tuple[int, int]:
    uid = store.users.get_or_create(name)
    sid = store.sessions.start(uid, "keem", "fake")
    store.turns.add(sid, uid, "user", "주말에 등산 갔어")
    store.sessions.end(sid)
    records(store).record_consent(uid, "pilot", "hash")
    records(store).save_answers(sid, uid, "pilot", {"remembered": 4, "comment": "좋았어요"})
    return uid, sid


def test_a_database_made_by_the_old_code_path_opens_unchanged_with_its_records(tmp_path):
    path = tmp_path / "old.db"
    db = Database(path)
    memory_schema.migrations.apply(db, stop_before="m006_ids_never_reused")  # m001..m004: unchanged since
    with db.conn:
        for sql in OLD_M005:
            db.execute(sql)
        db["_sqlite_migrations"].insert(
            {"migration_set": "keem", "name": "m005_trial_questionnaires", "applied_at": "2026-11-01 00:00:00"}
        )
        db["users"].insert({"id": 1, "name": "p1", "created_at": "2026-11-01T00:00:00+00:00"})
        db["sessions"].insert({"id": 1, "user_id": 1, "started_at": "2026-11-01T00:00:00+00:00", "status": "ended"})
        db.execute("insert into consents values (1, 1, 'pilot', 'hash', '2026-11-01T00:00:00+00:00')")
        db.execute("insert into answers values (1, 1, 1, 'pilot', 'remembered', 'likert', null, '4', 'x')")
    before = _schema(db)
    db.conn.close()

    store = Store(path)  # memory's set no longer has m005 and still accepts a database that ran it
    assert records(store).consent(1, "pilot")["text_hash"] == "hash"
    assert [a["value"] for a in records(store).answers(study_id="pilot")] == [4]
    after = _schema(store.db)
    # the trial set's first migration made nothing new: the only changes are ids never reused (memory m006, trial
    # t002: the same tables, indexes and columns, with AUTOINCREMENT and their sequences), memory m007's counter,
    # m008's reply_to column on turns, m009's audit table, m010's sources column on memory sentences, m011's
    # emotion records and openings, m012's reply marks on turns, m013's API tokens, m014's notes (renamed),
    # m015's dates column on memory sentences, m016's takeovers on update jobs, m017's API conversations and
    # Idempotency-Keys, m018's API rate counters and trial t003's organiser guess limits
    emotions = {"emotion_records", "emotion_records_version", "emotion_records_user", "session_openings"}
    emotions.add("session_openings_user")
    tokens = {"api_tokens", "api_tokens_user", "sqlite_autoindex_api_tokens_1"}
    tokens |= {"guess_limits", "sqlite_autoindex_guess_limits_1"}
    tokens |= {"api_conversations", "api_requests", "api_requests_key", "api_rates"}
    assert set(after) == set(before) | {"sqlite_sequence", "data_generation", "erasures"} | emotions | tokens
    after["turns"] = after["turns"].replace(', "reply_to" INTEGER', "").replace(', "mark" TEXT', "")
    after["memory_sentences"] = after["memory_sentences"].replace(', "sources" TEXT', "").replace(', "dates" TEXT', "")
    after["memory_versions"] = after["memory_versions"].replace('"notes" TEXT', '"note" TEXT')
    after["update_jobs"] = after["update_jobs"].replace(
        ', "takeovers" INTEGER NOT NULL DEFAULT 0, "taken_from" TEXT', ""
    )
    assert {k: _unquoted(v) for k, v in before.items()} == {k: _unquoted(after[k]) for k in before}
    assert trial_schema.applied(store.db) == trial_schema.names
    store.close()
    Store(path).close()  # and it opens again


def test_the_memory_store_alone_makes_no_trial_tables_and_the_trial_code_adds_them(tmp_path):
    store = Store(tmp_path / "k.db")
    assert not {"consents", "answers"} & set(store.db.table_names())
    records(store)
    assert {"consents", "answers"} <= set(store.db.table_names())


def test_forgetting_a_user_deletes_their_trial_records_and_no_one_elses(store):
    gone, _ = _participant(store, "p1")
    kept, kept_session = _participant(store, "p2")
    store.users.delete(gone)
    assert records(store).consent(gone, "pilot") is None and records(store).answers(user_id=gone) == []
    assert records(store).consent(kept, "pilot") is not None
    assert {a["session_id"] for a in records(store).answers(study_id="pilot")} == {kept_session}


def test_trial_records_written_by_a_newer_keem_are_refused(tmp_path):
    store = Store(tmp_path / "k.db")
    store.db["_sqlite_migrations"].insert({"migration_set": "keem_trials", "name": "t999_future", "applied_at": "x"})
    with pytest.raises(MigrationError, match="newer keem") as refused:
        records(store)
    assert refused.value.code == "migration_newer"
