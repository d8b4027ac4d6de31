"""`keem eval updater`: a trained updater's memories against the dataset's references, beside any other model.

On the rows of the episodes a `keem train-updater` run held out (its DIR/training.json), each model runs the
app's update exactly as the app does (memory/updaters/steps.py: the same prompts, budgets, cut-answer rule,
scoped rewrite, deletion guard with the model as judge, verification by the model, `attempts` tries, the
fallback to previous memory + reflected summary) from the row's previous memory and reflected summary, with the
session's dialogue read from the corpus the dataset was built from. Measured per model, against the row's
reference memory:
  - unchanged facts kept verbatim: of the previous sentences the reference keeps word for word, the share the
    model's own rewrite keeps word for word (of those sent to it: a scoped rewrite carries the untouched ones
    past the model, counted apart), and the share in the memory the app would commit (after the guard, or the
    fallback);
  - keyword recall@10: the reference memory's top-10 TextRank keywords (evaluation/metrics/keywords.py) found in the
    committed memory; reference sentences reproduced word for word;
  - guard restores per update, verification pass rate (the rest fall back), answers cut at their budget;
  - prompt and completion tokens and seconds per update (every call of it: update, guard judge, verify).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory.words import plural
from models.errors import InputError

HELP = "compare trained updaters' memories with the dataset's references on held-out episodes (report.md)"
EXAMPLE = (
    "keem eval updater --data keem_ds/ --model hf:MLP-KTLim/llama-3-Korean-Bllossom-8B+lora:runs/updater "
    "--model openai:gpt-4o --out runs/updater-eval"
)
KEYWORDS = 10


def register_eval() -> None:
    """Add `updater` to `keem eval` (evaluation/commands/eval.py's registry); idempotent."""
    from evaluation.commands import eval as eval_command

    if "updater" not in eval_command.EVAL_COMMANDS:
        eval_command.register("updater", HELP, add_arguments=add_arguments, run=run, example=EXAMPLE)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from memory.updaters.steps import DEFAULT_CEILING

    p.add_argument("--data", type=Path, required=True, help="the `keem build-dataset` folder (or its dataset.jsonl)")
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="SPEC",
        help="a model to measure (repeat for side-by-side columns): hf:<base>+lora:<DIR>, hf:<folder>, "
        "openai:<model>, ...",
    )
    p.add_argument(
        "--split",
        type=Path,
        help="a train-updater folder (or its training.json) whose validation "
        "episodes to use (default: the first +lora: folder's, or a merged "
        "folder's)",
    )
    p.add_argument("--all-rows", action="store_true", help="every passing row, not only held-out episodes")
    p.add_argument(
        "--corpus",
        type=Path,
        help="the corpus the dataset was built from, for the dialogues (default: "
        "the path the rows record, else that file name beside the data)",
    )
    p.add_argument("--limit", type=int, help="only the first N held-out rows")
    p.add_argument(
        "--update-max-tokens",
        type=int,
        default=DEFAULT_CEILING,
        help=f"KEEM_UPDATE_MAX_TOKENS: the output budget one update plans for (default {DEFAULT_CEILING})",
    )
    p.add_argument(
        "--attempts", type=int, default=2, help="update attempts before the fallback, as the app (default 2)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--out", type=Path, required=True, help="output folder (report.md, result.json, updates.jsonl)")


# -- which rows, which dialogues ---------------------------------------------------------------------
def training_record(path: Path) -> dict[str, Any] | None:
    from training.state import STATE

    file = path / STATE if path.is_dir() else path
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None


def find_split(split: Path | None, specs: list[str]) -> tuple[list[str] | None, str]:
    """(validation episode ids, where they came from); (None, why) when no training run says."""
    from models.spec import split_adapter

    if split is not None:
        record = training_record(split)
        if record is None:
            raise InputError(f"no training record at {split}; give the --out folder of `keem train-updater`")
        return record["data"]["split"]["validation"], str(split)
    for spec in specs:
        if spec.startswith("hf:"):
            base, adapter = split_adapter(spec[3:])
            record = training_record(Path(adapter or base))
            if record is not None:
                return record["data"]["split"]["validation"], adapter or base
    return None, "no training run named (--split): every passing row"


