"""A user's life with a secret to erase, and where a copy of it could be left (the erasure, API, page and
store-contract tests)."""

from __future__ import annotations

from pathlib import Path

from memory.engine import MemoryEngine
from memory.store import Sentence, Store
from models.embedders import NgramEmbedder

PHONE = "010-2741-9386"


SECRET = f"사용자의 전화번호는 {PHONE}이다"


EARLIER = f"사용자는 {PHONE} 번호를 쓴다"  # the form the update rewrote into SECRET


SAID = f"내 번호는 {PHONE}이야 꼭 기억해줘"


ECHO = f"{PHONE} 번호를 기억해 둘게요"


KEPT = "사용자는 부산 해운대에서 고양이 두 마리를 키운다"


KEPT_TURN = "나 해운대에서 고양이 두 마리 키워"


def leftovers(folder: Path, *texts: str) -> list[str]:
    """Which of `texts` (as UTF-8 bytes) appear in any file under `folder`, with the file."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{t} in {path.name}" for t in texts if t.encode() in data]
    return found


def lived(tmp_path: Path, target: str | None = None) -> tuple[Store, MemoryEngine, int]:
    """A user with two sessions whose turns said SECRET and KEPT, and three versions (SECRET rewritten from
    EARLIER; a summary in the details that repeats it), in TMP/data/keem.db or the store at `target`."""
    store = Store(target or tmp_path / "data" / "keem.db")
    engine = MemoryEngine(store, NgramEmbedder())
    uid = store.users.get_or_create("minsu")
    for said, reply in ((SAID, ECHO), (KEPT_TURN, "고양이 이야기 좋아요")):
        sid = store.sessions.start(uid, "keem", "demo")
        store.turns.add(sid, uid, "user", said)
        store.turns.add(sid, uid, "assistant", reply)
        store.turns.add(sid, uid, "user", "오늘 날씨가 좋네")
        store.sessions.end(sid)
    v1 = engine.commit(uid, [Sentence(EARLIER)], base=None, strategy="keem", status="ok", author="updater")
    v2 = engine.commit(
        uid,
        [Sentence(SECRET, "rewritten", v1.sentences[0].id)],
        base=v1.number,
        strategy="keem",
        status="ok",
        author="updater",
        details={"summary": f"사용자는 번호가 {PHONE}이라고 말했다.\n사용자는 날씨 이야기를 했다."},
    )
    engine.commit(
        uid,
        [Sentence(SECRET, "kept", v2.sentences[0].id), Sentence(KEPT)],
        base=v2.number,
        strategy="keem",
        status="ok",
        author="updater",
    )
    return store, engine, uid
