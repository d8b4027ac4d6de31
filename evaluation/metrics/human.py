"""Human evaluation: blind CSV sheets for 0-2 scoring, their import, the paper's tables and rater agreement.

Export writes one sheet per rater (same items, each rater's own shuffled order) and a key file mapping item
ids to strategy, episode and session; the sheets never name the strategy. Two tasks:
- `reflection`: does the memory state the user's emotions with their causes where the dialogue supports them?
- `update` (sessions 2+): did the memory apply what this session changed while keeping everything else?
  Raters also mark `update_needed` (1 if the session changed something the previous memory said).
Scores: 0 (no), 1 (partly), 2 (yes). Agreement: Krippendorff's alpha (ordinal) and Fleiss' kappa.
"""

from __future__ import annotations

import csv
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from models.errors import InputError

SCORES = (0, 1, 2)
SHEET_FIELDS = [
    "item_id",
    "task",
    "question",
    "dialogue",
    "previous_memory",
    "memory",
    "score",
    "update_needed",
    "comment",
]
KEY_FIELDS = ["item_id", "task", "strategy", "episode", "session"]
QUESTIONS = {
    "reflection": "기억이 대화에 드러난 사용자의 감정과 그 원인을 담고 있습니까? (0 아니다, 1 일부, 2 그렇다)",
    "update": "새 기억이 이번 대화로 바뀐 정보를 정확히 반영하고 나머지를 지켰습니까? (0/1/2); "
    "update_needed: 이번 대화가 이전 기억을 바꾸었으면 1, 아니면 0",
}


def _lines(texts: Sequence[str]) -> str:
    return "\n".join(texts)


def export_sheets(samples: Iterable[dict], out_dir: Path, raters: int = 3, seed: int = 0) -> dict[str, Path]:
    """samples: {strategy, episode, session, dialogue: [{role,text}], previous: [..], memory: [..]}."""
    if raters < 1:
        raise InputError("--raters must be at least 1")
    items = []
    for s in samples:
        dialogue = "\n".join(f"{'사용자' if t['role'] == 'user' else '챗봇'}: {t['text']}" for t in s["dialogue"])
        tasks = ["reflection"] + (["update"] if int(s["session"]) >= 2 else [])
        for task in tasks:
            items.append(
                {
                    "task": task,
                    "strategy": s["strategy"],
                    "episode": s["episode"],
                    "session": s["session"],
                    "dialogue": dialogue,
                    "previous_memory": _lines(s["previous"]) if task == "update" else "",
                    "memory": _lines(s["memory"]),
                }
            )
    rng = random.Random(seed)
    rng.shuffle(items)
    for number, item in enumerate(items, 1):
        item["item_id"] = f"H{number:04d}"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"key": out_dir / "key.csv"}
    with paths["key"].open("w", newline="", encoding="utf-8-sig") as f:
        w = csv.DictWriter(f, KEY_FIELDS)
        w.writeheader()
        w.writerows({k: i[k] for k in KEY_FIELDS} for i in items)
    for r in range(1, raters + 1):
        order = items[:]
        random.Random(seed * 1000 + r).shuffle(order)
        path = paths[f"rater{r}"] = out_dir / f"sheet_rater{r}.csv"
        with path.open("w", newline="", encoding="utf-8-sig") as f:
            w = csv.DictWriter(f, SHEET_FIELDS)
            w.writeheader()
            for i in order:
                w.writerow(
                    {
                        **{k: i.get(k, "") for k in SHEET_FIELDS},
                        "question": QUESTIONS[i["task"]],
                        "score": "",
                        "update_needed": "",
                        "comment": "",
                    }
                )
    return paths


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        raise InputError(f"no such file: {path}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8; save the sheet as CSV UTF-8") from None


def _int_or_none(value: str, allowed: Sequence[int], where: str) -> int | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        number = int(float(value))
    except ValueError:
        number = None
    if number not in allowed:
        raise InputError(f"{where}: '{value}' is not one of {', '.join(map(str, allowed))}; fix the sheet")
    return number


