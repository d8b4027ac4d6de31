"""The `keem` command line: terminal sessions and memory inspection."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

from chatbot.cli.options import (
    EMBEDDER,
    JSON,
    MODELS,
    STORE,
    STUDY,
    UPDATES,
    USER,
    USER_FILTER,
    add_command,
    add_group,
    apply_settings,
    settings_from,
)
from chatbot.settings import Settings
from memory.words import plural
from models.errors import InputError, KeemError

EPILOG_SESSION = """examples:
  keem session --user minsu --model demo                 # chat in the terminal; /end or Ctrl-D ends
  keem session --user minsu --model demo --script s1.txt # one user message per line
  keem session --user minsu --model demo --all-jobs      # also run other users' leftover memory updates first
  OPENAI_BASE_URL=http://127.0.0.1:8000/v1 keem session --user minsu --update-model openai:gpt-4o"""


def build_parser() -> argparse.ArgumentParser:
    """Every `keem` command: argparse subcommands, the shared options from chatbot/cli/options.py, a `run` each."""
    from chatbot.cli.chat import add_chat_parser
    from chatbot.cli.serve import add_serve_parser
    from chatbot.cli.tokens import add_token_commands
    from chatbot.cli.why import add_why_commands
    from chatbot.cli.worker import add_worker_parser
    from evaluation.commands import build as build_command
    from evaluation.commands.eval import EVAL_COMMANDS
    from training.command import add_train_parser

    parser = argparse.ArgumentParser(
        prog="keem",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="KEEM chat: a Korean chatbot whose memory of each user an LLM rewrites after every session.",
        epilog="examples:\n  keem chat                      # the browser app on 127.0.0.1:7860\n"
        "  keem session --user minsu --model demo\n  keem memory show --user minsu",
    )
    subs = parser.add_subparsers(dest="command", required=True)

    s = add_command(
        subs,
        "session",
        "hold one chat session in the terminal, then update the memory",
        EPILOG_SESSION,
        description="Hold one session (interactive, or scripted with one message per line), end it, "
        "run the memory update and print the new memory. When something the user felt is due (an ongoing worry, "
        "an interview whose date has passed), the bot first asks one short question about it (KEEM_OPENING=off: "
        "it does not).",
        parents=[USER, STORE, MODELS, EMBEDDER, UPDATES],
        run=_session,
    )
    s.add_argument("--script", type=Path, help="file with one user message per line (UTF-8)")
    s.add_argument(
        "--all-jobs",
        action="store_true",
        help="before the session, also run other users' memory updates left from an earlier run (by default only "
        "this user's run; each prints whose it is and how long it takes)",
    )

    msubs = add_group(
        subs,
        "memory",
        "show, search, import or forget a user's memory",
        "Inspect and manage one user's memory.",
        "keem memory show --user minsu",
    )
    p = add_command(
        msubs,
        "show",
        "print a user's memory (latest version, or --version N)",
        "keem memory show --user minsu --json",
        parents=[USER, STORE, JSON],
        run=cmd_show,
    )
    p.add_argument("--version", type=int, help="version number (default: latest)")
    add_command(
        msubs,
        "history",
        "list a user's memory versions with what each kept, added, removed and rewrote (by each sentence's origin)",
        "keem memory history --user minsu",
        parents=[USER, STORE, JSON],
        run=cmd_history,
    )
    add_command(
        msubs,
        "emotions",
        "list a user's emotions with their causes (latest version): since, status, how it ended, the user's words",
        "keem memory emotions --user minsu --json",
        parents=[USER, STORE, JSON],
        run=cmd_emotions,
    )
    p = add_command(
        msubs,
        "search",
        "find the memory sentences most relevant to a query",
        'keem memory search --user u1 --k 3 --json "손목 보호대는 이제 안 차도 돼?"',
        parents=[USER, STORE, EMBEDDER, JSON],
        run=cmd_search,
    )
    p.add_argument("--k", type=int, default=5, help="how many sentences (default 5)")
    p.add_argument("query")
    p = add_command(
        msubs,
        "import",
        "add sentences to a user's memory as a new version on top of the latest, whatever writes meanwhile "
        "(creates the user if needed)",
        "keem memory import --user u1 mem.txt   # one sentence per line, or JSONL with a 'text' field",
        parents=[USER, STORE, EMBEDDER, JSON],
        run=cmd_import,
    )
    p.add_argument("file", type=Path)
    add_command(
        msubs,
        "users",
        "list every user with sessions, memory versions and trial strategy",
        "keem memory users --json   # browser-identity users appear as name#key (KEEM_IDENTITY=browser)",
        parents=[STORE, JSON],
        run=cmd_users,
    )
    p = add_command(
        msubs,
        "forget",
        "delete everything stored about a user (sessions, turns, every memory version; a running app's open tabs "
        "of that user are told at their next event, and their ids are never given to another user), or with "
        "--sentence one sentence of their memory completely",
        "keem memory forget --user minsu --yes\n"
        "  keem memory forget --user minsu --sentence 2   # the 2nd sentence of: keem memory show --user minsu",
        parents=[USER, STORE, JSON],
        run=cmd_forget,
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--sentence",
        metavar="TEXT_OR_NUMBER",
        help="erase one sentence of the current memory (its text, or its number in `keem memory show`, from 1) "
        "from every memory version, with its earlier and later forms; the turns that said it read [삭제됨]",
    )
    add_why_commands(msubs)  # why, changes, restore, revert (chatbot/cli/why.py)

    jsubs = add_group(
        subs,
        "jobs",
        "list memory-update jobs, or retry failed ones",
        "Memory updates run as durable jobs. A failed one keeps its error and the previous memory; it is "
        "retried with backoff, at every start, or by `jobs retry`.",
        "keem jobs list --status failed",
    )
    p = add_command(
        jsubs,
        "list",
        "list update jobs with their status, attempts and last error",
        "keem jobs list --status failed --json",
        parents=[USER_FILTER, STORE, JSON],
        run=cmd_jobs_list,
    )
    p.add_argument(
        "--status",
        choices=["pending", "running", "done", "failed"],
        action="append",
        help="only jobs with this status (repeatable; default: all)",
    )
    p = add_command(
        jsubs,
        "retry",
        "run failed update jobs again now, also those waiting in a backoff (all, a user's, or the ones named)",
        "OPENAI_BASE_URL=http://127.0.0.1:8000/v1 keem jobs retry --user minsu --update-model openai:gpt-4o",
        parents=[USER_FILTER, STORE, MODELS, EMBEDDER],
        run=cmd_jobs_retry,
    )
    p.add_argument(
        "job", type=int, nargs="*", help="job ids (default: every failed job, and every one waiting in a backoff)"
    )
    p.add_argument(
        "--no-run",
        action="store_true",
        help="only put them back in the queue, for the running app to take (it polls every second)",
    )

    tsubs = add_group(
        subs,
        "trial",
        "export and analyse what a user trial collected (participants, sessions, memories, questionnaires)",
        "Tools for multi-session user trials. Run the app with KEEM_STRATEGY=balanced to give each "
        "participant one strategy, balanced and kept across sessions (KEEM_STUDY: a study plan with "
        "consent and questionnaire, chatbot/trials/study.py).",
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

    add_chat_parser(subs)
    add_token_commands(subs)
    add_worker_parser(subs)
    add_serve_parser(subs)
    p = add_command(
        subs,
        "build-dataset",
        build_command.HELP,
        build_command.EXAMPLE,
        description=build_command.DESCRIPTION,
        parents=[JSON],
        run=_build,
    )
    build_command.add_build_arguments(p)
    # training/command.py builds its own parser; it also registers `keem eval updater`, so it comes first
    add_train_parser(subs).set_defaults(run=_train)
    esubs = add_group(
        subs,
        "eval",
        "evaluate memory strategies the way the KEEM paper does",
        "Evaluate memory-update strategies: keyword recall, NLI conflict ratio, probe perplexity, pairwise "
        "LLM voting, blind human scoring sheets, and retrieval hit@k.",
        "examples:\n  " + "\n  ".join(_first_example(c.example) for c in EVAL_COMMANDS.values()),
    )
    for name, command in EVAL_COMMANDS.items():
        p = add_command(
            esubs,
            name,
            command.help,
            command.example,
            description=command.description,
            parents=[JSON, EMBEDDER] if command.embedder else [JSON],
            run=_eval,
        )
        command.add_arguments(p)
    return parser


def _first_example(example: str) -> str:
    """The first command line of an example or an "examples:" block."""
    lines = [line.strip() for line in example.splitlines() if line.strip() and line.strip() != "examples:"]
    return lines[0]


def main(argv: list[str] | None = None) -> int:
    """Run one `keem` command; errors end as one line with a fix (exit 2), a reader that left early quietly."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe (`keem memory users | head -1`) is caught below
        return code
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say to a closed pipe
        return 0


def _run(argv: list[str] | None) -> int:
    """Parse, then run the command's `run(settings, args)`; every command's KeemError is handled here, once."""
    from chatbot.cli.suggest import parse_args

    args = parse_args(build_parser(), argv)
    run = vars(args).pop("run")  # the command's function; not an argument (reports record vars(args))
    try:
        return run(settings_from(args), args)
    except KeemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted; every turn so far is saved", file=sys.stderr)
        return 130


# -- the commands other modules implement -------------------------------------------------------
def _session(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.cli.session import run_session

    return run_session(settings, args)


def _build(settings: Settings, args: argparse.Namespace) -> int:
    from evaluation.commands.build import run_build

    return run_build(args)


def _train(settings: Settings, args: argparse.Namespace) -> int:
    from training.command import run_train

    return run_train(args)


def _eval(settings: Settings, args: argparse.Namespace) -> int:
    from evaluation.commands.eval import run_eval

    return run_eval(apply_settings(args, settings))


# -- memory commands (no chat model needed) ---------------------------------------------------
def _store(settings: Settings):
    from memory.backup import open_store

    return open_store(settings.db_path, settings.backup_dir)


def _engine(settings: Settings):
    from memory.engine import MemoryEngine
    from models.spec import load_embedder

    return MemoryEngine(_store(settings), load_embedder(settings.embedder))


def _print(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


JOB_FIELDS = (
    "id",
    "user",
    "session_id",
    "strategy",
    "status",
    "stage",
    "attempts",
    "last_error",
    "version_id",
    "updated_at",
)


def cmd_jobs_list(settings: Settings, args: argparse.Namespace) -> int:
    store = _store(settings)
    user_id = store.users.require(args.user) if args.user else None
    names = {u["id"]: u["name"] for u in store.users.all()}
    statuses = tuple(args.status) if args.status else ("pending", "running", "done", "failed")
    local = settings.local_time
    rows = [
        {
            **{k: job.get(k) for k in JOB_FIELDS},
            "user": names.get(job["user_id"]),
            "updated_at": local.iso(job["updated_at"]),
        }
        for job in store.queue.jobs(user_id, statuses)
    ]
    if args.json:
        _print(rows)
        return 0
    for r in rows:
        error = f"  last error: {r['last_error']}" if r["last_error"] and r["status"] != "done" else ""
        print(
            f"job {r['id']}  {r['user']}  session {r['session_id']}  {r['strategy']}  {r['status']} ({r['stage']}), "
            f"{plural(r['attempts'], 'attempt')}{error}"
        )
    if not rows:
        print("no update jobs")
    return 0


def _print_stage(job_id: int, stage: str) -> None:
    print(f"[job {job_id}: {stage}]", file=sys.stderr)


def cmd_jobs_retry(settings: Settings, args: argparse.Namespace) -> int:
    """Failed jobs (and jobs waiting in a backoff after a failure) back to the queue; then run them here with the
    update model (unless --no-run)."""
    store = _store(settings)
    user_id = store.users.require(args.user) if args.user else None
    ids = store.queue.retry(args.job or None, user_id)
    if not ids:
        print("no failed update jobs to retry (none failed, none waiting in a backoff after a failure)")
        return 0
    if args.no_run:
        print(f"queued again: jobs {', '.join(map(str, ids))} (the running app takes them within a second)")
        return 0
    from chatbot.bot import load_bot
    from chatbot.cli.session import print_sentences
    from memory.backup import snapshot_if_configured

    store.close()
    bot = load_bot(settings)
    failed = 0
    for job_id in ids:
        try:
            version = bot.run_update(job_id, functools.partial(_print_stage, job_id))
        except KeemError as exc:
            failed += 1
            print(f"error: job {job_id} failed again and stays queued for retries ({exc})", file=sys.stderr)
            continue
        if version is None:
            print(f"job {job_id}: another process is running it, or it had nothing to update")
            continue
        print(f"job {job_id}: memory v{version.number} ({version.strategy}, {version.status})")
        print_sentences(version)
    snapshot_if_configured(settings.backup_dir, bot.store)
    return 1 if failed else 0


def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    store = _store(settings)
    user_id = store.users.require(args.user)
    version = store.versions.get(user_id, args.version) if args.version else store.versions.latest(user_id)
    if version is None:
        raise InputError(f"user '{args.user}' has no memory yet; end a session or run: keem memory import")
    local = settings.local_time
    if args.json:
        from memory.changelog import version_log
        from memory.provenance import explain_all

        shown = version.as_json()
        for sentence, why in zip(shown["sentences"], explain_all(store, version), strict=True):
            sentence["why"] = why.as_json(local.iso)
        _print(
            {
                **shown,
                "created_at": local.iso(version.created_at),
                "changes": version_log(store, version).as_json(local.iso),
            }
        )
    else:
        print(
            f"# {args.user}: memory v{version.number} "
            f"({version.strategy}, {version.status}, {local.stamp(version.created_at)})"
        )
        from chatbot.cli.session import print_sentences

        print_sentences(version)
    return 0


def cmd_users(settings: Settings, args: argparse.Namespace) -> int:
    local = settings.local_time
    rows = [
        {**r, "created_at": local.iso(r["created_at"]), "last_session": local.iso(r["last_session"])}
        for r in _store(settings).users.overview()
    ]
    if args.json:
        _print(rows)
        return 0
    if not rows:
        print("no users yet")
    for r in rows:
        print(
            f"{r['name']}  {plural(r['sessions'], 'session')} (last {local.stamp(r['last_session'])})  "
            f"{plural(r['versions'], 'memory version')}"
            + (f"  trial strategy {r['strategy']}" if r["strategy"] else "")
        )
    return 0


def cmd_emotions(settings: Settings, args: argparse.Namespace) -> int:
    """The latest version's emotion-and-cause records, newest first, as the memory tab's timeline shows them."""
    from memory.emotions import newest_first

    store = _store(settings)
    user_id = store.users.require(args.user)
    records = newest_first(store.versions.emotions.latest(user_id))
    if args.json:
        _print([r.as_json() for r in records])
        return 0
    if not records:
        print(f"user '{args.user}' has no emotion records yet")
    for r in records:
        ended = f', ended {r.ended_at}: "{r.ended}"' if r.ended else ""
        due = f", date {r.due}" if r.due else ""
        print(f"{r.emotion} | {r.cause} | since {r.first_seen} | {r.status}{due}{ended}")
        if r.quote:
            print(f'    "{r.quote}"')
    return 0


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    from memory.diff import version_diff

    store = _store(settings)
    user_id = store.users.require(args.user)
    rows: list[dict[str, Any]] = []
    previous = None
    for v in store.versions.of_user(user_id):
        rows.append(
            {
                **{
                    k: v.as_json()[k]
                    for k in ("version", "created_at", "strategy", "status", "author", "session_id", "model", "note")
                },
                "created_at": settings.local_time.iso(v.created_at),
                "size": len(v.sentences),
                **version_diff(previous, v).as_json(),
            }
        )
        previous = v
    if args.json:
        _print(rows)
        return 0
    if not rows:
        print(f"user '{args.user}' has no memory versions yet")
    for r in rows:
        print(
            f"v{r['version']}  {settings.local_time.stamp(r['created_at'])}  {r['strategy']}/{r['status']}  "
            f"by {r['author']}  "
            f"{plural(r['size'], 'sentence')}: kept {len(r['kept'])}, added {len(r['added'])}, "
            f"removed {len(r['removed'])}, "
            f"rewritten {len(r['rewritten'])}"
        )
        for t in r["added"]:
            print(f"    + {t}")
        for change in r["rewritten"]:
            print(f"    ~ {change['old']} -> {change['new']}")
        for t in r["removed"]:
            print(f"    - {t}")
        if r["note"]:
            print(f"    note: {r['note']}")
    return 0


def cmd_search(settings: Settings, args: argparse.Namespace) -> int:
    if args.k < 1:
        raise InputError("--k must be at least 1")
    if not args.query.strip():
        raise InputError("empty query: give the text to search for")
    engine = _engine(settings)
    user_id = engine.store.users.require(args.user)
    hits = engine.search(user_id, args.query, k=args.k)
    if args.json:
        _print([{"text": h.text, "score": round(h.score, 4), "sentence_id": h.sentence_id} for h in hits])
    else:
        for h in hits:
            print(f"{h.score:.3f}  {h.text}")
    return 0


MAX_IMPORT_SENTENCES = 5000  # a memory is tens to hundreds of sentences; this is far past any real one
MAX_IMPORT_BYTES = 2_000_000


def read_import_file(path: Path) -> list[str]:
    """Plain text (one sentence per line) or JSONL with a 'text' field; every bad line is reported."""
    from evaluation.files import read_lines
    from memory.text import MAX_SENTENCE_CHARS

    lines = read_lines(
        path,
        "memory import",
        MAX_IMPORT_BYTES,
        MAX_IMPORT_SENTENCES,
        "a memory is tens to hundreds of sentences: import the ones that matter, or split the file",
    )
    jsonl = path.suffix == ".jsonl" or next((ln.lstrip().startswith("{") for ln in lines if ln.strip()), False)
    texts, problems = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        text: Any = line.strip()
        if jsonl:
            try:
                text = json.loads(line).get("text")
            except (json.JSONDecodeError, AttributeError):
                problems.append(f"line {number}: not a JSON object")
                continue
            if not isinstance(text, str) or not text.strip():
                problems.append(f"line {number}: no non-empty 'text' string")
                continue
        if len(text.strip()) > MAX_SENTENCE_CHARS:
            problems.append(f"line {number}: longer than {MAX_SENTENCE_CHARS} characters")
            continue
        texts.append(text.strip())
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise InputError(f"{path}: nothing imported, fix these lines: {shown}")
    if not texts:
        raise InputError(f"{path} has no sentences; put one sentence per line")
    return texts


def cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.session import check_user_name
    from memory.updaters.base import accumulate

    texts = read_import_file(args.file)
    name = check_user_name(args.user)
    engine = _engine(settings)
    user_id = engine.store.users.get_or_create(name)
    previous = engine.current(user_id)
    sentences = accumulate(list(previous.sentences) if previous else [], texts, "imported")
    new = [s for s in sentences if s.provenance == "imported"]
    version = engine.commit(
        user_id,
        sentences,
        base=previous.number if previous else None,  # another process's commit meanwhile: the import is rebased
        strategy="import",
        status="ok",
        author="import",
        note=f"imported {plural(len(new), 'sentence')} from {args.file.name}",
    )
    from memory.backup import snapshot_if_configured

    snapshot_if_configured(settings.backup_dir, engine.store)
    result = {"user": name, "version": version.number, "imported": len(new), "size": len(version.sentences)}
    _print(result) if args.json else print(
        f"imported {plural(len(new), 'sentence')} into {name}'s memory v{version.number} "
        f"({len(version.sentences)} in all)"
    )
    return 0


def cmd_forget(settings: Settings, args: argparse.Namespace) -> int:
    """Forget a user, or (--sentence) one sentence of their memory, leaving no copy: the database's WAL is emptied,
    older backups deleted and every export zip removed (chatbot/exports.py)."""
    from chatbot.exports import Exports
    from memory.backup import snapshot_if_configured

    store = _store(settings)
    user_id = store.users.require(args.user)
    text = None
    if args.sentence is not None:
        text = _sentence(store, user_id, args.sentence)
        question = f"erase '{text}' from every memory version of '{args.user}' and redact the turns that said it?"
    else:
        question = f"delete every session, turn and memory version of '{args.user}'?"
    if not args.yes and sys.stdin.isatty():
        answer = input(f"{question} type the name to confirm: ")
        if answer.strip() != args.user:
            print("nothing deleted")
            return 1
    if text is not None:
        from memory.redact import forget_sentence

        erased = forget_sentence(store, user_id, text)
    else:
        erased = store.erasure.forget_user(user_id)
    Exports().remove_all()
    snapshot_if_configured(settings.backup_dir, store, drop_older=True)  # older snapshots still hold the text
    store.close()
    if args.json:
        _print({"forgotten": args.user, "kind": erased.kind, "rows": erased.counts})
    elif text is not None:
        print(
            f"erased the sentence from {plural(erased.counts['memory_versions'], 'memory version')} of '{args.user}'; "
            f"{plural(erased.counts['turns'], 'turn')} now read{'s' if erased.counts['turns'] == 1 else ''} [삭제됨]"
        )
    else:
        print(f"forgot everything about '{args.user}'")
    return 0


def _sentence(store: Any, user_id: int, given: str) -> str:
    """The text of a sentence of the user's current memory, given as its text or its number in `keem memory show`."""
    latest = store.versions.latest(user_id)
    texts = latest.texts if latest else []
    if given.strip().isdigit():
        number = int(given)
        if not 1 <= number <= len(texts):
            raise InputError(
                f"--sentence {number}: the current memory has {plural(len(texts), 'sentence')}; "
                "see their order with: keem memory show"
            )
        return texts[number - 1]
    return given.strip()


def cmd_trial_export(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.trials.export import FILES, export
    from chatbot.trials.pii import TAGS

    if args.no_scrub:
        print(
            "warning: --no-scrub: the export keeps phone numbers, e-mail addresses, ID, card and account numbers "
            "and home addresses as typed; keep it as safe as the database itself",
            file=sys.stderr,
        )
    counts = export(_store(settings), args.out, args.pseudonymize, scrub=not args.no_scrub, local=settings.local_time)
    _print({"out": str(args.out), **counts}) if args.json else print(
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
    from chatbot.trials.report import run_report
    from chatbot.trials.study import load_study

    study = load_study(settings.study) if settings.study else None
    result = run_report(args.export, args.out, study)
    files = result["files"]
    _print({"out": str(args.out), **files}) if args.json else print(
        f"report: {files['report']}\nresult: {files['json']}\nplots: "
        + ", ".join(Path(v).name for k, v in files.items() if v.endswith(".png"))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
