"""`keem eval ...`: the evaluation harness on the command line.

Subcommands are registered at the bottom of this module (`register`: name, help, arguments, run(args, load_model),
example); chatbot/cli/main.py builds `keem eval <name>` from `EVAL_COMMANDS`, adding the shared --json option to each
(and --embedder, KEEM_EMBEDDER, where `embedder=True`), and calls `run_eval(args)`.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.commands import retrieval as retrieval_command
from evaluation.corpora.episodes import FORMATS
from evaluation.files import file_sha256, read_json
from evaluation.metrics.conflict import MAX_PAIRS
from memory.words import plural
from models.errors import InputError, NotSupportedError

LoadModel = Callable[[str], Any]


@dataclass(frozen=True)
class EvalCommand:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, LoadModel], int]
    example: str  # one command line, or an "examples:" block
    description: str | None = None  # default: the help
    embedder: bool = False  # takes the shared --embedder option (resolved with KEEM_EMBEDDER, as the app)


EVAL_COMMANDS: dict[str, EvalCommand] = {}


def register(
    name: str,
    help_text: str,
    *,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace, LoadModel], int],
    example: str,
    description: str | None = None,
    embedder: bool = False,
) -> None:
    """Add a `keem eval <name>` subcommand (call before the parser is built)."""
    EVAL_COMMANDS[name] = EvalCommand(help_text, add_arguments, run, example, description, embedder)


def run_eval(args: argparse.Namespace, load_model: LoadModel | None = None) -> int:
    """Run `keem eval <subcommand>`; `load_model(spec) -> ChatModel` defaults to models.spec.load_chat_model."""
    if load_model is None:
        from models.spec import load_chat_model

        load_model = load_chat_model
    return EVAL_COMMANDS[args.eval_command].run(args, load_model)


# -- keem eval memory ----------------------------------------------------------------------------
MEMORY_EXAMPLE = (
    "keem eval memory --data evaluation/fixtures/carecall_eval.json --strategies keem,accumulate,"
    "operations,data --update-model openai:gpt-4o --judge openai:gpt-4o "
    "--ppl-model hf:MLP-KTLim/llama-3-Korean-Bllossom-8B --out runs/eval1"
)


def _memory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        type=Path,
        required=True,
        help="the corpus: CareCall-memory JSON (e.g. naver-ai/carecall-memory's sample), or KMSC, MSC, "
        "LoCoMo (evaluation/corpora/episodes.py lists the fields read)",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", *FORMATS],
        help="corpus format of --data (default: detected from the file)",
    )
    p.add_argument(
        "--strategies",
        default="keem,accumulate,operations",
        help="comma-separated: keem, accumulate, operations, data (= the memory the "
        "dataset gives after each session, e.g. CareCallmem's); default keem,accumulate,operations",
    )
    p.add_argument("--update-model", help="model spec for the memory updates (hf:, openai:, demo, auto)")
    p.add_argument("--judge", required=True, help="model spec of the NLI and voting judge")
    p.add_argument(
        "--nli",
        help="hf:<hub id or folder> of a 3-way NLI classifier to judge conflicts instead of the "
        "--judge LLM (e.g. a KLUE-NLI checkpoint; labels read from its config)",
    )
    p.add_argument("--ppl-model", help="hf:<id|path> model for probe-session perplexity (skipped when absent)")
    p.add_argument(
        "--chat-model",
        help="model spec writing the replies that are voted on (default: --ppl-model, else --update-model)",
    )
    p.add_argument("--limit", type=int, help="only the first N episodes")
    p.add_argument("--seed", type=int, default=0, help="recorded in the report (decoding is greedy)")
    p.add_argument("--no-conflict", action="store_true", help="skip the NLI conflict analysis")
    p.add_argument(
        "--max-pairs",
        type=int,
        default=MAX_PAIRS,
        help=f"NLI pairs judged per memory at most; a larger memory's pairs are sampled, reproducibly "
        f"(default {MAX_PAIRS}; 0 = all)",
    )
    p.add_argument("--no-voting", action="store_true", help="skip pairwise voting")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--out", type=Path, required=True, help="output folder (report.md, result.json, PNGs)")


def run_memory(args: argparse.Namespace, load_model: LoadModel) -> int:
    from evaluation import memory_eval as me
    from evaluation.metrics.conflict import ClassifierNLIJudge, NLIJudge
    from evaluation.metrics.voting import VoteJudge
    from evaluation.report import write_memory_report
    from memory.updaters import STRATEGIES
    from models.spec import load_embedder

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in (*STRATEGIES, me.DATA_STRATEGY)]
    if unknown or not strategies:
        raise InputError(
            f"unknown strategy {', '.join(unknown) or '(none)'}; choose from "
            f"{', '.join((*STRATEGIES, me.DATA_STRATEGY))}"
        )
    if len(set(strategies)) != len(strategies):
        raise InputError("--strategies names a strategy twice")
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1")
    episodes = me.load_eval_data(args.data, args.format)[: args.limit]
    if me.DATA_STRATEGY in strategies:
        me.check_data(episodes)
    show = not args.no_progress
    loaded: dict[str, Any] = {}

    def model(spec: str):
        if spec not in loaded:
            loaded[spec] = load_model(spec)
        return loaded[spec]

    needs_update = any(s != me.DATA_STRATEGY for s in strategies)
    if needs_update and not args.update_model:
        raise InputError("--update-model is required for strategies other than 'data'")
    update_model = model(args.update_model) if needs_update else None
    memories = me.build_memories(
        episodes, strategies, update_model, load_embedder(args.embedder) if needs_update else None, show
    )
    args.out.mkdir(parents=True, exist_ok=True)  # the memories are the costly part: keep them first
    (args.out / "memories.json").write_text(
        json.dumps(me.memories_json(episodes, memories), ensure_ascii=False, indent=2, default=str), encoding="utf-8"
    )
    judge_model = model(args.judge)
    samples = me.measured_samples(episodes, memories)
    meta = _memory_meta(args, episodes, samples, memories, strategies, needs_update)
    result: dict[str, Any] = {
        "meta": meta,
        "updates": me.status_counts(memories),
        "keyword_recall": me.measure_keywords(episodes, memories),
    }
    updated = me.updated_samples(memories, episodes)
    if args.no_conflict:
        result["conflict"] = {
            "strategies": {s: {"all": {}, "updated": {}} for s in strategies},
            "updated_samples": len(updated),
            "skipped": True,
        }
    else:
        nli = ClassifierNLIJudge(args.nli.removeprefix("hf:")) if args.nli else NLIJudge(judge_model)
        result["conflict"] = me.measure_conflicts(
            memories, nli, updated, show, args.max_pairs, {(e.id, t) for e, t in samples}
        )
    has_probe = bool(me.probe_episodes(episodes, memories))
    no_probe = (
        "the data has no probe sessions"
        if not any(e.probe for e in episodes)
        else "strategy 'data' has no memory before any probe session; give each probe session its 'memory'"
    )
    if args.ppl_model and has_probe:
        try:
            result["perplexity"] = me.measure_perplexity(episodes, memories, model(args.ppl_model), show)
        except NotSupportedError as exc:
            result["perplexity_skipped"] = str(exc)
    else:
        result["perplexity_skipped"] = "no --ppl-model given" if has_probe else no_probe
    chat_spec = args.chat_model or args.ppl_model or args.update_model
    if args.no_voting or not has_probe or not chat_spec or len(strategies) < 2:
        result["voting_skipped"] = (
            "--no-voting"
            if args.no_voting
            else no_probe
            if not has_probe
            else "no --chat-model"
            if not chat_spec
            else "needs two strategies"
        )
    else:
        meta["models"]["chat"] = chat_spec
        result["voting"] = me.measure_votes(episodes, memories, model(chat_spec), VoteJudge(judge_model), show)
    files = write_memory_report(result, args.out)
    _print_memory_result(args, result, files, len(samples))
    return 0


def _memory_meta(
    args: argparse.Namespace,
    episodes: list[Any],
    samples: list[Any],
    memories: dict[str, Any],
    strategies: list[str],
    needs_update: bool,
) -> dict[str, Any]:
    """The report's meta: the data and its hash, the arguments, every model and the hash of every prompt used."""
    from evaluation import memory_eval as me
    from evaluation.report import base_meta
    from memory.prompts import prompt_hash

    meta = {
        **base_meta(),
        "data": str(args.data),
        "data_sha256": file_sha256(args.data),
        "seed": args.seed,
        "format": episodes[0].source,
        "episode_ids": [e.id for e in episodes],
        "episodes": len(episodes),
        "samples": len(samples),
        "samples_left_out": me.left_out(episodes, memories),
        "strategies": strategies,
        "arguments": {k: str(v) for k, v in vars(args).items() if k not in ("command", "eval_command")},
        "models": {
            "update": args.update_model,
            "judge": args.judge,
            "nli": args.nli or args.judge,
            "ppl": args.ppl_model,
            "chat": None,
            "embedder": args.embedder if needs_update else None,
        },
        "prompt_hashes": {
            "nli_judge": prompt_hash("nli_judge"),
            "vote_judge": prompt_hash("vote_judge"),
            "chat_system": prompt_hash("chat_system"),
        },
    }
    for s in strategies:
        hashes = {st.prompt_hash for steps in memories[s].values() for st in steps if st.prompt_hash}
        if hashes:
            meta["prompt_hashes"][f"update:{s}"] = ",".join(sorted(hashes))
    return meta