def corpus_episodes(rows: list[dict[str, Any]], data: Path, corpus: Path | None) -> dict[str, Any]:
    """The episodes the rows were built from, by id (their dialogues feed the guard and the verifier)."""
    from evaluation.corpora.episodes import read_episodes

    source = rows[0].get("source") or {}
    if corpus is None:
        recorded = Path(source.get("path") or "")
        folder = data if data.is_dir() else data.parent
        candidates = [recorded, folder / recorded.name] if recorded.name else []
        corpus = next((p for p in candidates if p.is_file() or p.is_dir()), None)
        if corpus is None:
            raise InputError(
                f"cannot find the corpus the dataset was built from ({recorded or 'not recorded'}); "
                "pass it with --corpus"
            )
    episodes = read_episodes(corpus, source.get("format") or "auto")
    return {e.id: e for e in episodes}


# -- one model --------------------------------------------------------------------------------------
def _recording(ask: Callable[[str, str, int], Any], calls: list[dict[str, Any]]) -> Callable[[str, str, int], Any]:
    def recorded(stage: str, prompt: str, budget: int) -> Any:
        started = time.perf_counter()
        answer = ask(stage, prompt, budget)
        calls.append(
            {
                "stage": stage,
                "finish": answer.finish.reason,
                "prompt_tokens": answer.finish.prompt_tokens or 0,
                "completion_tokens": answer.finish.completion_tokens or 0,
                "seconds": time.perf_counter() - started,
            }
        )
        return answer

    return recorded


def update_row(model: Any, row: dict[str, Any], episode: Any, *, ceiling: int, attempts: int) -> dict[str, Any]:
    """The app's update of one row with `model`, and what it kept, restored and cost."""
    from memory.updaters.base import accumulate, memory_of
    from memory.updaters.steps import Steps, model_ask
    from memory.updaters.timeline import put_in_time
    from training.data import row_dates

    t = int(row["session_index"])
    if t > len(episode.sessions):
        raise InputError(
            f"row {row['key']}: episode {episode.id} of the corpus has no session {t}; is --corpus the "
            "file the dataset was built from?"
        )
    dialogue = episode.sessions[t - 1].dialogue()
    previous = memory_of(row["previous_memory"])
    reflected = list(row["reflected_summary"])
    session_date, previous_date = row_dates(row)
    calls: list[dict[str, Any]] = []
    steps = Steps(_recording(model_ask(model), calls), model.count_tokens, model.context_window, ceiling)
    started = time.perf_counter()
    new, details = steps.update(
        previous, reflected, dialogue, session_date=session_date, previous_date=previous_date, attempts=attempts
    )
    if new is not None:  # times absolute, past plans past: as the app's and the builder's updates end
        new = put_in_time(previous, new, session_date)[0]
    seconds = time.perf_counter() - started
    touched = details["scope"]["shown"] if "scope" in details else None  # what the update showed the model
    carried = set() if touched is None else {s.text for i, s in enumerate(previous) if i not in set(touched)}
    committed = [s.text for s in new] if new is not None else [s.text for s in accumulate(previous, reflected)]
    first = details["attempts"][0] if details["attempts"] else {"memory": [], "guard": []}
    last = details["attempts"][-1] if details["attempts"] else {"guard": []}
    reference = list(row["memory"])
    must_keep = [p for p in row["previous_memory"] if p in reference]
    sent = [p for p in must_keep if p not in carried]  # what went through the model
    return {
        "key": row["key"],
        "status": "ok" if new is not None else "fallback",
        "memory": committed,
        "generated": first["memory"],
        "reference": reference,
        "carried": len(carried),
        "must_keep": len(must_keep),
        "must_keep_sent": len(sent),
        "kept_own": sum(p in first["memory"] for p in sent),
        "kept_committed": sum(p in committed for p in must_keep),
        "reproduced": sum(r in committed for r in reference),
        "restored": sum(d["action"] == "restored" for d in last.get("guard", [])),
        "cut": sum(c["finish"] == "length" for c in calls),
        "calls": len(calls),
        "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
        "completion_tokens": sum(c["completion_tokens"] for c in calls),
        "seconds": seconds,
        "problem": last.get("problem"),
    }


