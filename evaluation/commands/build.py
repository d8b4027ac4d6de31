"""`keem build-dataset`: build a KEEM-style memory-update dataset from a multi-session corpus."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evaluation.corpora.episodes import FORMATS
from memory.words import plural
from models.errors import InputError

EXAMPLE = """examples:
  OPENAI_BASE_URL=http://127.0.0.1:8000/v1 keem build-dataset kmsc_labels/ --model openai:gpt-4o \\
      --out keem_ds --concurrency 16 --price-per-1k-tokens 0.005
  keem build-dataset evaluation/fixtures/carecall.json --model openai:gpt-4o --out ds --dry-run
  keem build-dataset evaluation/fixtures/carecall.json --model openai:gpt-4o --out ds --review 150

Run the same command again after an interruption: finished calls come from DIR/calls.sqlite and rows
already in DIR/dataset.jsonl or DIR/rejects.jsonl are not written twice."""


HELP = "build a KEEM-style memory-update dataset from a multi-session corpus"
DESCRIPTION = (
    "For every episode and session t >= 2: reflect the session summary with emotions and causes, generate the "
    "updated memory, verify it against all dialogues up to t. Passing rows -> DIR/dataset.jsonl, failing rows -> "
    "DIR/rejects.jsonl."
)


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `keem build-dataset` (chatbot/cli/main.py adds the command, with --json)."""
    p.add_argument("input", type=Path, help="corpus file (or a folder of KMSC label JSON files)")
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", *FORMATS],
        help="input format (default: detected from the file; evaluation/corpora/episodes.py lists the fields read)",
    )
    p.add_argument(
        "--model",
        help="model spec: openai:<model> (OPENAI_BASE_URL/OPENAI_API_KEY) or hf:<id|path>; not needed with --dry-run",
    )
    p.add_argument("--out", type=Path, required=True, help="output folder (created; reused to resume)")
    p.add_argument("--concurrency", type=int, default=4, help="episodes in flight at once (default 4; 1 for hf:)")
    p.add_argument("--limit", type=int, help="only the first N episodes")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate calls, tokens and cost per stage: the build on a model that calls nothing (--out untouched)",
    )
    p.add_argument("--review", type=int, metavar="N", help="then write DIR/review.csv sampling N rows for review")
    p.add_argument("--price-per-1k-tokens", type=float, default=0.0, help="for the cost estimate (default 0)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per model call (default 120)")
    p.add_argument("--max-retries", type=int, default=5, help="retries on 429/5xx/timeouts for openai: (default 5)")
    p.add_argument(
        "--no-guard",
        action="store_true",
        help="skip the deletion guard, as the paper's pipeline did (default: guarded, as the app updates)",
    )
    p.add_argument("--user-speaker", default="speaker1", help="KMSC speaker who is the user (default speaker1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _load_model(spec: str, args: argparse.Namespace):
    if spec.startswith("openai:") and spec[7:]:
        from models.openai_backend import OpenAIChatModel

        return OpenAIChatModel(spec[7:], timeout_s=args.timeout, max_retries=args.max_retries)
    from models.spec import load_chat_model

    return load_chat_model(spec)


def _check(args: argparse.Namespace) -> None:
    if args.concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1")
    if args.review is not None and args.review < 1:
        raise InputError("--review must be at least 1")
    if not args.dry_run and not args.model:
        raise InputError("--model is required (e.g. --model openai:gpt-4o), or pass --dry-run to estimate")


def run_build(args: argparse.Namespace) -> int:
    """Run build-dataset from parsed arguments; returns the exit code (1 when some episodes failed)."""
    from evaluation.builder import BuildConfig, Output, build_dataset, stats_json, write_review
    from evaluation.corpora.episodes import detect_format, read_episodes
    from evaluation.dry_run import estimate

    _check(args)
    fmt = detect_format(args.input) if args.format == "auto" else args.format
    episodes = read_episodes(args.input, fmt, user_speaker=args.user_speaker)
    if args.dry_run:
        est = estimate(episodes, args.limit, guard=not args.no_guard, progress=not args.no_progress)
        data = {**est.json(), "format": fmt, "estimated_cost": round(est.cost(args.price_per_1k_tokens), 4)}
        if args.json:
            print(json.dumps(data, ensure_ascii=False, indent=2))
        else:
            print(
                f"{fmt}: {plural(est.episodes, 'episode')}, {plural(est.steps, 'session step')} -> "
                f"~{plural(est.calls, 'call')}, "
                f"~{est.prompt_tokens:,} prompt + ~{est.completion_tokens:,} completion tokens, "
                f"~${data['estimated_cost']:.2f} at ${args.price_per_1k_tokens}/1k tokens (no model was called)"
            )
            for stage, count in est.stages.items():
                print(
                    f"  {stage}: {plural(count.calls, 'call')}, "
                    f"~{count.prompt_tokens:,} prompt + ~{count.completion_tokens:,} completion tokens"
                )
        return 0
    output = Output.open(args.out)  # a folder that cannot hold the build says so before the model loads
    try:
        model = _load_model(args.model, args)
    except BaseException:
        output.close()
        raise
    concurrency = args.concurrency
    if not args.model.startswith("openai:") and concurrency > 1:
        print(f"note: {args.model} runs in this process; using --concurrency 1", file=sys.stderr)
        concurrency = 1
    config = BuildConfig(
        out_dir=args.out,
        concurrency=concurrency,
        limit=args.limit,
        price_per_1k_tokens=args.price_per_1k_tokens,
        progress=not args.no_progress,
        source_format=fmt,
        source_path=str(args.input),
        guard=not args.no_guard,
    )
    try:
        stats = build_dataset(episodes, model, config, timeout_s=args.timeout, output=output)
    except KeyboardInterrupt:
        print("\ninterrupted; run the same command again to resume (finished calls are cached)", file=sys.stderr)
        return 130
    review = write_review(args.out, args.review) if args.review else None
    if args.json:
        print(
            json.dumps({**stats_json(stats), "review": str(review) if review else None}, ensure_ascii=False, indent=2)
        )
    else:
        print(
            f"{plural(stats.rows, 'new row')} -> {args.out / 'dataset.jsonl'}, "
            f"{plural(stats.rejects, 'new reject')} -> "
            f"{args.out / 'rejects.jsonl'}, {plural(stats.already_done, 'step')} already done; "
            f"{plural(stats.calls, 'call')} "
            f"({stats.cached_calls} from cache), {stats.new_tokens:,} new tokens (estimated), "
            f"${stats.cost:.2f}, {stats.seconds:.1f}s"
        )
        if review:
            print(f"review sheet: {review}")
    for error in stats.errors:
        print(f"error: {error} (run the same command again to retry)", file=sys.stderr)
    return 1 if stats.errors else 0
