"""The `keem` CLI as a user runs it: sessions, memory show/history/search/import/forget, errors."""

from __future__ import annotations

import json
import re

import pytest

from chatbot.cli.main import main
from memory.store import Store

MEMORY = [
    "사용자는 테니스를 치다가 손목을 다쳐서 속상해했다",
    "사용자는 작년에 둘째 딸을 낳았다",
    "사용자는 주말마다 조카를 돌봐 준다",
    "사용자는 회계사 시험을 준비하고 있다",
    "사용자는 고양이 두 마리를 키운다",
    "사용자는 매운 음식을 좋아한다",
    "사용자는 부산으로 이사했다",
]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = str(tmp_path / "cli.db")
    monkeypatch.setenv("KEEM_DB", path)
    return path


@pytest.fixture
def imported(db, tmp_path, capsys):
    mem = tmp_path / "mem.txt"
    mem.write_text("\n".join(MEMORY) + "\n\n", encoding="utf-8")
    assert run(capsys, "memory", "import", "--user", "u1", str(mem))[0] == 0
    return mem


def test_import_then_search_finds_the_wrist_injury_in_the_top_3(imported, capsys):
    code, out, _ = run(
        capsys, "memory", "search", "--user", "u1", "--k", "3", "--json", "손목 보호대는 이제 안 차도 돼?"
    )
    hits = json.loads(out)
    assert code == 0 and len(hits) == 3 and {"text", "score"} <= set(hits[0])
    assert "사용자는 테니스를 치다가 손목을 다쳐서 속상해했다" in [h["text"] for h in hits]


def test_show_and_history_after_import(imported, capsys):
    code, out, _ = run(capsys, "memory", "show", "--user", "u1", "--json")
    data = json.loads(out)
    assert code == 0 and data["version"] == 1 and [s["text"] for s in data["sentences"]] == MEMORY
    assert run(capsys, "memory", "import", "--user", "u1", str(imported))[0] == 0  # nothing new
    code, out, _ = run(capsys, "memory", "history", "--user", "u1", "--json")
    rows = json.loads(out)
    assert [r["version"] for r in rows] == [1, 2] and rows[1]["added"] == [] and len(rows[1]["kept"]) == len(MEMORY)
    code, out, _ = run(capsys, "memory", "users", "--json")
    assert code == 0 and [(u["name"], u["versions"], u["sessions"]) for u in json.loads(out)] == [("u1", 2, 0)]
    assert "u1  0 sessions (last -)  2 memory versions" in run(capsys, "memory", "users")[1]


def test_malformed_import_lines_are_reported_and_nothing_is_written(db, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "사용자는 학생이다"}\nnot json\n{"txt": "x"}\n{"text": ""}\n', encoding="utf-8")
    code, _, err = run(capsys, "memory", "import", "--user", "u2", str(bad))
    assert code == 2 and err.count("\n") == 1 and "line 2" in err and "line 3" in err and "line 4" in err
    assert run(capsys, "memory", "show", "--user", "u2")[0] == 2


def test_unknown_user_gets_a_one_line_error_with_a_fix(db, capsys):
    code, out, err = run(capsys, "memory", "show", "--user", "nobody")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "keem session --user nobody" in err


def test_users_never_see_each_other(imported, tmp_path, capsys):
    other = tmp_path / "b.txt"
    other.write_text("사용자는 바이올린을 배운다\n", encoding="utf-8")
    run(capsys, "memory", "import", "--user", "u2", str(other))
    for argv in (("show", "--json"), ("history", "--json"), ("search", "--json", "--k", "10", "손목 테니스 딸")):
        _, out, _ = run(capsys, "memory", argv[0], "--user", "u2", *argv[1:])
        assert "바이올린" in out and not any(t in out for t in MEMORY)


def test_forget_removes_the_user(imported, capsys):
    assert run(capsys, "memory", "forget", "--user", "u1", "--yes")[0] == 0
    assert run(capsys, "memory", "show", "--user", "u1")[0] == 2


