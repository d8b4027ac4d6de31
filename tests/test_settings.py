"""Settings precedence: defaults < KEEM_* environment < flags; the settings table of docs/settings.md says the same."""

import re
from dataclasses import fields
from pathlib import Path

import pytest

from chatbot.settings import Settings
from models.errors import InputError


def test_env_overrides_defaults_and_flags_override_env():
    env = {"KEEM_MODEL": "demo", "KEEM_K": "7", "KEEM_DB": "/tmp/x.db", "KEEM_LOAD_IN_4BIT": "true"}
    s = Settings.load(env)
    assert (s.model, s.k, s.db_path, s.load_in_4bit) == ("demo", 7, "/tmp/x.db", True)
    s = Settings.load(env, model="hf:x", k=None)
    assert (s.model, s.k) == ("hf:x", 7)
    assert s.update_model_spec == "hf:x"


def test_default_db_lives_in_the_user_data_directory():
    from platformdirs import user_data_dir

    path = Path(Settings.load({}).db_path)
    assert path.name == "keem.db" and path.is_absolute()
    assert path.parent == Path(user_data_dir("keem-chat", appauthor=False))  # not ./keem.db, wherever keem starts


def test_bad_env_value_says_which_variable():
    with pytest.raises(InputError, match="KEEM_K"):
        Settings.load({"KEEM_K": "many"})
    with pytest.raises(InputError, match="KEEM_API_RATE"):
        Settings.load({"KEEM_API_RATE": "0"})


ROOT = Path(__file__).resolve().parents[1]


def _documented_settings() -> list[tuple[list[str], list[str], list[str]]]:
    """(KEEM_* names, flags, default values) of each row of the settings table in docs/settings.md."""
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    out = []
    for row in rows:
        names, default = row.split(" | ")[:2]
        defaults = [d.strip() for d in default.split(",")] if "," in default and "(" not in default else [default]
        out.append((re.findall(r"KEEM_[A-Z0-9_]+", names), re.findall(r"--[a-z0-9-]+", names), defaults))
    return out


def _literal(cell: str) -> object:
    """A default cell's value where it is a literal (`x`, a number, off, none); else the cell itself, unchecked."""
    cell = cell.split(" (")[0].strip()
    if cell.startswith("`") and cell.endswith("`"):
        return cell.strip("`")
    if re.fullmatch(r"\d+(\.\d+)?", cell):
        return float(cell)
    return {"off": False, "none": ""}.get(cell, ...)


def test_the_settings_table_is_the_settings_class():
    """Every setting has a row with its variable, its flag (chatbot/cli/options.py) and its default; every variable in
    the table is a setting or one the code reads."""
    from chatbot.cli.options import SETTING_OF

    settings = {f"KEEM_{f.name.upper()}": f for f in fields(Settings)}
    flag_of = {SETTING_OF[dest]: "--" + dest.replace("_", "-") for dest in SETTING_OF}
    source = "".join(
        p.read_text(encoding="utf-8") for d in ("chatbot", "memory", "models") for p in (ROOT / d).glob("**/*.py")
    )
    listed: set[str] = set()
    for names, flags, defaults in _documented_settings():
        listed |= set(names)
        for name in names:
            assert name in settings or f'"{name}"' in source, f"docs/settings.md lists {name}, which nothing reads"
        fields_here = [settings[n].name for n in names if n in settings]
        assert sorted(flags) == sorted(flag_of[f] for f in fields_here if f in flag_of), names
        if len(defaults) == len(names):
            for name, cell in zip(names, defaults):
                value, default = _literal(cell), settings[name].default if name in settings else ...
                if value is ... or default is ... or (default == "" and value != ""):
                    continue  # described, not a literal (an empty default: "the chat model", a per-user path)
                assert value == (float(default) if type(default) in (int, float) else default), (name, cell)
    assert set(settings) <= listed, f"settings missing from docs/settings.md: {sorted(set(settings) - listed)}"


def test_replies_stream_in_slots_sized_for_where_the_model_runs(tmp_path: Path) -> None:
    """A model in this process streams 4 replies at once; an `openai:` server batches them, so 32 (the 20-160 user
    load rows of benchmarks/load.py queued behind 4); KEEM_REPLY_CONCURRENCY decides when set. Every event that
    streams a model's answer (a reply, a retry, the opening question) shares the one group of slots."""
    from chatbot.bot import Chatbot
    from chatbot.web.app import build_app
    from models.embedders import NgramEmbedder
    from models.fake import ScriptedChatModel
    from tests.helpers import answer

    assert Settings.load({}).reply_slots == 4
    assert Settings.load({"KEEM_MODEL": "openai:gpt-4o-mini"}).reply_slots == 32
    assert Settings.load({"KEEM_MODEL": "openai:x", "KEEM_REPLY_CONCURRENCY": "64"}).reply_slots == 64
    settings = Settings(db=str(tmp_path / "keem.db"), model="openai:served-elsewhere")
    bot = Chatbot(settings, chat_model=ScriptedChatModel(responder=answer), embedder=NgramEmbedder())
    app = build_app(bot)
    streaming = {
        fn.fn.__qualname__: (fn.concurrency_id, fn.concurrency_limit)
        for fn in app.fns.values()
        if fn.fn is not None and fn.fn.__qualname__ in ("Conversation.respond", "Opening.open")
    }
    assert streaming == {"Conversation.respond": ("replies", 32), "Opening.open": ("replies", 32)}
    app.keem_ui.worker.stop()  # type: ignore[attr-defined]
