"""A memory version's notes as codes with parameters (memory/store/notes.py): checked when written, rendered in
English (`keem memory history`) and Korean (the page), and notes written as text before codes converted by m014 /
pg003 on both engines, losing nothing and reading as they did."""

from __future__ import annotations

import re

import pytest
from sqlite_utils import Database

from chatbot.web.history import note_text, version_reasons
from chatbot.web.messages import NOTES
from memory.store import Note, Sentence, Store, note
from memory.store.connection import Connection
from memory.store.migrations import schema
from memory.store.notes import ENGLISH, PARAMS, english, from_legacy
from memory.store.schema import Schema
from models.errors import InputError

# notes as the page and the CLI wrote them before codes, each with its entries
KOREAN = {
    "사용자가 2번 문장을 고쳤습니다": [note("edited", sentence=2)],
    "사용자가 1번 문장을 지웠습니다": [note("deleted", sentence=1)],
    "사용자가 문장을 추가했습니다": [note("added")],
    "사용자가 빠진 문장을 되살렸습니다": [note("restored")],
    "사용자가 버전 3으로 되돌렸습니다": [note("reverted", to=3)],
    "사용자가 버전 5로 되돌렸습니다": [note("reverted", to=5)],
    "사용자가 2번 문장을 고쳤습니다; 버전 2에서 한 변경을 버전 3 위에 다시 맞춤 · [삭제됨] 사용자가 지운 문장": [
        note("edited", sentence=2),
        note("rebased_user", base=2, onto=3),
        note("erased"),
    ],
    "[삭제됨] 사용자가 지운 문장": [note("erased")],
    "메모장에 직접 쓴 말 (010-1234-5678)": [note("text", text="메모장에 직접 쓴 말 (010-1234-5678)")],
}
ENGLISH_NOTES = {
    "imported 1 sentence from one.txt": [note("imported", count=1, file="one.txt")],
    "imported 12 sentences from 내 기억.jsonl": [note("imported", count=12, file="내 기억.jsonl")],
    "LoCoMo conv-26 observations": [note("corpus", corpus="LoCoMo", conversation="conv-26")],
    "the update model wrote no usable summary; kept the user's own words (summarize: not asked, tiny; reflect: cut)": [
        note("no_summary", problems=["summarize: not asked, tiny; reflect: cut"])
    ],
    "verification failed 2 times, kept previous memory + reflected summary: 실패: 모순이 있다": [
        note("not_verified", attempts=2, problem="실패: 모순이 있다")
    ],
    "실패: 모순이 있다; emotion records: no usable answer: kept the previous emotion records (emotions: 429)": [
        note("text", text="실패: 모순이 있다"),
        note("emotions_failed", problems=["emotions: 429"]),
    ],
}


def test_a_note_is_a_known_code_with_exactly_its_parameters():
    assert note("reverted", to=3) == Note("reverted", {"to": 3})
    assert note("no_summary", problems=[]) == Note("no_summary")  # no problems: none stored
    with pytest.raises(InputError, match="unknown note code 'rewound'"):
        note("rewound")
    with pytest.raises(InputError, match=r"takes \['to'\]"):
        note("reverted")
    with pytest.raises(InputError, match="takes"):
        note("added", problems=["x"])  # only an updater's fallback carries model problems


def test_the_page_has_korean_words_for_every_note_a_users_version_carries():
    users = {"edited", "deleted", "added", "restored", "reverted", "rebased_user", "rebased_update", "erased", "text"}
    assert users <= set(NOTES) <= set(ENGLISH)
    for code, template in NOTES.items():  # "{to:으로}" names parameter `to`
        assert set(re.findall(r"{(\w+)", template)) <= PARAMS[code], code


@pytest.mark.parametrize("text", list(KOREAN))
def test_a_users_note_from_before_codes_reads_on_the_page_as_it_did(text):
    assert from_legacy(text) == KOREAN[text]
    assert note_text(from_legacy(text)) == text


@pytest.mark.parametrize("text", list(ENGLISH_NOTES))
def test_an_updaters_or_imports_note_from_before_codes_reads_in_english_as_it_did(text):
    assert from_legacy(text) == ENGLISH_NOTES[text]
    assert english(from_legacy(text)) == text


def test_english_renders_every_code_and_korean_falls_back_to_it():
    assert english([note("reverted", to=2), note("rebased_user", base=1, onto=3), note("erased")]) == (
        "the user reverted to version 2; the change made on version 1 was replayed on version 3 · "
        "[삭제됨] a sentence the user erased"
    )
    assert english([]) is None
    assert note_text([note("reverted", to=1)]) == "사용자가 버전 1로 되돌렸습니다"  # the particle fits the number
    # a code the page has no words for (an updater's) is never lost from a string: it reads in English
    assert note_text([note("no_summary")]) == ENGLISH["no_summary"]
    assert english([Note("newer_code", {"n": 1})]) == 'newer_code {"n": 1}'  # written by a newer keem


def _old_database(url: str, dialect: str) -> object:
    """A database with the schema of m013 / pg002 (notes were one text column, `note`), and a writer of rows."""
    if dialect == "sqlite":
        db = Database(url)
        schema.migrations.apply(db, stop_before="m014_version_notes")
        return db
    old = Schema("keem")
    old.postgres = schema.postgres[:2]
    assert [name for name, _ in old.postgres] == ["pg001_schema_of_m012", "pg002_api_tokens"]
    return Connection(url, old)


def test_notes_written_as_text_become_codes_on_both_engines_and_the_page_reads_the_same(store_url):
    dialect = "sqlite" if "://" not in store_url else "postgres"
    old = _old_database(store_url, dialect)
    notes = {**KOREAN, **ENGLISH_NOTES, "": []}
    authors = {**dict.fromkeys(KOREAN, "user"), **dict.fromkeys(ENGLISH_NOTES, "import"), "": "updater"}
    rows = [
        {
            "user_id": 1,
            "number": number,
            "strategy": "user",
            "status": "ok",
            "author": authors[text],
            "note": text or None,
            "details": "{}",
            "created_at": "2026-11-01T00:00:00+00:00",
        }
        for number, text in enumerate(notes, 1)
    ]
    user = {"name": "민수", "created_at": "2026-11-01T00:00:00+00:00"}
    if isinstance(old, Database):
        old["users"].insert({"id": 1, **user})
        for row in rows:
            old["memory_versions"].insert(row)
        old.conn.close()
    else:
        assert isinstance(old, Connection)
        with old.write():
            old.insert("users", user)
            for row in rows:
                old.insert("memory_versions", row)
        old.close()

    store = Store(store_url)
    assert "memory_versions" not in store.tables_with("note") and "memory_versions" in store.tables_with("notes")
    for (text, entries), version in zip(notes.items(), store.versions.of_user(1), strict=True):
        assert list(version.notes) == entries, text
        if version.author == "user":  # the page shows a user's note as it did
            assert version_reasons(version) == [text]
        else:
            assert english(version.notes) == (text or None)
    # and the store writes codes from now on, on the same rows
    v = store.versions.commit(
        1,
        [Sentence("사용자는 학생이다")],
        base=len(notes),
        strategy="user",
        status="ok",
        author="user",
        notes=[note("added")],
    )
    assert store.versions.get(1, v.number).notes == (note("added"),)
    store.close()
