"""`keem chat` / `python app.py`: load the models, start the job worker and serve the browser app."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import signal
import sys
import time
from typing import Any

from chatbot.cli.options import EMBEDDER, MODELS, RERANKER, RETRIEVAL, STORE, STUDY, UPDATES, add_command, settings_from
from chatbot.settings import Settings
from memory.words import plural
from models.errors import InputError

EPILOG = """examples:
  python app.py                                    # 127.0.0.1:7860, model auto (demo on CPU)
  keem chat --model demo --port 7861
  keem chat --auth-file users.txt                  # one "name:password" per line; the login name is the identity
  KEEM_MODEL=hf:yanolja/EEVE-Korean-Instruct-10.8B-v1.0 keem chat --host 0.0.0.0
  KEEM_BACKUP_DIR=/mnt/bucket keem chat            # snapshots the database there; restores it when missing
  KEEM_AUTH='minsu:pw1,jiwoo:pw2' keem chat        # logins from the environment (a Space secret)
  KEEM_ADMIN_PASSWORD=... keem chat --study study.toml --auth-file participants.txt   # a user trial"""


def _server_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    g = parser.add_argument_group("server")
    g.add_argument("--host", help="address to bind (KEEM_HOST; default 127.0.0.1, this machine only)")
    g.add_argument("--port", type=int, help="port (KEEM_PORT; default 7860)")
    g.add_argument(
        "--idle-timeout-min",
        type=float,
        help="end a silent session after this many minutes (KEEM_IDLE_TIMEOUT_MIN; default 30)",
    )
    g.add_argument(
        "--auth-file",
        help="require a login: a file with one name:password per line "
        "(or the KEEM_AUTH secret: name:password pairs, comma-separated)",
    )
    g.add_argument(
        "--worker",
        choices=["on", "off"],
        help="off: this process runs no memory updates, `keem worker` processes do (KEEM_WORKER; default on; several "
        "app processes on one store, see `keem serve`)",
    )
    g.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    return parser


