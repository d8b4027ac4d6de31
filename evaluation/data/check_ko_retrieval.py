"""Validate the Korean paraphrase retrieval benchmark (ko_retrieval.json).

Checks the file's shape (unique ids, relevant/distractor ids that exist in the
same user's memory, minimum counts), then tokenizes every query and its
relevant memory sentence(s) with Kiwi and reports whether they share a content
morpheme (tags NN*, VV*, VA*, XR, SL; lemma form). Exits non-zero when a
"shared_words" flag disagrees with Kiwi or fewer than 70% of queries share none.

Usage: python evaluation/data/check_ko_retrieval.py [path/to/ko_retrieval.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kiwipiepy import Kiwi

from memory.korean import kiwi as shared_kiwi

DEFAULT_PATH = Path(__file__).with_name("ko_retrieval.json")
CONTENT_TAGS = ("NN", "VV", "VA", "XR", "SL")
MIN_USERS, MIN_MEMORY, MIN_QUERIES, MIN_QUERIES_PER_USER = 10, 90, 75, 7
MEMORY_PER_USER, MIN_NO_SHARED = range(8, 13), 0.70


def content_morphemes(kiwi: Kiwi, text: str) -> set[str]:
    """Return the lemma forms of the content morphemes of `text`.

    Forms are compared without their tag, so a stem counts as shared even when
    Kiwi tags it differently in the two sentences (the stricter reading).
    """
    out: set[str] = set()
    for tok in kiwi.tokenize(text):
        tag = tok.tag.split("-")[0]  # Kiwi marks irregular stems as e.g. VV-R
        if tag.startswith(CONTENT_TAGS):
            out.add(tok.form.lower())
    return out


def validate_shape(data: dict[str, Any]) -> list[str]:
    """Return a list of structural errors (empty when the file is well formed)."""
    errors: list[str] = []
    users = data.get("users", [])
    if not isinstance(data.get("description"), str) or not data["description"].strip():
        errors.append("missing description")
    seen: set[str] = set()
    for user in users:
        ids = [m["id"] for m in user["memory"]] + [q["id"] for q in user["queries"]]
        errors += [f"duplicate id {i}" for i in sorted({i for i in ids if i in seen or ids.count(i) > 1})]
        seen.update(ids)
        memory_ids = {m["id"] for m in user["memory"]}
        if len(user["memory"]) not in MEMORY_PER_USER:
            errors.append(f"{user['user']}: {len(user['memory'])} memory sentences")
        if len(user["queries"]) < MIN_QUERIES_PER_USER:
            errors.append(f"{user['user']}: only {len(user['queries'])} queries")
        for q in user["queries"]:
            if not q["relevant"] or not q["distractors"]:
                errors.append(f"{q['id']}: empty relevant or distractors")
            if set(q["relevant"]) & set(q["distractors"]):
                errors.append(f"{q['id']}: id is both relevant and distractor")
            errors += [f"{q['id']}: unknown id {i}" for i in q["relevant"] + q["distractors"] if i not in memory_ids]
            if not isinstance(q.get("shared_words"), bool):
                errors.append(f"{q['id']}: shared_words must be a bool")
    n_mem = sum(len(u["memory"]) for u in users)
    n_q = sum(len(u["queries"]) for u in users)
    if len(users) < MIN_USERS or n_mem < MIN_MEMORY or n_q < MIN_QUERIES:
        errors.append(f"counts too low: {len(users)} users, {n_mem} memory, {n_q} queries")
    return errors


def main(path: Path) -> int:
    data = json.loads(path.read_text(encoding="utf-8"))
    errors = validate_shape(data)
    kiwi = shared_kiwi()
    total = no_shared = 0
    for user in data["users"]:
        text_of = {m["id"]: m["text"] for m in user["memory"]}
        for q in user["queries"]:
            rel = set().union(*(content_morphemes(kiwi, text_of.get(i, "")) for i in q["relevant"]))
            shared = sorted(content_morphemes(kiwi, q["text"]) & rel)
            total += 1
            no_shared += not shared
            mark = "ok  " if bool(shared) == q.get("shared_words") else "FLAG"
            print(f"{mark} {q['id']:<7} shared={','.join(shared) or '-':<20} {q['text']}")
            if mark == "FLAG":
                errors.append(f"{q['id']}: shared_words={q.get('shared_words')} but Kiwi found {shared or 'none'}")
    n_mem = sum(len(u["memory"]) for u in data["users"])
    ratio = no_shared / total if total else 0.0
    print(f"\nusers={len(data['users'])} memory={n_mem} queries={total} no_shared={no_shared} ({ratio:.1%})")
    if ratio < MIN_NO_SHARED:
        errors.append(f"only {ratio:.1%} of queries share no content morpheme (< 70%)")
    for e in errors:
        print("ERROR:", e)
    print("FAIL" if errors else "PASS")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH))