def _print_memory_result(args: argparse.Namespace, result: dict[str, Any], files: dict[str, Any], samples: int) -> None:
    """`keem eval memory`'s output: the result as JSON, or where the files are and a line per strategy."""
    meta, strategies = result["meta"], result["meta"]["strategies"]
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2, default=str))
    else:
        print(f"report: {files['report']}\nresult: {files['json']}\nmemories: {args.out / 'memories.json'}")
        print(f"episodes: {', '.join(meta['episode_ids'])}; {plural(samples, 'sample')}")
        if meta["samples_left_out"]["samples"]:
            print(
                f"note: {plural(meta['samples_left_out']['samples'], 'sample')} left out for every strategy: "
                f"{meta['samples_left_out']['reason']}"
            )
        for s in strategies:
            kw = result["keyword_recall"][s]["mean"].get("5")
            cr = result["conflict"]["strategies"][s]["all"].get("ratio")
            ppl = result.get("perplexity", {}).get("strategies", {}).get(s, {}).get("perplexity")
            print(
                f"  {s:12s} recall@5 {kw if kw is None else round(kw, 3)}  "
                f"conflict {cr if cr is None else round(cr, 3)}  ppl {ppl if ppl is None else round(ppl, 2)}"
            )


# -- keem eval human-export / human-import ----------------------------------------------------------
def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memories", type=Path, required=True, help="memories.json written by `keem eval memory`")
    p.add_argument("--strategies", help="comma-separated subset (default: all in the file)")
    p.add_argument("--sample", type=int, help="score only N random (episode, session) steps (the paper used 50)")
    p.add_argument("--raters", type=int, default=3, help="how many sheets (default 3)")
    p.add_argument("--seed", type=int, default=0, help="shuffling and sampling seed (default 0)")
    p.add_argument("--out", type=Path, required=True, help="folder for key.csv and sheet_rater*.csv")