def add_chat_parser(subs: Any) -> argparse.ArgumentParser:
    """Register the `chat` subcommand on the `keem` parser's subparsers (`python app.py` runs it too)."""
    return add_command(
        subs,
        "chat",
        "serve the browser chat app (Gradio)",
        EPILOG,
        description="Serve the browser chat app: chat, end sessions, see and edit the memory.",
        parents=[STORE, MODELS, EMBEDDER, RETRIEVAL, RERANKER, UPDATES, STUDY, _server_options()],
        run=lambda settings, args: run_chat(gradio_bind(settings, args), args),
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from KEEM_* and the flags (flags win), then where a Gradio host (HF Spaces) says to bind."""
    return gradio_bind(settings_from(args), args)


def gradio_bind(settings: Settings, args: argparse.Namespace) -> Settings:
    """A host that launches Gradio apps (Hugging Face Spaces) says where to bind through GRADIO_SERVER_*; honour
    it unless KEEM_HOST/KEEM_PORT or a flag chose."""
    extra: dict[str, Any] = {}
    if args.host is None and not os.environ.get("KEEM_HOST") and os.environ.get("GRADIO_SERVER_NAME"):
        extra["host"] = os.environ["GRADIO_SERVER_NAME"]
    if args.port is None and not os.environ.get("KEEM_PORT") and os.environ.get("GRADIO_SERVER_PORT", "").isdigit():
        extra["port"] = int(os.environ["GRADIO_SERVER_PORT"])
    return dataclasses.replace(settings, **extra)


def read_auth_file(path: str) -> list[tuple[str, str]]:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as exc:
        message = f"cannot read --auth-file {path} ({exc.strerror}); give a file of name:password lines"
        raise InputError(message) from None
    return parse_logins(lines, path)


def parse_logins(lines: list[str], source: str) -> list[tuple[str, str]]:
    """name:password lines (blank lines and # comments skipped) -> (name, password) pairs."""
    from chatbot.session import check_user_name

    pairs = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, password = line.strip().partition(":")
        if not sep or not password:
            raise InputError(f"{source} line {number}: expected name:password")
        pairs.append((check_user_name(name), password))
    if not pairs:
        raise InputError(f"{source} has no name:password lines")
    return pairs


def logins(args: argparse.Namespace) -> list[tuple[str, str]] | None:
    """--auth-file, else the KEEM_AUTH secret (name:password pairs, one per line or comma-separated), else None."""
    if getattr(args, "auth_file", None):
        return read_auth_file(args.auth_file)
    secret = os.environ.get("KEEM_AUTH", "")
    return parse_logins(re.split(r"[\n,]", secret), "KEEM_AUTH") if secret.strip() else None


def browser_identity(settings: Settings, logins: list[tuple[str, str]] | None) -> bool:
    """Whether a browser-held key is part of each user's identity.

    With logins the login is the identity. Otherwise a typed name alone would open that person's memory to anyone
    who types it: fine on one's own machine (127.0.0.1), not on a public server. `auto` therefore turns browser
    identity on where Hugging Face Spaces runs the app (SPACE_ID is set); `browser` and `name` force it.
    """
    if settings.identity not in ("auto", "name", "browser"):
        raise InputError(f"KEEM_IDENTITY={settings.identity!r}: use auto, name or browser")
    if logins:
        return False
    return settings.identity == "browser" or (settings.identity == "auto" and bool(os.environ.get("SPACE_ID")))


def run_chat(settings: Settings, args: argparse.Namespace) -> int:
    """Load models, recover leftover jobs, serve until Ctrl-C / SIGTERM, then end open sessions."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    auth = logins(args)
    from chatbot.bot import load_bot
    from chatbot.stores import open_checked
    from chatbot.study import study_from_settings
    from chatbot.trials.web import admin_password, trial_page
    from chatbot.web.app import build_app, launch_options, queue_options
    from chatbot.web.backend import Backend
    from chatbot.worker import Worker

    # before anything is opened or loaded: a study plan's mistake is one line naming the field (exit 2)
    study = study_from_settings(settings)
    password = admin_password()
    # here, not with the models: a database that cannot be used ends `keem chat` with one line (exit 2)
    store = open_checked(settings.db_path, settings.backup_dir)

    def load() -> tuple[Any, Worker]:
        bot = load_bot(settings, store)
        worker = Worker(bot)
        waiting = worker.recover()
        if settings.worker == "off":
            print("KEEM_WORKER=off: memory updates run in `keem worker` processes", file=sys.stderr)
        elif waiting:
            print(
                f"finishing {plural(waiting, 'memory update')} left from an earlier run, in the background",
                file=sys.stderr,
            )
        return bot, worker.start()

    if study is not None:
        print(
            f"user trial {study.id}: {plural(study.sessions, 'session')} per participant "
            f"among {', '.join(study.strategies)}; "
            + (
                "organiser view on (KEEM_ADMIN_PASSWORD) at the app's address with ?organiser"
                if password
                else "no organiser view: set the "
                "KEEM_ADMIN_PASSWORD secret to have one (keem trial export works without it)"
            ),
            file=sys.stderr,
        )
    # the page serves at once and says the models are loading; chat opens when they are ready
    backend = Backend.loading(load)
    per_browser = browser_identity(settings, auth)
    if per_browser:
        print(
            "identity: the typed name within this browser (a key in its localStorage); "
            "the same name typed elsewhere is another user",
            file=sys.stderr,
        )
    trial = trial_page(study, password) if study is not None else None  # consent, questionnaire, organiser view
    app = build_app(
        backend,
        browser_identity=per_browser,
        study=study,
        trial=trial,
        reply_slots=settings.reply_slots,
        api_rate=settings.api_rate,
    )

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        app.queue(**queue_options()).launch(
            server_name=settings.host,
            server_port=settings.port,
            share=bool(getattr(args, "share", False)),
            auth=auth,
            show_error=False,
            footer_links=[],
            run_history=False,
            quiet=False,
            prevent_thread_lock=True,  # the loop below waits, so that the shutdown is `app.close()` (see there)
            **launch_options(app),  # the HTTP API under /v1, on the same address and port
        )
        while app.is_running:
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        # the worker first: it ends the live sessions (reason 'shutdown'; their updates run at the next start); then
        # the app's close ends the pages' event streams and the server. (Gradio's own wait closed only the server,
        # which held each open page's stream up to 5 s; and a close before the worker's stop ran the tabs' unload,
        # which ended their sessions as closed tabs and started their updates in a stopping process.)
        ended = backend.worker.stop() if backend.worker is not None else []
        if ended:
            print(
                f"ended {plural(len(ended), 'open session')}; their memory updates run "
                + ("in a `keem worker`" if settings.worker == "off" else "at the next start"),
                file=sys.stderr,
            )
        app.close()
    return 0