def summarize(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """One model's table column from its per-row results (keyword recall added by `measure`)."""
    n = max(len(updates), 1)
    must = sum(u["must_keep"] for u in updates)
    sent = sum(u["must_keep_sent"] for u in updates)
    return {
        "rows": len(updates),
        "kept_verbatim_own": sum(u["kept_own"] for u in updates) / sent if sent else None,
        "kept_verbatim_committed": sum(u["kept_committed"] for u in updates) / must if must else None,
        "reference_reproduced": sum(u["reproduced"] for u in updates)
        / max(sum(len(u["reference"]) for u in updates), 1),
        "carried_per_update": sum(u["carried"] for u in updates) / n,
        "guard_restores_per_update": sum(u["restored"] for u in updates) / n,
        "verification_pass_rate": sum(u["status"] == "ok" for u in updates) / n,
        "cut_answers": sum(u["cut"] for u in updates),
        "calls_per_update": sum(u["calls"] for u in updates) / n,
        "prompt_tokens_per_update": sum(u["prompt_tokens"] for u in updates) / n,
        "completion_tokens_per_update": sum(u["completion_tokens"] for u in updates) / n,
        "seconds_per_update": sum(u["seconds"] for u in updates) / n,
    }


def measure(
    model: Any, rows: list[dict[str, Any]], episodes: dict[str, Any], *, ceiling: int, attempts: int, progress: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from evaluation.metrics.keywords import keyword_recall, nouns

    iterator: Any = rows
    if progress:
        from tqdm import tqdm

        iterator = tqdm(rows, unit="update", desc=f"eval {model.spec}", dynamic_ncols=True)
    updates = [
        update_row(model, row, episodes[row["episode_id"]], ceiling=ceiling, attempts=attempts) for row in iterator
    ]
    docs = [[nouns(s) for s in u["reference"]] for u in updates]
    recalls = keyword_recall(docs, [u["memory"] for u in updates], sizes=(KEYWORDS,)) if updates else []
    for u, r in zip(updates, recalls):
        u["keyword_recall"] = r[KEYWORDS]
    summary = summarize(updates)
    summary["keyword_recall"] = sum(r[KEYWORDS] for r in recalls) / len(recalls) if recalls else None
    return summary, updates


# -- the command -----------------------------------------------------------------------------------
ROWS = [
    ("rows", "held-out updates", "n"),
    ("kept_verbatim_own", "unchanged facts kept verbatim by the model", "pct"),
    ("kept_verbatim_committed", "... in the committed memory (after guard / fallback)", "pct"),
    ("keyword_recall", f"keyword recall@{KEYWORDS} of the reference", "f"),
    ("reference_reproduced", "reference sentences reproduced verbatim", "pct"),
    ("carried_per_update", "sentences a scoped rewrite carried past the model, per update", "f"),
    ("guard_restores_per_update", "guard restores per update", "f"),
    ("verification_pass_rate", "verification pass rate (the rest fall back)", "pct"),
    ("cut_answers", "answers cut at their budget", "n"),
    ("calls_per_update", "model calls per update", "f"),
    ("prompt_tokens_per_update", "prompt tokens per update", "int"),
    ("completion_tokens_per_update", "completion tokens per update", "int"),
    ("seconds_per_update", "seconds per update", "f"),
]


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "–"
    return {"pct": f"{100 * value:.1f}%", "f": f"{value:.2f}", "int": f"{value:,.0f}"}.get(kind, str(value))


def table(results: dict[str, dict[str, Any]]) -> str:
    from evaluation.report import md_table

    specs = list(results)
    return md_table(
        ["", *[f"`{s}`" for s in specs]],
        [[label, *[_cell(results[s].get(key), kind) for s in specs]] for key, label, kind in ROWS],
    )


def run(args: argparse.Namespace, load_model: Callable[[str], Any]) -> int:
    from evaluation.files import file_sha256
    from evaluation.report import base_meta
    from training.data import dataset_file, passing, read_rows

    if (args.limit is not None and args.limit < 1) or args.attempts < 1 or args.update_max_tokens < 1:
        raise InputError("--limit, --attempts and --update-max-tokens must be at least 1")
    if len(set(args.model)) != len(args.model):
        raise InputError("--model names a model twice")
    rows = passing(read_rows(args.data))
    held, where = (None, "--all-rows: every passing row") if args.all_rows else find_split(args.split, args.model)
    if held is not None:
        rows = [r for r in rows if r["episode_id"] in set(held)]
        if not rows:
            raise InputError(
                f"the training run ({where}) held out no episode of {args.data}; pass --all-rows, or the "
                "dataset it was trained on"
            )
    rows = rows[: args.limit] if args.limit else rows
    if not rows:
        raise InputError(f"{args.data} has no passing rows to evaluate")
    episodes = corpus_episodes(rows, args.data, args.corpus)
    missing = sorted({r["episode_id"] for r in rows} - set(episodes))
    if missing:
        raise InputError(
            f"the corpus has no episode {', '.join(missing[:3])}; pass the file the dataset was built "
            "from with --corpus"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    with (args.out / "updates.jsonl").open("w", encoding="utf-8") as log:
        for spec in args.model:
            model = load_model(spec)
            summary, updates = measure(
                model,
                rows,
                episodes,
                ceiling=args.update_max_tokens,
                attempts=args.attempts,
                progress=not args.no_progress,
            )
            results[spec] = {**summary, "description": getattr(model, "description", "")}
            for u in updates:
                log.write(json.dumps({"model": spec, **u}, ensure_ascii=False) + "\n")
            log.flush()  # one model's updates are kept if a later one fails
            del model
            _free()
    data_file = dataset_file(args.data)
    meta = {
        **base_meta(),
        "data": str(data_file),
        "data_sha256": file_sha256(data_file),
        "held_out": where,
        "episodes": sorted({r["episode_id"] for r in rows}),
        "rows": len(rows),
        "attempts": args.attempts,
        "update_max_tokens": args.update_max_tokens,
        "arguments": {k: str(v) for k, v in vars(args).items() if k not in ("command", "eval_command")},
    }
    result = {"meta": meta, "models": results}
    (args.out / "result.json").write_text(
        json.dumps(result, ensure_ascii=False, indent=2, default=str), encoding="utf-8"
    )
    report = write_report(result, args.out)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2, default=str))
    else:
        print(table(results))
        print(f"\nreport: {report}")
    return 0


def _free() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - the base install has torch
        pass


def write_report(result: dict[str, Any], out: Path) -> Path:
    meta = result["meta"]
    lines = [
        "# Updater evaluation",
        "",
        f"{plural(meta['rows'], 'update')} of {plural(len(meta['episodes']), 'held-out episode')} "
        f"({meta['held_out']}); "
        f"each model runs the app's update ({plural(meta['attempts'], 'attempt')}, output budget "
        f"{meta['update_max_tokens']} tokens) from the row's previous memory and reflected summary, and is "
        "compared with the row's reference memory.",
        "",
        table(result["models"]),
        "",
        "Models: " + "; ".join(f"`{s}` = {r['description'] or s}" for s, r in result["models"].items()),
        "",
        "- *kept verbatim*: of the previous sentences the reference keeps word for word, the share the model's own "
        "rewrite keeps (first attempt, of the sentences sent to it: a scoped rewrite carries the others past the "
        "model), and the share in the memory the app would commit.",
        f"- *keyword recall@{KEYWORDS}*: the reference memory's top-{KEYWORDS} TextRank nouns found in the committed "
        "memory.",
        "- tokens and seconds count every call of an update: rewrite, guard judge, verification, retries.",
        "- per-update memories: `updates.jsonl`; numbers: `result.json`.",
        "",
        "## Provenance",
        "```",
        meta["command"],
        "```",
        f"data `{meta['data']}` sha256 `{meta['data_sha256'][:16]}`; git `{meta['git_commit']}`; "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