def test_scripted_sessions_make_versions_with_a_real_transformers_model(
    db, tmp_path, tiny_llama_dir, capsys, monkeypatch
):
    monkeypatch.setenv("KEEM_UPDATE_MAX_TOKENS", "16")
    monkeypatch.setenv("KEEM_REPLY_MAX_TOKENS", "8")
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    script = tmp_path / "s1.txt"
    script.write_text("안녕! 나 테니스 치다가 손목을 다쳤어.\n\n한 달은 보호대를 차래.\n", encoding="utf-8")
    for expected in (1, 2):
        code, out, err = run(
            capsys, "session", "--user", "minsu", "--model", f"hf:{tiny_llama_dir}", "--script", str(script)
        )
        assert code == 0 and f"memory v{expected}" in out, err
    code, out, _ = run(capsys, "memory", "show", "--user", "minsu", "--json")
    sentences = json.loads(out)["sentences"]
    assert sentences and all(s["text"] for s in sentences)
    assert any("손목" in s["text"] for s in sentences)  # the tiny model writes garbage: the user's words are kept
    code, out, _ = run(capsys, "memory", "history", "--user", "minsu", "--json")
    assert [r["version"] for r in json.loads(out)] == [1, 2] and all(r["size"] for r in json.loads(out))


def test_a_script_and_an_import_saved_with_a_byte_order_mark_store_no_u_feff(
    db, tmp_path, tiny_llama_dir, capsys, monkeypatch
):
    """Windows editors save UTF-8 with a BOM: it is no part of the first message or the first imported sentence."""
    from memory.store import Store

    monkeypatch.setenv("KEEM_UPDATE_MAX_TOKENS", "16")
    monkeypatch.setenv("KEEM_REPLY_MAX_TOKENS", "8")
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    script, mem = tmp_path / "s1.txt", tmp_path / "mem.txt"
    script.write_text("안녕! 나 테니스 치다가 손목을 다쳤어.\n", encoding="utf-8-sig")
    mem.write_text("사용자는 고양이를 키운다.\n", encoding="utf-8-sig")
    assert script.read_bytes().startswith(b"\xef\xbb\xbf")
    code, _, err = run(capsys, "session", "--user", "minsu", "--model", f"hf:{tiny_llama_dir}", "--script", str(script))
    assert code == 0, err
    assert run(capsys, "memory", "import", "--user", "jiu", "--embedder", "ngram", str(mem))[0] == 0
    store = Store(db)
    try:
        [session] = store.sessions.of_user(store.users.require("minsu"))
        first = store.turns.of_session(session["id"])[0]
        assert first["role"] == "user" and first["text"] == "안녕! 나 테니스 치다가 손목을 다쳤어."
        assert store.versions.latest(store.users.require("jiu")).texts == ["사용자는 고양이를 키운다."]
    finally:
        store.close()


def test_a_bad_script_line_stops_before_anything_is_written(db, tmp_path, capsys):
    script = tmp_path / "s.txt"
    script.write_text("안녕\n" + "가" * 100_000 + "\n", encoding="utf-8")
    code, _, err = run(capsys, "session", "--user", "minsu", "--model", "demo", "--script", str(script))
    assert code == 2 and "line 2" in err and "100,000" in err
    assert run(capsys, "memory", "show", "--user", "minsu")[0] == 2


