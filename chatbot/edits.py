"""A person's own changes to their memory, for every front end (the page's memory tab, the HTTP API): edit, delete
or add a sentence, each a new version by the user made on the version the person saw (its base: a change made
meanwhile by another tab or an update is kept or the edit is refused, memory/store/rebase.py).

A sentence a person writes is put in time as an update's is (memory/updaters/timeline.py): "다음 주 화요일에 치과"
written today is stored with that Tuesday's date and the words written beside it, so it does not mean another
Tuesday next week, and a plan already past reads as past."""

from __future__ import annotations

from chatbot.session import clean_message
from memory.engine import MemoryEngine
from memory.store import Note, Sentence, Version, note
from memory.updaters.base import carry_over
from memory.updaters.timeline import put_in_time
from models.errors import InputError

SENTENCE_CHARS = 300  # the longest memory sentence a person may write


def clean_sentence(text: str) -> str:
    """A memory sentence as typed: control characters and outer space gone, one line, refused when empty or long."""
    return clean_message(text, SENTENCE_CHARS).replace("\n", " ")


def index_of(version: Version, sentence_id: int) -> int:
    """Where the sentence with this id is in `version`; refused (sentence_unknown) when it is not there."""
    for index, sentence in enumerate(version.sentences):
        if sentence.id == sentence_id:
            return index
    raise InputError(
        f"memory v{version.number} has no sentence {sentence_id}; read the memory again and pick one of its ids",
        code="sentence_unknown",
        number=version.number,
    )


def edit(engine: MemoryEngine, user_id: int, shown: Version, index: int, text: str) -> Version:
    """Sentence `index` of the version the person saw, rewritten as `text` (cleaned here)."""
    text = clean_sentence(text)
    sentences = carry_over(shown.sentences)
    sentences[index] = _in_time(engine, Sentence(text, "user", shown.sentences[index].id))
    return _commit(engine, user_id, shown, sentences, note("edited", sentence=index + 1))


def delete(engine: MemoryEngine, user_id: int, shown: Version, index: int) -> Version:
    """Sentence `index` of the version the person saw, left out; the last sentence cannot go (forget instead)."""
    if len(shown.sentences) == 1:
        raise InputError(
            "the memory's last sentence cannot be deleted (a memory is never empty); forget the user to remove all",
            code="delete_last_sentence",
        )
    sentences = carry_over(s for i, s in enumerate(shown.sentences) if i != index)
    return _commit(engine, user_id, shown, sentences, note("deleted", sentence=index + 1))


def add(engine: MemoryEngine, user_id: int, text: str) -> Version:
    """`text` added to whatever memory is latest when it commits (so its base is the latest now)."""
    text = clean_sentence(text)
    latest = engine.current(user_id)
    old = carry_over(latest.sentences) if latest else []
    return _commit(engine, user_id, latest, [*old, _in_time(engine, Sentence(text, "user"))], note("added"))


def _in_time(engine: MemoryEngine, sentence: Sentence) -> Sentence:
    """The person's sentence with its times resolved against their today (where they live: the engine's `day`)."""
    (timed,), _ = put_in_time([], [sentence], engine.today())
    return timed


def _commit(engine: MemoryEngine, user_id: int, base: Version | None, sentences: list[Sentence], why: Note) -> Version:
    return engine.commit(
        user_id,
        sentences,
        base=base.number if base else None,
        strategy="user",
        status="ok",
        author="user",
        notes=[why],
    )
