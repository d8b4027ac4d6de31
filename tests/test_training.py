"""Training a local updater: rows -> the app's update prompts, LoRA training with resume, the adapter in the app,
and `keem eval updater`. The tiny random Llama writes garbage: the tests check structure, not text."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from chatbot.cli.main import build_parser, main
from memory.prompts import render
from models.base import estimate_tokens
from models.errors import ModelSpecError, ModelUnavailableError
from models.fake import section, stage_of
from tests.conftest import build_tiny_llama
from training.data import prepare, read_rows, split_episodes, update_call
from training.state import checkpoints

pytestmark = [
    # looked up, not imported: importing peft costs seconds of CPU, which every pytest-xdist worker paid at collection
    pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is missing: pip install -e '.[test]'"),
    # peft asks transformers 5 a deprecated question when it wraps a model; not ours to fix.
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "evaluation" / "fixtures"
DATA = FIXTURES / "updater_dataset.jsonl"
CORPUS = FIXTURES / "updater_corpus.json"
# A short run: 6 steps of 2 rows, validation every 2 steps on the 2 held-out episodes (6 rows).
RUN = [
    "--max-steps",
    "6",
    "--batch-size",
    "2",
    "--grad-accum",
    "1",
    "--lr",
    "0.02",
    "--warmup",
    "0",
    "--eval-every",
    "2",
    "--val-fraction",
    "0.34",
    "--patience",
    "5",
    "--no-progress",
]


def teacher(corpus: Path = CORPUS):
    """The scripted strong model the fixture was built with: it writes the corpus's integrated memories."""
    from evaluation.corpora.episodes import read_episodes

    after = {tuple(s.summary): s.memory_after for e in read_episodes(corpus) for s in e.sessions if s.memory_after}

    def respond(messages: list[dict[str, Any]]) -> str:
        prompt = messages[-1]["content"]
        if "감정과 그 감정의 원인" in prompt:
            return "\n".join(section(prompt, "\n요약:\n", "\n답:"))
        if "새 기억으로 통합" in prompt:
            previous = section(prompt, "\n이전 기억:\n", "\n이번 요약:")
            summary = section(prompt, "\n이번 요약:\n", "\n새 기억:")
            return "\n".join(after.get(tuple(summary)) or previous + summary)
        if stage_of(prompt) == "guard":  # every pair it is asked about: the session replaced the old sentence
            return "\n".join(f"{n}: 예" for n in range(1, 9))
        if stage_of(prompt) == "scope":  # a large memory: it names nothing (the scope is the words')
            return "번호: 없음"
        if "새 기억이 올바른지" in prompt:
            return "통과"
        raise AssertionError(f"unexpected prompt: {prompt[:60]}")

    return respond


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 2-layer random Llama whose BPE tokenizer (1,000 tokens) was trained here on the prompts and the data, so
    an update prompt is ~1,100 tokens; saved like a hub checkpoint."""
    texts = [
        (ROOT / "memory" / "prompts" / f"{n}.txt").read_text(encoding="utf-8") for n in ("update", "update_system")
    ]
    texts += DATA.read_text(encoding="utf-8").splitlines()
    return build_tiny_llama(tmp_path_factory.mktemp("korean-tiny-llama"), texts, 1000)


@pytest.fixture(scope="module")
def trained(base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short run of `keem train-updater ... --merge` on the fixture dataset."""
    out = tmp_path_factory.mktemp("updater")
    assert main(["train-updater", str(DATA), "--base", f"hf:{base}", "--out", str(out), "--merge", *RUN]) == 0
    return out


def record(out: Path) -> dict[str, Any]:
    return json.loads((out / "training.json").read_text(encoding="utf-8"))


# -- rows into the app's update prompt ------------------------------------------------------------
def test_a_row_becomes_the_update_call_the_app_makes() -> None:
    rows = {r["key"]: r for r in read_rows(DATA)}
    messages, budget, answer = update_call(rows["tr01#2"], estimate_tokens, 8192)
    assert messages[0] == {"role": "system", "content": render("update_system")}
    prompt = messages[1]["content"]
    assert "지난 대화는 2024-01-05, 이번 대화는 2024-02-20(6주 뒤)" in prompt  # dates and elapsed time, as steps.py
    assert section(prompt, "\n이전 기억:\n", "\n이번 요약:") == rows["tr01#2"]["previous_memory"]
    assert section(prompt, "\n이번 요약:\n", "\n새 기억:") == rows["tr01#2"]["reflected_summary"]
    assert answer == "\n".join(rows["tr01#2"]["memory"]) and budget > 0
    # a scoped row trains on the part the model saw: its carried sentences come first in the memory
    scoped = {**rows["tr01#3"], "scope": {"rewritten": 2, "carried": 1, "ceiling": 64}}
    messages, _, answer = update_call(scoped, estimate_tokens, 8192)
    carried = scoped["memory"][0]
    assert carried not in section(messages[1]["content"], "\n이전 기억:\n", "\n이번 요약:")
    assert answer == "\n".join(scoped["memory"][1:])