def test_unreachable_openai_server_is_one_line_and_writes_nothing(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    script = tmp_path / "s.txt"
    script.write_text("안녕\n", encoding="utf-8")
    code, _, err = run(capsys, "session", "--user", "minsu", "--model", "openai:gpt-4o", "--script", str(script))
    assert code == 2 and "OPENAI_BASE_URL" in err.splitlines()[-1]
    assert run(capsys, "memory", "history", "--user", "minsu")[0] == 2  # no user was even created


def _help(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0, argv
    return capsys.readouterr().out


def _subcommands(help_text: str) -> list[str]:
    """The commands a group's usage line offers: its `{a,b,c} ...` (an option's choices have no `...`)."""
    usage = help_text.split("\n\n")[0]
    found = re.findall(r"(?:^|\s)\{([\w,-]+)\}\s+\.\.\.", usage)
    return found[0].split(",") if found else []


def test_every_command_and_group_has_help_with_an_example(capsys):
    """Walks the parser as a user does, from `keem --help` down, so a new command is checked without listing it."""
    seen, todo = [], [[]]
    while todo:
        argv = todo.pop()
        text = _help(capsys, argv)
        example = re.split(r"\n(?:example|examples):\n", text)[1:]
        assert example and re.search(r"(keem|python app\.py) ", example[0]), f"`keem {' '.join(argv)}`: no example"
        seen.append(" ".join(argv))
        todo += [[*argv, name] for name in _subcommands(text)]
    assert {"", "memory", "memory forget", "jobs retry", "trial report", "eval", "eval retrieval", "chat"} <= set(
        seen
    )  # the walk reached the groups and their commands


def test_each_setting_option_names_a_settings_field_and_is_declared(capsys):
    """`chatbot/cli/options.py: SETTING_OF` is the one mapping from options to Settings; each side exists."""
    from dataclasses import fields

    from chatbot.cli.main import build_parser
    from chatbot.cli.options import SETTING_OF
    from chatbot.settings import Settings

    assert set(SETTING_OF.values()) <= {f.name for f in fields(Settings)}
    declared: set[str] = set()
    for argv in (["session", "--user", "a"], ["chat"], ["trial", "report", "--export", "e", "--out", "o"]):
        declared |= set(vars(build_parser().parse_args(argv)))
    assert set(SETTING_OF) <= declared
    with pytest.raises(TypeError, match="no field nope"):
        Settings.load({}, nope=1)  # a flag that matches no field is a mistake, not silently dropped


def test_eval_commands_take_the_embedder_from_keem_embedder(capsys, monkeypatch):
    locomo = "evaluation/fixtures/locomo_mini.json"
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    code, out, _ = run(capsys, "eval", "retrieval", "--locomo", locomo, "--json")
    assert code == 0 and json.loads(out)["embedder"] == "ngram"  # as `keem session` would use it


def test_memory_cues_flag_writes_cues_through_an_openai_compatible_server(db, tmp_path, capsys, monkeypatch):
    from tests.fake_openai import FakeOpenAIServer

    def reply(body):
        prompt = body["messages"][-1]["content"]
        if "낱말" in prompt:  # memory/prompts/cues.txt
            return "1: KTX, 금요일 밤, 기차역"
        if "요약" in prompt or "사용자는" in prompt:  # the summary the accumulate strategy asks for
            return "사용자는 남편이 지방으로 발령이 나서 주말부부로 지낸다."
        return "그렇구나!"

    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    script = tmp_path / "s.txt"
    script.write_text("남편이 지방 발령 나서 이제 주말부부야\n", encoding="utf-8")
    with FakeOpenAIServer(reply=reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code, out, err = run(
            capsys,
            "session",
            "--user",
            "minsu",
            "--model",
            "openai:fake",
            "--strategy",
            "accumulate",
            "--memory-cues",
            "--script",
            str(script),
        )
    assert code == 0, err
    assert "[cues: KTX, 금요일 밤, 기차역]" in out
    code, out, _ = run(capsys, "memory", "show", "--user", "minsu", "--json")
    assert json.loads(out)["sentences"][0]["cues"] == "KTX, 금요일 밤, 기차역"


def test_a_failed_update_becomes_a_version_by_jobs_retry_or_by_a_restart(db, tmp_path, capsys, monkeypatch):
    """The update model is down for every attempt (the job ends failed, its error kept), then healthy again."""
    from chatbot.bot import Chatbot
    from chatbot.settings import Settings
    from chatbot.worker import Worker
    from memory.jobs import MAX_ATTEMPTS
    from models.embedders import NgramEmbedder
    from models.errors import GenerationError
    from models.fake import ScriptedChatModel
    from tests.fake_openai import FakeOpenAIServer

    down = ScriptedChatModel(responder=lambda msgs: (_ for _ in ()).throw(GenerationError("server down")))
    bot = Chatbot(
        Settings(db=db, embedder="ngram"),
        chat_model=ScriptedChatModel(responder=lambda m: "그렇구나"),
        update_model=down,
        embedder=NgramEmbedder(),
    )
    jobs = []
    for name in ("minsu", "jiwoo"):
        session = bot.start(name)
        list(session.send("나 요즘 요가를 시작했어"))
        jobs.append(session.end())
    for job in jobs:
        for _ in range(MAX_ATTEMPTS):
            with pytest.raises(GenerationError):
                bot.run_update(job)
    bot.store.close()
    code, out, _ = run(capsys, "jobs", "list", "--status", "failed", "--json")
    failed = json.loads(out)
    assert code == 0 and [(j["id"], j["user"], j["last_error"]) for j in failed] == [
        (jobs[0], "minsu", "GenerationError: server down"),
        (jobs[1], "jiwoo", "GenerationError: server down"),
    ]
    assert "last error: GenerationError: server down" in run(capsys, "jobs", "list")[1]

    summary = "사용자는 요즘 요가를 시작했다."
    healthy = lambda body: "통과" if "새 기억이 올바른지" in body["messages"][-1]["content"] else summary  # noqa: E731
    with FakeOpenAIServer(reply=healthy) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code, out, err = run(
            capsys,
            "jobs",
            "retry",
            "--user",
            "minsu",
            "--update-model",
            "openai:local",
            "--model",
            "openai:local",
            "--embedder",
            "ngram",
        )
        assert code == 0 and f"job {jobs[0]}: memory v1" in out and summary in out, err
    assert run(capsys, "memory", "show", "--user", "minsu")[0] == 0

    # jiwoo's failed job: a restart of the app takes it back, with the model healthy now
    bot = Chatbot(
        Settings(db=db, embedder="ngram"),
        chat_model=ScriptedChatModel(responder=lambda m: "응"),
        update_model=ScriptedChatModel(
            responder=lambda msgs: "통과" if "새 기억이 올바른지" in msgs[-1]["content"] else summary
        ),
        embedder=NgramEmbedder(),
    )
    worker = Worker(bot, poll_s=0.05)
    worker.recover()
    worker.run_pending()
    assert bot.store.queue.get(jobs[1])["status"] == "done" and bot.store.versions.latest(bot.store.users.find("jiwoo"))
    code, out, _ = run(capsys, "jobs", "retry")
    assert code == 0 and "no failed update jobs" in out


def test_jobs_retry_takes_an_update_waiting_in_its_backoff_after_the_model_server_was_down(db, capsys):
    """One failed attempt leaves the job pending until its retry time; `jobs retry` puts it back now."""
    from chatbot.bot import Chatbot
    from chatbot.settings import Settings
    from models.embedders import NgramEmbedder
    from models.errors import GenerationError
    from models.fake import ScriptedChatModel

    down = ScriptedChatModel(responder=lambda msgs: (_ for _ in ()).throw(GenerationError("server down")))
    bot = Chatbot(
        Settings(db=db, embedder="ngram"),
        chat_model=ScriptedChatModel(responder=lambda m: "그렇구나"),
        update_model=down,
        embedder=NgramEmbedder(),
    )
    session = bot.start("minsu")
    list(session.send("나 요즘 요가를 시작했어"))
    job = session.end()
    with pytest.raises(GenerationError):
        bot.run_update(job)
    assert bot.store.queue.get(job)["status"] == "pending" and bot.store.queue.get(job)["next_attempt_at"]
    bot.store.close()
    code, out, _ = run(capsys, "jobs", "retry", "--no-run")
    assert code == 0 and f"queued again: jobs {job}" in out
    queued = Store(db).queue.get(job)
    assert (queued["status"], queued["attempts"], queued["next_attempt_at"]) == ("pending", 0, None)  # runs now


def test_a_session_whose_update_failed_says_jobs_retry_and_jobs_retry_takes_it(db, tmp_path, capsys, monkeypatch):
    """The model server answers chat but fails every memory update: `keem session` says the update will be
    retried, or now with `keem jobs retry`, and `jobs retry` then finds the job waiting in its backoff."""
    from tests.fake_openai import FakeOpenAIServer

    def reply(body: dict) -> str:
        if "당신은 사용자와" in body["messages"][0]["content"]:
            return "그렇구나"
        raise RuntimeError("the update model is down")

    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    script = tmp_path / "s.txt"
    script.write_text("나 요즘 요가를 시작했어\n", encoding="utf-8")
    with FakeOpenAIServer(reply=reply) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code, _, err = run(capsys, "session", "--user", "minsu", "--model", "openai:fake", "--script", str(script))
    assert code != 0 and "will be retried at the next start, or now with `keem jobs retry`" in err, err
    code, out, _ = run(capsys, "jobs", "retry", "--no-run")
    assert code == 0 and "queued again: jobs 1" in out


def test_imports_and_scripts_past_their_size_are_refused_at_once_with_what_to_do(db, tmp_path, capsys):
    from chatbot.cli.memory_commands import MAX_IMPORT_SENTENCES

    huge = tmp_path / "huge.txt"
    huge.write_text("".join(f"사용자는 {i}번째 문장이다\n" for i in range(MAX_IMPORT_SENTENCES + 1)), encoding="utf-8")
    code, _, err = run(capsys, "memory", "import", "--user", "u1", str(huge))
    assert code == 2 and f"{MAX_IMPORT_SENTENCES + 1:,} lines" in err and "split the file" in err
    big = tmp_path / "big.txt"
    big.write_bytes(b"\xea\xb0\x80" * 3_000_000)  # 9 MB of one line
    code, _, err = run(capsys, "session", "--user", "u1", "--model", "demo", "--script", str(big))
    assert code == 2 and "9,000,000 bytes" in err and "one script is one session" in err
    assert run(capsys, "memory", "users", "--json")[1].strip() == "[]"  # nothing was written


def test_counts_in_cli_output_take_the_right_english_number(db, tmp_path, capsys):
    from memory.words import elapsed, plural

    assert (plural(1, "attempt"), plural(0, "session"), plural(2, "memory version")) == (
        "1 attempt",
        "0 sessions",
        "2 memory versions",
    )
    assert (elapsed(4.25), elapsed(785)) == ("4.2 s", "13 min 05 s")
    one = tmp_path / "one.txt"
    one.write_text("사용자는 고양이 두 마리를 키운다\n", encoding="utf-8")
    code, out, _ = run(capsys, "memory", "import", "--user", "u1", str(one))
    assert code == 0 and "imported 1 sentence into u1's memory v1 (1 in all)" in out
    assert "u1  0 sessions (last -)  1 memory version" in run(capsys, "memory", "users")[1]
    assert "v1  " in (history := run(capsys, "memory", "history", "--user", "u1")[1]) and "1 sentence: kept" in history
    assert "note: imported 1 sentence from one.txt" in history


def _bot_with_leftover_jobs(db, update_model):
    """minsu and jiwoo each ended a session whose update an earlier run never ran (the process died)."""
    from chatbot.bot import Chatbot
    from chatbot.settings import Settings
    from models.embedders import NgramEmbedder
    from models.fake import ScriptedChatModel

    bot = Chatbot(
        Settings(db=db, embedder="ngram"),
        chat_model=ScriptedChatModel(responder=lambda m: "그렇구나"),
        update_model=update_model,
        embedder=NgramEmbedder(),
    )
    jobs = {}
    for name in ("jiwoo", "minsu"):
        session = bot.start(name)
        list(session.send("나 요즘 요가를 시작했어"))
        jobs[name] = session.end()
    return bot, jobs


def test_keem_session_runs_only_this_users_leftover_updates_unless_all_jobs(db, tmp_path, capsys, monkeypatch):
    """jiwoo's leftover update (13 minutes with the demo model) is not minsu's to wait for: `keem session --user
    minsu` runs minsu's, says whose and how long it took, and leaves jiwoo's to the app or `--all-jobs`."""
    from chatbot.cli import session as cli_session
    from models.fake import ScriptedChatModel

    summary = "사용자는 요즘 요가를 시작했다."
    verdict_or_summary = lambda msgs: "통과" if "새 기억이 올바른지" in msgs[-1]["content"] else summary  # noqa: E731
    updater = ScriptedChatModel(responder=verdict_or_summary)
    bot, jobs = _bot_with_leftover_jobs(db, updater)
    monkeypatch.setattr(cli_session, "load_bot", lambda settings: bot)
    script = tmp_path / "s.txt"
    script.write_text("오늘은 요가를 쉬었어\n", encoding="utf-8")

    code, out, err = run(capsys, "session", "--user", "minsu", "--script", str(script))
    assert code == 0, err
    assert bot.store.queue.get(jobs["minsu"])["status"] == "done"
    assert bot.store.queue.get(jobs["jiwoo"])["status"] == "pending"  # not minsu's to run
    assert "1 memory update of other users left from an earlier run: not run here" in err
    assert f"finishing minsu's memory update left from an earlier run (job {jobs['minsu']}" in err
    assert re.search(rf"\[memory update of minsu \(job {jobs['minsu']}\), \d+\.\d s: summarizing\]", err), err
    assert "jiwoo" not in err.replace("of other users", "")
    assert "# minsu: memory v2" in out  # the leftover update's v1, then this session's

    code, _, err = run(capsys, "session", "--user", "minsu", "--script", str(script), "--all-jobs")
    assert code == 0 and bot.store.queue.get(jobs["jiwoo"])["status"] == "done", err
    assert f"finishing jiwoo's memory update left from an earlier run (job {jobs['jiwoo']}" in err
    assert "[memory update of jiwoo" in err and "not run here" not in err


def test_a_new_user_runs_no_one_elses_leftover_update(db, tmp_path, capsys, monkeypatch):
    from chatbot.cli import session as cli_session
    from models.fake import ScriptedChatModel

    bot, jobs = _bot_with_leftover_jobs(db, ScriptedChatModel(responder=lambda msgs: "통과"))
    monkeypatch.setattr(cli_session, "load_bot", lambda settings: bot)
    script = tmp_path / "s.txt"
    script.write_text("안녕\n", encoding="utf-8")
    code, _, err = run(capsys, "session", "--user", "seoyeon", "--script", str(script))
    assert code == 0 and "2 memory updates of other users left from an earlier run: not run here" in err, err
    assert {bot.store.queue.get(job)["status"] for job in jobs.values()} == {"pending"}


def test_a_transcript_held_elsewhere_is_stored_as_said_and_only_the_update_calls_the_model(
    db, tmp_path, capsys, monkeypatch
):
    from tests.fake_openai import FakeOpenAIServer
    from tests.helpers import answer

    talk = tmp_path / "talk.jsonl"
    said = [
        {"role": "system", "content": "너는 다른 봇이야"},
        {"role": "user", "content": "나 다음 달에 제주도로 이사 가"},
        {"role": "assistant", "content": "와, 설레겠네요!"},
        {"role": "user", "content": "응 바다 근처 집을 구했어"},
    ]
    talk.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in said) + "\n", encoding="utf-8")
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with FakeOpenAIServer(reply=lambda body: answer(body["messages"])) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code, out, err = run(capsys, "session", "--user", "minsu", "--model", "openai:fake", "--transcript", str(talk))
    assert code == 0, err
    assert "stored 3 turns" in err and "제주도로 이사" in out  # the new memory, printed
    assert not any("당신은 사용자와" in r["messages"][0]["content"] for r in server.requests)  # nothing answered
    store = Store(db)
    rows = store.rows("select role, text from turns order by id")
    assert [(r["role"], r["text"]) for r in rows] == [(m["role"], m["content"]) for m in said[1:]]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "안녕"}\n{"role": "bot", "content": "네"}\n', encoding="utf-8")
    code, _, err = run(capsys, "session", "--user", "jiwoo", "--model", "demo", "--transcript", str(bad))
    assert code == 2 and "turn 2" in err and "nothing stored" in err
    assert run(capsys, "memory", "show", "--user", "jiwoo")[0] == 2
