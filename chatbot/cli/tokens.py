"""`keem token create | list | revoke`: the HTTP API's bearer tokens (chatbot/api). A token is printed once, when it
is made; the database keeps only its hash (memory/store/tokens.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from chatbot.cli.options import JSON, STORE, STUDY, add_command, add_group
from chatbot.settings import Settings
from models.errors import InputError


def add_token_commands(subs: Any) -> None:
    tsubs = add_group(
        subs,
        "token",
        "HTTP API tokens: make one (shown once), list them, revoke one",
        "Bearer tokens for the HTTP API under /v1 of `keem chat` (docs/api.md). A user's token reads and writes "
        "that user's memory only; an app token (--app) acts for whichever user each request names.",
        "keem token create --user minsu",
    )
    p = add_command(
        tsubs,
        "create",
        "make a token and print it once (only its hash is stored)",
        "examples:\n  keem token create --user minsu\n  keem token create --app --label discord-bot",
        parents=[STORE, STUDY, JSON],
        run=cmd_create,
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="the user the token acts for (made when new)")
    who.add_argument("--app", action="store_true", help="an app token: acts for the user each request names")
    p.add_argument("--label", default="", help="a note to tell tokens apart in `keem token list`")
    add_command(
        tsubs,
        "list",
        "every token: id, user, app or not, label, when made and last used, revoked or not (never the token)",
        "keem token list",
        parents=[STORE, JSON],
        run=cmd_list,
    )
    p = add_command(
        tsubs, "revoke", "revoke a token by id", "keem token revoke 3", parents=[STORE, JSON], run=cmd_revoke
    )
    p.add_argument("id", type=int, help="the token's id (keem token list)")


def _store(settings: Settings) -> Any:
    from chatbot.stores import open_checked

    return open_checked(settings.db_path, settings.backup_dir)


def cmd_create(settings: Settings, args: argparse.Namespace) -> int:
    from chatbot.bot import Chatbot
    from chatbot.study import study_from_settings

    study = study_from_settings(settings)
    if study is not None and not study.api:
        raise InputError(
            f"user trial {study.id} gives participants no API tokens; set api = true in its study plan to allow them"
        )
    store = _store(settings)
    user_id = None if args.app else store.users.get_or_create(Chatbot.user_key(args.user))
    token, secret = store.tokens.create(user_id, app=args.app, label=args.label)
    if args.json:
        print(json.dumps({**token.as_json(), "user": args.user, "token": secret}, ensure_ascii=False))
    else:
        print(secret)
        who = "any user a request names (app token)" if args.app else f"user {args.user}"
        print(f"token {token.id} for {who}; shown only now: keep it secret", file=sys.stderr)
    return 0


def cmd_list(settings: Settings, args: argparse.Namespace) -> int:
    store = _store(settings)
    names = {u["id"]: u["name"] for u in store.users.all()}
    rows = [{**t.as_json(), "user": names.get(t.user_id) if t.user_id else None} for t in store.tokens.all()]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("no API tokens; make one with: keem token create --user NAME")
    for r in rows:
        who = "app" if r["app"] else f"user {r['user']}"
        state = "revoked" if r["revoked"] else f"last used {r['last_used_at'] or 'never'}"
        print(f"{r['id']:>4}  {who:<24} {r['label'] or '-':<16} made {r['created_at']}  {state}")
    return 0


def cmd_revoke(settings: Settings, args: argparse.Namespace) -> int:
    token = _store(settings).tokens.revoke(args.id)
    if args.json:
        print(json.dumps(token.as_json(), ensure_ascii=False))
    else:
        print(f"token {token.id} revoked; it no longer works")
    return 0