def test_loss_is_on_the_answer_only_and_episodes_never_straddle_the_split(base: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = read_rows(DATA)
    prepared = prepare(rows, tokenizer, context_window=2048, eos_ids={2}, max_length=4096, val_fraction=0.34, seed=0)
    assert {e.episode_id for e in prepared.train}.isdisjoint({e.episode_id for e in prepared.val})
    assert len(prepared.split["validation"]) == 2 and len(prepared.train) + len(prepared.val) == 18
    example = next(e for e in prepared.train if e.key == "tr01#2")
    row = next(r for r in rows if r["key"] == "tr01#2")
    assert tokenizer.decode(example.input_ids[example.n_prompt :]) == "\n".join(row["memory"]) + "</s>"
    assert tokenizer.decode(example.input_ids[: example.n_prompt]).endswith("새 기억:</s><|assistant|>")
    assert split_episodes(["a", "b", "c"], 0.34, 0) == split_episodes(["c", "b", "a"], 0.34, 0)
    short = prepare(rows, tokenizer, context_window=2048, eos_ids={2}, max_length=1150, val_fraction=0.34, seed=0)
    assert short.skipped_long and short.used == 18 - len(short.skipped_long)


# -- training --------------------------------------------------------------------------------------
def test_training_lowers_validation_loss_and_writes_adapter_report_and_merged_model(trained: Path) -> None:
    rec = record(trained)
    state = rec["state"]
    assert state["finished"] and state["step"] == 6 and [v["step"] for v in state["val"]] == [0, 2, 4, 6]
    assert state["best_val"] < state["val"][0]["loss"]  # below the base model's validation loss
    assert state["val"][-1]["loss"] < state["val"][0]["loss"]
    assert (trained / "adapter_config.json").is_file() and (trained / "adapter_model.safetensors").is_file()
    assert [p.name for p in checkpoints(trained)] == ["step-000006"]
    assert rec["data"]["split"]["validation"] == ["tr03", "tr05"] and rec["data"]["val_rows"] == 6
    report = (trained / "report.md").read_text(encoding="utf-8")
    assert "![loss curves](loss.png)" in report and (trained / "loss.png").stat().st_size > 1000
    assert rec["data"]["sha256"] in report and rec["prompts"]["steps"] in report and "time per 1,000 rows" in report
    assert "keem train-updater " + str(DATA) in report and "--max-steps 6" in report
    assert (trained / "merged" / "model.safetensors").is_file() and (trained / "merged" / "training.json").is_file()


def test_the_adapter_loads_through_the_hf_spec_and_updates_a_scripted_session(
    trained: Path, base: str, tmp_path, capsys, monkeypatch
) -> None:
    from models.spec import load_chat_model

    spec = f"hf:{base}+lora:{trained}"
    model = load_chat_model(spec)
    assert model.spec == spec and "LoRA" in model.description
    assert load_chat_model(f"hf:{trained}/merged").context_window == 2048
    monkeypatch.setenv("KEEM_DB", str(tmp_path / "keem.db"))
    monkeypatch.setenv("KEEM_UPDATE_MAX_TOKENS", "16")
    monkeypatch.setenv("KEEM_REPLY_MAX_TOKENS", "8")
    monkeypatch.setenv("KEEM_EMBEDDER", "ngram")
    script = tmp_path / "s.txt"
    script.write_text("안녕! 나 테니스 치다가 손목을 다쳤어.\n한 달은 보호대를 차래.\n", encoding="utf-8")
    code = main(
        ["session", "--user", "minsu", "--model", f"hf:{base}", "--update-model", spec, "--script", str(script)]
    )
    out, err = capsys.readouterr()
    assert code == 0 and "memory v1" in out, err
    assert main(["memory", "history", "--user", "minsu", "--json"]) == 0
    versions = json.loads(capsys.readouterr().out)
    assert [v["model"] for v in versions] == [spec] and versions[0]["size"] > 0  # garbage in: the fallback commits


# A `keem train-updater` in its own process that stops after step 5 (step 4's checkpoint is on disk, step 5 is
# not) and says so, so the test can SIGKILL it there: no exception handler, `finally` or atexit runs.
KILLED_CHILD = """
import sys, time
from chatbot.cli.main import build_parser
from training.command import command_line, config_from_args
from training.train import train

config = config_from_args(build_parser().parse_args(sys.argv[1:]))

def wait_at_5(state):
    if state.step == 5:
        print("step 5", flush=True)
        time.sleep(300)

train(config, command=command_line(config), on_step=wait_at_5)
"""


def kill_at_step_5(args: list[str], log: Path) -> None:
    """Run `keem <args>` in a child process and SIGKILL it after its fifth step."""
    import os
    import select
    import signal
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    with log.open("w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_CHILD, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            assert child.stdout is not None
            ready, _, _ = select.select([child.stdout], [], [], 120)
            line = child.stdout.readline() if ready else ""
            assert line == "step 5\n", f"the child did not reach step 5: {log.read_text()[-2000:]}"
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_like_an_uninterrupted_one(
    base: str, trained: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    args = ["train-updater", str(DATA), "--base", f"hf:{base}", "--out", str(out), *RUN]
    kill_at_step_5(args, tmp_path / "child.log")
    assert [p.name for p in checkpoints(out)] == ["step-000004"] and not record(out)["state"]["finished"]
    assert record(out)["state"]["step"] == 4  # step 5 died with the process
    assert main(args) == 0  # the same command again: resumes (the kill released the folder's lock)
    rec, clean = record(out), record(trained)
    state = rec["state"]
    assert state["finished"] and state["step"] == clean["state"]["step"] == 6 and rec["resumed_from"] == "step-000004"
    assert [t["step"] for t in state["train"]] == [1, 2, 3, 4, 5, 6]
    assert [t["loss"] for t in state["train"]] == pytest.approx([t["loss"] for t in clean["state"]["train"]], rel=1e-4)
    assert [v["loss"] for v in state["val"]] == pytest.approx([v["loss"] for v in clean["state"]["val"]], rel=1e-4)
    assert len(rec["commands"]) == 2 and rec["commands"][0] == rec["commands"][1]  # the same command, per run
    assert f"--out {out} " in rec["commands"][0] and "--max-steps 6" in rec["commands"][0]
    assert (out / "adapter_model.safetensors").is_file() and (out / "report.md").is_file()
    assert main(args) == 0 and record(out)["state"]["step"] == 6  # finished: a third run trains nothing
    capsys.readouterr()
    assert main([*args, "--lr", "0.5"]) == 2
    assert "holds a training run with lr 0.02, not 0.5" in capsys.readouterr().err


# -- keem eval updater -----------------------------------------------------------------------------
def test_eval_updater_prints_the_table_for_the_trained_model_and_a_scripted_fake(
    trained: Path, base: str, tmp_path: Path, capsys
) -> None:
    from evaluation.commands.eval import run_eval
    from models.fake import ScriptedChatModel
    from models.spec import load_chat_model

    def load(spec: str):
        return ScriptedChatModel(responder=teacher(), spec=spec) if spec == "fake:teacher" else load_chat_model(spec)

    spec = f"hf:{base}+lora:{trained}"
    out = tmp_path / "eval"
    args = build_parser().parse_args(
        [
            "eval",
            "updater",
            "--data",
            str(DATA),
            "--model",
            spec,
            "--model",
            "fake:teacher",
            "--limit",
            "1",
            "--attempts",
            "1",
            "--update-max-tokens",
            "80",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert run_eval(args, load_model=load) == 0
    printed = capsys.readouterr().out
    assert f"`{spec}`" in printed and "`fake:teacher`" in printed and "verification pass rate" in printed
    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert result["meta"]["episodes"] == ["tr03"] and result["meta"]["held_out"] == str(trained)
    fake, tiny = result["models"]["fake:teacher"], result["models"][spec]
    assert fake["verification_pass_rate"] == 1.0 and fake["kept_verbatim_committed"] == 1.0
    assert fake["keyword_recall"] == 1.0 and fake["reference_reproduced"] == 1.0
    assert fake["carried_per_update"] >= 1  # at an 80-token budget untouched sentences are carried
    assert tiny["verification_pass_rate"] == 0.0 and tiny["cut_answers"] >= 1  # garbage, cut: the fallback
    assert tiny["kept_verbatim_committed"] == 1.0 and tiny["prompt_tokens_per_update"] > 0
    assert "| held-out updates |" in (out / "report.md").read_text(encoding="utf-8")
    assert len((out / "updates.jsonl").read_text(encoding="utf-8").splitlines()) == 2


def test_kept_verbatim_counts_what_the_model_dropped_and_the_guard_restored() -> None:
    from evaluation.corpora.episodes import read_episodes
    from models.fake import ScriptedChatModel
    from training.evaluate import update_row

    row = next(r for r in read_rows(DATA) if r["key"] == "tr01#3")
    episode = next(e for e in read_episodes(CORPUS) if e.id == "tr01")
    cats = "사용자는 고양이 두 마리를 키운다."
    good = update_row(ScriptedChatModel(responder=teacher()), row, episode, ceiling=512, attempts=1)
    assert (good["status"], good["must_keep"], good["kept_own"], good["restored"]) == ("ok", 3, 3, 0)
    assert good["memory"] == row["memory"] and good["carried"] == 0 and good["cut"] == 0

    def drops_the_cats(messages: list[dict[str, Any]]) -> str:
        return "\n".join(line for line in teacher()(messages).splitlines() if line != cats)

    dropped = update_row(ScriptedChatModel(responder=drops_the_cats), row, episode, ceiling=512, attempts=1)
    assert dropped["kept_own"] == 2 and dropped["restored"] == 1 and dropped["kept_committed"] == 3
    assert cats in dropped["memory"] and cats not in dropped["generated"]


# -- errors ----------------------------------------------------------------------------------------
def test_bad_input_is_one_line_with_a_fix(tmp_path: Path, capsys, base: str) -> None:
    out = str(tmp_path / "o")
    assert main(["train-updater", str(DATA), "--base", "openai:gpt-4o", "--out", out]) == 2
    assert "--base must be hf:" in capsys.readouterr().err
    assert main(["train-updater", str(tmp_path), "--base", f"hf:{base}", "--out", out]) == 2
    assert "give the --out folder of `keem build-dataset`" in capsys.readouterr().err
    assert main(["train-updater", str(DATA), "--base", f"hf:{base}", "--out", out, "--4bit", "--device", "cpu"]) == 2
    assert "--4bit (QLoRA) needs a CUDA GPU" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "x"}\n', encoding="utf-8")
    assert main(["train-updater", str(bad), "--base", f"hf:{base}", "--out", out]) == 2
    assert "line 1 is not a `keem build-dataset` row" in capsys.readouterr().err
    from models.spec import load_chat_model

    with pytest.raises(ModelSpecError, match="hf:<base hub id or path>\\+lora:"):
        load_chat_model("hf:+lora:runs/x")
    with pytest.raises(ModelUnavailableError, match="holds no LoRA adapter"):
        load_chat_model(f"hf:{base}+lora:{tmp_path}")


def test_help_says_what_size_fits_where(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["train-updater", "--help"])
    text = capsys.readouterr().out
    assert "what fits where" in text and "CPU" in text and "--4bit" in text and "80 GB" in text
    assert "Measured on this project's" in text and "GPU estimates   (no GPU was measured" in text


def test_the_fixture_is_what_the_builder_writes_and_holds_the_prompts_it_sent(tmp_path: Path) -> None:
    """Rebuild the fixture with the builder and the scripted teacher; KEEM_WRITE_FIXTURES=1 rewrites the file."""
    import os

    from evaluation.builder import BuildConfig, build_dataset
    from evaluation.corpora.episodes import read_episodes
    from models.fake import ScriptedChatModel

    model = ScriptedChatModel(responder=teacher(), spec="fake:teacher")
    build_dataset(
        read_episodes(CORPUS),
        model,
        BuildConfig(
            out_dir=tmp_path,
            concurrency=1,
            progress=False,
            source_format="carecall",
            source_path="evaluation/fixtures/updater_corpus.json",
        ),
    )
    if os.environ.get("KEEM_WRITE_FIXTURES") == "1":
        DATA.write_text((tmp_path / "dataset.jsonl").read_text(encoding="utf-8"), encoding="utf-8")

    def stable(path: Path) -> list[tuple]:
        return [
            (
                r["key"],
                r["previous_memory"],
                r["reflected_summary"],
                r["memory"],
                r["verdict"],
                r["source"],
                r["prompt_hash"],
            )
            for r in read_rows(path)
        ]

    assert stable(tmp_path / "dataset.jsonl") == stable(DATA)
    sent = {m[-1]["content"] for m in model.calls if "새 기억으로 통합" in m[-1]["content"]}
    for row in read_rows(DATA):  # the prompt training uses is the one the builder (the app's steps) sent
        assert update_call(row, estimate_tokens, 8192)[0][1]["content"] in sent