def import_sheets(key_path: Path, sheet_paths: Sequence[Path]) -> tuple[list[dict], list[dict]]:
    """(key rows, ratings {item_id, rater, score, update_needed}); blank cells are missing ratings."""
    key = _read_csv(key_path)
    known = {row["item_id"] for row in key}
    ratings = []
    for path in sheet_paths:
        for n, row in enumerate(_read_csv(path), 2):
            item = row.get("item_id", "")
            if item not in known:
                raise InputError(f"{path.name} line {n}: item '{item}' is not in {key_path.name}; wrong key file?")
            ratings.append(
                {
                    "item_id": item,
                    "rater": path.stem,
                    "score": _int_or_none(row.get("score", ""), SCORES, f"{path.name} line {n} score"),
                    "update_needed": _int_or_none(
                        row.get("update_needed", ""), (0, 1), f"{path.name} line {n} update_needed"
                    ),
                }
            )
    return key, ratings


# -- agreement ----------------------------------------------------------------------------------
def krippendorff_alpha_ordinal(units: Sequence[Sequence[int]], categories: Sequence[int] = SCORES) -> float | None:
    """Krippendorff's alpha with the ordinal metric; units are the ratings each item got (missing left out)."""
    idx = {c: i for i, c in enumerate(categories)}
    k = len(categories)
    o = np.zeros((k, k))
    for values in units:
        m = len(values)
        if m < 2:
            continue
        counts = np.bincount([idx[v] for v in values], minlength=k).astype(float)
        o += (np.outer(counts, counts) - np.diag(counts)) / (m - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if n <= 1:
        return None
    delta = np.zeros((k, k))
    for c in range(k):
        for e in range(k):
            lo, hi = min(c, e), max(c, e)
            delta[c, e] = (n_c[lo : hi + 1].sum() - (n_c[c] + n_c[e]) / 2) ** 2
    expected = (np.outer(n_c, n_c) * delta).sum()
    if expected == 0:
        return 1.0 if (o * delta).sum() == 0 else None
    return float(1 - (n - 1) * (o * delta).sum() / expected)


def fleiss_kappa(units: Sequence[Sequence[int]], categories: Sequence[int] = SCORES) -> float | None:
    """Fleiss' kappa over the items rated by the most common number of raters (>= 2)."""
    sizes = [len(u) for u in units if len(u) >= 2]
    if not sizes:
        return None
    m = max(set(sizes), key=sizes.count)
    table = np.array([[list(u).count(c) for c in categories] for u in units if len(u) == m], dtype=float)
    p_i = ((table**2).sum(axis=1) - m) / (m * (m - 1))
    p_j = table.sum(axis=0) / table.sum()
    p_e = (p_j**2).sum()
    if p_e == 1:
        return None
    return float((p_i.mean() - p_e) / (1 - p_e))


# -- tables ---------------------------------------------------------------------------------------
def tables(key: Sequence[dict], ratings: Sequence[dict]) -> dict:
    """The paper's human-evaluation tables (reflection by strategy; update need and accuracy by session step)."""
    info = {row["item_id"]: row for row in key}
    scores: dict[str, list[int]] = defaultdict(list)
    needs: dict[str, list[int]] = defaultdict(list)
    for r in ratings:
        if r["score"] is not None:
            scores[r["item_id"]].append(r["score"])
        if r["update_needed"] is not None:
            needs[r["item_id"]].append(r["update_needed"])

    def summary(item_ids: list[str]) -> dict:
        values = [v for i in item_ids for v in scores.get(i, [])]
        need = [int(np.mean(needs[i]) > 0.5) for i in item_ids if needs.get(i)]
        return {
            "items": len(item_ids),
            "ratings": len(values),
            "mean": float(np.mean(values)) if values else None,
            "full_rate": sum(v == 2 for v in values) / len(values) if values else None,
            "update_need_rate": float(np.mean(need)) if need else None,
        }

    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for item_id, row in info.items():
        groups[(row["task"], row["strategy"], "all")].append(item_id)
        if row["task"] == "update":
            groups[(row["task"], row["strategy"], f"1-{row['session']}")].append(item_id)
    out: dict = {
        "reflection": {},
        "update": defaultdict(dict),
        "agreement": {},
        "raters": sorted({r["rater"] for r in ratings}),
    }
    for (task, strategy, step), ids in sorted(groups.items()):
        if task == "reflection":
            out["reflection"][strategy] = summary(ids)
        else:
            out["update"][strategy][step] = summary(ids)
    out["update"] = dict(out["update"])
    for task in ("reflection", "update"):
        units = [scores[i] for i, row in info.items() if row["task"] == task and scores.get(i)]
        out["agreement"][task] = {
            "krippendorff_alpha_ordinal": krippendorff_alpha_ordinal(units),
            "fleiss_kappa": fleiss_kappa(units),
            "items": len(units),
        }
    return out
