"""`keem trial export / report`: what a user trial collected, exported with personal data replaced, and analysed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from chatbot.cli.options import JSON, STORE, STUDY, add_command, add_group, open_store, print_json
from chatbot.settings import Settings
from memory.words import plural


def add_trial_commands(subs: Any) -> None:
    """Register `keem trial` and its commands."""
    tsubs = add_group(
        subs,
        "trial",
        "export and analyse what a user trial collected (participants, sessions, memories, questionnaires)",
        "Tools for multi-session user trials. Run the app with KEEM_STRATEGY=balanced to give each "
        "participant one strategy, balanced and kept across sessions (KEEM_STUDY: a study plan with "
        "consent and questionnaire, chatbot/study.py).",
        "keem trial export --out trial-data --pseudonymize",
    )
    p = add_command(
        tsubs,
        "export",
        "write participants.csv, sessions.jsonl, memory_versions.jsonl, questionnaire.csv and "
        "manifest.json into a new folder, personal data replaced by tags",
        "keem trial export --out trial-2026-11 --pseudonymize   # names -> P001...; key.csv maps them back",
        parents=[STORE, JSON],
        run=cmd_trial_export,
    )
    p.add_argument("--out", type=Path, required=True, help="a new (or empty) folder")
    p.add_argument("--pseudonymize", action="store_true", help="replace names by P001, P002, ... (key.csv maps back)")
    p.add_argument(
        "--no-scrub",
        action="store_true",
        help="keep phone numbers, e-mail addresses, ID, card and account numbers and home addresses "
        "as typed (default: replaced by tags such as [전화번호])",
    )
    p = add_command(
        tsubs,
        "report",
        "analyse an export: ratings per strategy and session with confidence intervals, "
        "Kruskal-Wallis and Holm-corrected Mann-Whitney tests, completion, memory size; report.md with PNGs",
        "keem trial report --export trial-2026-11 --out trial-2026-11-report --study study.toml",
        description="Without a study plan (--study / KEEM_STUDY) the strategies are the ones seen and the "
        "sessions per participant the most any participant held.",
        parents=[JSON, STUDY],
        run=cmd_trial_report,
    )
    p.add_argument("--export", type=Path, required=True, help="a folder `keem trial export` wrote")
    p.add_argument("--out", type=Path, required=True, help="output folder (report.md, report.json, PNGs)")


def cmd_trial_export(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.trials.export import FILES, export
    from chatbot.trials.pii import TAGS

    if args.no_scrub:
        print(
            "warning: --no-scrub: the export keeps phone numbers, e-mail addresses, ID, card and account numbers "
            "and home addresses as typed; keep it as safe as the database itself",
            file=sys.stderr,
        )
    counts = export(
        open_store(settings), args.out, args.pseudonymize, scrub=not args.no_scrub, local=settings.local_time
    )
    print_json({"out": str(args.out), **counts}) if args.json else print(
        f"exported {plural(counts['participants'], 'participant')}, {plural(counts['sessions'], 'session')}, "
        f"{plural(counts['turns'], 'turn')}, "
        f"{plural(counts['versions'], 'memory version')} and {plural(counts['answers'], 'questionnaire answer')} "
        f"to {args.out}/ "
        f"({', '.join(FILES)}{', key.csv' if args.pseudonymize else ''})\n"
        + (
            "personal data left as typed (--no-scrub)"
            if args.no_scrub
            else "personal data replaced: " + ", ".join(f"{TAGS[k]} {n}" for k, n in counts["pii"].items())
        )
    )
    return 0


def cmd_trial_report(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.study import load_study
    from chatbot.trials.report import run_report

    study = load_study(settings.study) if settings.study else None
    result = run_report(args.export, args.out, study)
    files = result["files"]
    print_json({"out": str(args.out), **files}) if args.json else print(
        f"report: {files['report']}\nresult: {files['json']}\nplots: "
        + ", ".join(Path(v).name for k, v in files.items() if v.endswith(".png"))
    )
    return 0