def run_export(args: argparse.Namespace, load_model: LoadModel) -> int:
    from evaluation.metrics.human import export_sheets

    rows = read_json(
        args.memories,
        if_missing="run `keem eval memory` first",
        if_invalid="give the memories.json that `keem eval memory` wrote",
    )
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and {"strategy", "episode", "session"} <= r.keys() for r in rows
    ):
        raise InputError(f"{args.memories} is not a memories.json of `keem eval memory`; give the one it wrote")
    if args.strategies:
        wanted = {s.strip() for s in args.strategies.split(",")}
        rows = [r for r in rows if r["strategy"] in wanted]
    steps = sorted({(r["episode"], r["session"]) for r in rows})
    if args.sample is not None:
        if args.sample < 1:
            raise InputError("--sample must be at least 1")
        chosen = set(random.Random(args.seed).sample(steps, min(args.sample, len(steps))))
        rows = [r for r in rows if (r["episode"], r["session"]) in chosen]
    if not rows:
        raise InputError("nothing to export: no memories match --strategies/--sample")
    paths = export_sheets(rows, args.out, raters=args.raters, seed=args.seed)
    result = {name: str(p) for name, p in paths.items()}
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print(
            f"wrote {len(paths) - 1} blind sheets and the key ({paths['key']}) to {args.out}; keep key.csv from "
            "the raters"
        )
    return 0


def _import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", type=Path, required=True, help="key.csv written by human-export")
    p.add_argument("sheets", type=Path, nargs="+", help="filled sheet CSVs (one per rater)")
    p.add_argument("--out", type=Path, required=True, help="folder for human.md, human.json, human.png")


def run_import(args: argparse.Namespace, load_model: LoadModel) -> int:
    from evaluation.metrics.human import import_sheets, tables
    from evaluation.report import base_meta, write_human_report

    key, ratings = import_sheets(args.key, args.sheets)
    if not any(r["score"] is not None for r in ratings):
        raise InputError("the sheets have no scores yet; fill the 'score' column with 0, 1 or 2")
    result = tables(key, ratings)
    files = write_human_report(
        result,
        {
            **base_meta(),
            "key": str(args.key),
            "sheets": [str(s) for s in args.sheets],
            "arguments": {"out": str(args.out)},
        },
        args.out,
    )
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        print(f"report: {files['report']}")
    return 0


register(
    "memory",
    "build each strategy's memories over a dataset and measure them (report.md + PNGs)",
    add_arguments=_memory_args,
    run=run_memory,
    example=MEMORY_EXAMPLE,
    embedder=True,  # the deletion guard's, as in the app
)
register(
    "human-export",
    "write blind 0-2 scoring sheets (CSV) for human raters, and their key",
    add_arguments=_export_args,
    run=run_export,
    example="keem eval human-export --memories runs/eval1/memories.json --sample 50 --raters 5 --out runs/human",
)
register(
    "human-import",
    "read filled sheets and compute the paper's human-evaluation tables with agreement",
    add_arguments=_import_args,
    run=run_import,
    example="keem eval human-import --key runs/human/key.csv runs/human/sheet_rater*.csv --out runs/human",
)
register(
    "retrieval",
    retrieval_command.HELP,
    add_arguments=retrieval_command.add_retrieval_arguments,
    run=retrieval_command.run_retrieval,
    example=retrieval_command.EPILOG,
    description=retrieval_command.DESCRIPTION,
    embedder=True,
)
