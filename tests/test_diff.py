"""One version diff by origin (memory/diff.py): `keem memory history`, the memory tab's history (its changelogs)
and the trial export agree."""

from __future__ import annotations

import json

import pytest

from chatbot.cli.main import main
from chatbot.localtime import KOREA, local_time
from chatbot.trials.export import export
from chatbot.web.render import md
from chatbot.web.why import render_versions
from memory.changelog import changelogs
from memory.diff import version_diff
from memory.engine import MemoryEngine
from memory.store import Sentence, Store
from memory.updaters.base import carry_over
from models.embedders import NgramEmbedder

SEOUL, CAT, SWIM = "사용자는 서울에 산다", "사용자는 고양이를 키운다", "사용자는 수영을 배운다"
BUSAN, PIANO = "사용자는 부산으로 이사했다", "사용자는 피아노를 배우기 시작했다"


@pytest.fixture
def history(tmp_path, monkeypatch):
    """v1: three sentences; v2: one kept, one rewritten, one deleted, one added."""
    path = tmp_path / "diff.db"
    monkeypatch.setenv("KEEM_DB", str(path))
    store = Store(path)
    engine = MemoryEngine(store, NgramEmbedder())
    uid = store.users.get_or_create("민수")
    meta = {"status": "ok", "author": "updater"}
    v1 = engine.commit(uid, [Sentence(SEOUL), Sentence(CAT), Sentence(SWIM)], base=None, strategy="import", **meta)
    seoul, cat, _swim = v1.sentences
    engine.commit(
        uid,
        [Sentence(BUSAN, "rewritten", seoul.id), *carry_over([cat]), Sentence(PIANO, "added")],
        base=v1.number,
        strategy="keem",
        **meta,
    )
    yield store, uid
    store.close()


def test_a_rewrite_is_one_rewrite_not_a_removal_and_an_addition(history):
    store, uid = history
    v1, v2 = store.versions.of_user(uid)
    d = version_diff(v1, v2)
    assert (d.kept, d.added, d.removed, d.rewritten) == ([CAT], [PIANO], [SWIM], [(SEOUL, BUSAN)])
    first = version_diff(None, v1)
    assert first.added == [SEOUL, CAT, SWIM] and not (first.kept or first.removed or first.rewritten)


def test_a_sentence_without_an_origin_is_kept_when_its_text_was_there():
    """Versions written before origins were recorded: the same text is the same sentence, once."""
    from memory.store import Version

    def version(number, *sentences):
        return Version(number, 1, number, None, "import", "ok", None, None, "import", "", tuple(sentences))

    old = version(1, Sentence(CAT, id=1), Sentence(SEOUL, id=2))
    new = version(2, Sentence(CAT, id=3), Sentence(CAT, id=4), Sentence(BUSAN, id=5))
    d = version_diff(old, new)
    assert (d.kept, d.added, d.removed, d.rewritten) == ([CAT], [CAT, BUSAN], [SEOUL], [])


def _tab_diff(store: Store, uid: int) -> dict[int, dict[str, object]]:
    """What the memory tab's history shows, per version: its changelog (memory/changelog.py, drawn by
    chatbot/web/why.py render_versions) classified, each sentence checked to be in that version's block."""
    versions = store.versions.of_user(uid)
    logs = changelogs(store, versions)
    markdown = render_versions(versions, logs, show_strategy=True, local=local_time(KOREA))
    shown = {}
    for v, log in zip(versions, logs, strict=True):
        block = markdown.split(f'id="version-{v.number}"')[1].split("</details>")[0]
        texts = [e.text for e in log.entries if e.kind in ("added", "dropped")]
        assert all(md(t) in block for t in texts), block
        shown[v.number] = {
            "counts": tuple(len(log.of(k)) for k in ("kept", "added", "dropped", "rewritten")),
            "added": [e.text for e in log.of("added")],
            "removed": [e.text for e in log.of("dropped")],
            "rewritten": [(e.old, e.text) for e in log.of("rewritten")],
        }
    return shown


def test_cli_history_and_the_memory_tab_classify_the_same_sentences_the_same_way(history, capsys, tmp_path):
    store, uid = history
    assert main(["memory", "history", "--user", "민수", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    tab = _tab_diff(store, uid)
    assert rows[1]["kept"] == [CAT] and rows[1]["rewritten"] == [{"old": SEOUL, "new": BUSAN}]
    for row in rows:
        shown = tab[row["version"]]
        counts = tuple(len(row[k]) for k in ("kept", "added", "removed", "rewritten"))
        assert shown["counts"] == counts
        assert shown["added"] == row["added"] and shown["removed"] == row["removed"]
        assert shown["rewritten"] == [(c["old"], c["new"]) for c in row["rewritten"]]
    # the trial export's memory_versions.jsonl carries the same diff
    export(store, tmp_path / "out", scrub=False, local=local_time(KOREA))
    lines = (tmp_path / "out" / "memory_versions.jsonl").read_text(encoding="utf-8").splitlines()
    exported = [json.loads(line)["changes"] for line in lines]
    assert exported == [{k: row[k] for k in ("kept", "added", "removed", "rewritten")} for row in rows]
    # and the text form names the rewrite
    assert main(["memory", "history", "--user", "민수"]) == 0
    out = capsys.readouterr().out
    assert "kept 1, added 1, removed 1, rewritten 1" in out and f"~ {SEOUL} -> {BUSAN}" in out
