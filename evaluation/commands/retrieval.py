"""`keem eval retrieval --locomo FILE`: hit@k of the product's memory search on a LoCoMo-format file.

Registered in evaluation/commands/eval.py (which also gives it --embedder and --json).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from evaluation.corpora.locomo import CATEGORY_NAMES, DEFAULT_CATEGORIES, Result, evaluate, load_locomo
from memory.fusion import DEFAULT_METHOD, METHODS
from memory.words import plural

DESCRIPTION = """\
Retrieval hit@k on a LoCoMo-format file, measured through the product's own retrieval path (a temporary
SQLite store, MemoryEngine.search, the per-user FAISS index). Each conversation sample is one user whose
memory is its observations (observation -> session_N_observation -> speaker -> [[text, dia_id], ...]);
each question of categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5 adversarial is
left out) is a query. A question is a hit when one of the top k sentences has a dialogue id among the
question's evidence ids.

The LoCoMo data is neither bundled nor downloaded (this project never fetched it): get data/locomo10.json
(data/locomo10.zip in early releases) from https://github.com/snap-research/locomo yourself, under its terms.
evaluation/fixtures/locomo_mini.json is a small hand-written file in the same format, for trying the
command and for the tests."""

EPILOG = """examples:
  keem eval retrieval --locomo locomo10.json                       # hit@5 with the configured embedder
  keem eval retrieval --locomo locomo10.json --k 10 --embedder minilm --json
  keem eval retrieval --locomo locomo10.json --retrieval dense              # the embedder alone, no BM25
  keem eval retrieval --locomo evaluation/fixtures/locomo_mini.json --embedder ngram --misses"""


def add_retrieval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--locomo", required=True, metavar="FILE", help="LoCoMo-format JSON (e.g. locomo10.json)")
    p.add_argument("--k", type=int, default=5, help="sentences retrieved per question (default 5)")
    p.add_argument(
        "--categories",
        default=",".join(map(str, DEFAULT_CATEGORIES)),
        help="question categories to score, comma-separated (default 1,2,3,4)",
    )
    p.add_argument("--misses", action="store_true", help="also list every missed question with what came back")
    p.add_argument(
        "--retrieval",
        choices=METHODS,
        help="dense, lexical or hybrid, as the app would search (KEEM_RETRIEVAL; default: the app's)",
    )


HELP = "hit@k of memory search on a LoCoMo-format file (LoCoMo itself not bundled)"


def _categories(raw: str) -> tuple[int, ...]:
    from models.errors import InputError

    try:
        found = tuple(int(c) for c in raw.replace(" ", "").split(",") if c)
    except ValueError:
        raise InputError(f"--categories {raw!r}: give numbers like 1,2,3,4") from None
    if not found:
        raise InputError("--categories is empty: give numbers like 1,2,3,4")
    return found


def _n(count: int) -> str:
    return f"{count} question" + ("" if count == 1 else "s")


def fmt(x: float | None) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def render(result: Result, path: str, with_misses: bool = False) -> str:
    data = result.as_json()
    k = result.k
    lines = [
        f"LoCoMo retrieval: {path}",
        f"embedder {result.embedder}, {result.method} retrieval, k={k}: hit@{k} = {fmt(data['hit_at_k'])} "
        f"({data['hits']}/{plural(data['queries'], 'question')}; "
        f"{plural(len(result.per_conversation), 'conversation')}, "
        f"{plural(data['observations'], 'observation')}, {data['seconds']:.1f} s)",
        "",
        f"{'category':<16}{'questions':>10}{'hits':>7}{f'hit@{k}':>9}{f'mrr@{k}':>9}{'reachable':>11}"
        f"{f'hit@{k} of reachable':>22}",
    ]
    rows = [(f"{c} {t['name']}", t) for c, t in data["per_category"].items()] + [("all", data)]
    for label, t in rows:
        lines.append(
            f"{label:<16}{t['queries']:>10}{t['hits']:>7}{fmt(t['hit_at_k']):>9}{fmt(t['mrr_at_k']):>9}"
            f"{t['reachable']:>11}{fmt(t['hit_at_k_reachable']):>22}"
        )
    lines += ["", f"{'conversation':<16}{'observations':>13}{'questions':>10}{'hits':>7}{f'hit@{k}':>9}"]
    for c in data["per_conversation"]:
        lines.append(
            f"{c['sample_id']:<16}{c['observations']:>13}{c['queries']:>10}{c['hits']:>7}{fmt(c['hit_at_k']):>9}"
        )
    notes = []
    if data["queries"] > data["reachable"]:
        notes.append(
            f"{_n(data['queries'] - data['reachable'])} whose evidence ids no observation carries "
            "(counted as misses; 'of reachable' leaves them out)"
        )
    if result.skipped_no_evidence:
        notes.append(f"{_n(result.skipped_no_evidence)} with no evidence ids skipped")
    if result.ignored_other_categories:
        notes.append(f"{_n(result.ignored_other_categories)} of other categories (e.g. 5 {CATEGORY_NAMES[5]}) ignored")
    if notes:
        lines += [""] + [f"note: {n}" for n in notes]
    if with_misses:
        lines += ["", "missed questions:"]
        for m in result.misses:
            lines.append(
                f"- [{m['sample_id']} cat {m['category']}] {m['question']}  (evidence "
                f"{', '.join(m['evidence'])}{'' if m['reachable'] else ', unreachable'})"
            )
            lines += [f"    {i}. {t}" for i, t in enumerate(m["retrieved"], 1)]
    return "\n".join(lines)


def run_retrieval(args: argparse.Namespace, load_model: Any = None) -> int:
    """The command body (the `keem eval` run signature; no chat model is needed). `args.embedder` is the one in
    force (--embedder, else KEEM_EMBEDDER, else the app's default), as `keem` resolves it."""
    from models.errors import InputError
    from models.spec import load_embedder

    if args.k < 1:
        raise InputError("--k must be at least 1")
    conversations = load_locomo(args.locomo)
    result = evaluate(
        conversations,
        load_embedder(args.embedder),
        k=args.k,
        categories=_categories(args.categories),
        method=args.retrieval or DEFAULT_METHOD,
    )
    if args.json:
        print(
            json.dumps(
                {"file": str(args.locomo), **result.as_json(with_misses=args.misses)}, ensure_ascii=False, indent=2
            )
        )
    else:
        print(render(result, str(args.locomo), with_misses=args.misses))
    return 0
