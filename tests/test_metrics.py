"""Evaluation metrics with hand-computed values, and `keem eval` end to end on the CareCall fixture."""

from __future__ import annotations

import argparse
import csv
import json
import math
from datetime import date
from pathlib import Path

import pytest

from chatbot.cli.main import build_parser
from chatbot.cli.options import apply_settings, settings_from
from evaluation.commands.eval import EVAL_COMMANDS, run_eval
from evaluation.metrics import conflict, human, keywords, perplexity, voting
from models.fake import ScriptedChatModel, section

FIXTURE = Path(__file__).parent.parent / "evaluation" / "fixtures" / "carecall_eval.json"
SAMPLE = FIXTURE.parent / "carecall_memory_sample.json"  # the shape of naver-ai/carecall-memory's public sample


# -- keyword recall -------------------------------------------------------------------------------
def test_pagerank_on_a_path_graph_matches_the_hand_solution():
    # a-b-c, d = 0.85: a = c = 0.05 + 0.425 b, b = 0.05 + 0.85 (a + c)  =>  b = 0.135 / 0.2775
    rank = keywords.pagerank(["a", "b", "c"], {("a", "b"): 1.0, ("b", "c"): 1.0})
    assert rank["b"] == pytest.approx(0.135 / 0.2775, abs=1e-8)
    assert rank["a"] == rank["c"] == pytest.approx(0.05 + 0.425 * 0.135 / 0.2775, abs=1e-8)


def test_keyword_recall_on_a_tiny_dialogue():
    dialogue = [
        {"role": "user", "text": "무릎이 아파서 병원에 갔다."},
        {"role": "assistant", "text": "병원에서 주사를 맞았다."},
    ]
    doc = keywords.dialogue_doc([dialogue])
    assert doc == [("무릎", "병원"), ("병원", "주사")]
    other = keywords.dialogue_doc([[{"role": "user", "text": "무릎이 또 아파요."}]])
    idf = keywords.idf_table([doc, other])
    assert idf["무릎"] == pytest.approx(1.0)  # in both documents: ln(3/3) + 1
    assert idf["병원"] == pytest.approx(math.log(3 / 2) + 1)  # in one of two
    # PageRank 병원 0.486 > 무릎 = 주사 0.257; x idf: 병원 0.684, 주사 0.361, 무릎 0.257
    assert keywords.keywords(doc, idf, 3) == ["병원", "주사", "무릎"]
    memory = ["사용자는 무릎 관절염으로 주사를 맞았다."]  # nouns: 무릎, 관절염, 주사
    assert keywords.keyword_recall([doc], [memory], sizes=(1, 2, 3), idf_docs=[doc, other]) == [
        {1: 0.0, 2: 0.5, 3: pytest.approx(2 / 3)}
    ]


# -- conflict ratio --------------------------------------------------------------------------------
def test_conflict_ratio_from_scripted_judge_answers():
    judge_model = ScriptedChatModel(["모순", "중립입니다.", "중립", "잘 모르겠어요", "함의", "답: 모순"])
    judge = conflict.NLIJudge(judge_model)
    memory = ["사용자는 서울에 산다.", "사용자는 부산에 산다.", "사용자는 고양이를 키운다.", "사용자는 개를 키운다."]
    counts = conflict.conflicts(memory, judge.label)
    assert (counts.pairs, counts.contradiction, counts.neutral, counts.entailment, counts.invalid) == (6, 2, 2, 1, 1)
    assert counts.ratio == pytest.approx(2 / 5)  # the invalid answer is left out
    assert counts.contradicting_pairs[0] == (memory[0], memory[1])
    first_prompt = judge_model.calls[0][-1]["content"]
    assert "문장 1: 사용자는 서울에 산다." in first_prompt and "문장 2: 사용자는 부산에 산다." in first_prompt
    again = conflict.conflicts(memory, judge.label)  # cached: no new judge call
    assert len(judge_model.calls) == 6 and again.as_json() == counts.as_json()
    assert conflict.pooled([counts, again]).ratio == pytest.approx(4 / 10)


def test_a_large_memory_is_judged_on_a_reproducible_sample_of_pairs():
    memory = [f"사용자는 취미 {i}번을 좋아한다." for i in range(40)]  # 780 pairs
    judge_model = ScriptedChatModel(responder=lambda messages: "중립")
    counts = conflict.conflicts(memory, conflict.NLIJudge(judge_model).label, max_pairs=100)
    assert (counts.pairs, counts.pairs_total, len(judge_model.calls)) == (100, 780, 100)
    sample = conflict.judged_pairs(memory, 100)
    assert sample == conflict.judged_pairs(list(memory), 100)  # the same pairs in every run
    assert len(set(sample)) == 100 and set(sample) < set(conflict.sentence_pairs(memory))
    assert conflict.judged_pairs(memory, 0) == conflict.sentence_pairs(memory)  # 0 = every pair


def test_a_local_nli_classifier_judges_pairs_without_an_llm(tmp_path):
    from evaluation.metrics.conflict import ClassifierNLIJudge
    from models.errors import ModelSpecError
    from tests.conftest import build_nli_classifier

    labels = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
    judge = ClassifierNLIJudge(build_nli_classifier(tmp_path / "c", labels, always=2), device="cpu")
    memory = ["사용자는 서울에 산다.", "사용자는 부산에 산다.", "사용자는 고양이를 키운다."]
    counts = conflict.conflicts(memory, judge.label)
    assert (counts.pairs, counts.contradiction, counts.ratio) == (3, 3, 1.0)
    neutral = ClassifierNLIJudge(build_nli_classifier(tmp_path / "n", labels, always=1), device="cpu")
    assert conflict.conflicts(memory, neutral.label).ratio == 0.0
    with pytest.raises(ModelSpecError, match="3-way NLI"):
        ClassifierNLIJudge(build_nli_classifier(tmp_path / "s", {0: "POSITIVE", 1: "NEGATIVE", 2: "MIXED"}, 0))


def test_parse_label_takes_the_first_label_named():
    assert conflict.parse_label("중립 (모순은 아님)") == "neutral"
    assert conflict.parse_label("Contradiction") == "contradiction"
    assert conflict.parse_label("글쎄요") == "invalid"


# -- perplexity ------------------------------------------------------------------------------------
def test_perplexity_of_a_known_continuation_matches_a_direct_torch_computation(tiny_llama_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from models.spec import load_chat_model

    model = load_chat_model(f"hf:{tiny_llama_dir}")
    memory = ["사용자는 테니스를 치다가 손목을 다쳤다."]
    turn = perplexity.ProbeTurn((("user", "안녕하세요"),), "오늘 기분이 어때요?")
    total = perplexity.score_turns(model, [turn], memory, date(2024, 5, 1), date(2024, 4, 1))

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    lm = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, torch_dtype=torch.float32).eval()
    messages = perplexity.messages_for(turn, memory, date(2024, 5, 1), date(2024, 4, 1))
    assert "사용자는 테니스를 치다가 손목을 다쳤다." in messages[0]["content"]
    prompt = tok(
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )["input_ids"]
    cont = tok("오늘 기분이 어때요?", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = lm(input_ids=torch.tensor([prompt + cont])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    expected = float(logprobs[torch.arange(len(cont)), torch.tensor(cont)].sum())
    assert total.n_tokens == len(cont) and total.turns == 1
    assert total.logprob == pytest.approx(expected, abs=1e-3)
    assert total.perplexity == pytest.approx(math.exp(-expected / len(cont)), rel=1e-3)


def test_probe_turns_are_the_marked_assistant_turns():
    dialogue = [
        {"role": "assistant", "text": "안녕"},
        {"role": "user", "text": "응"},
        {"role": "assistant", "text": "초코는 나았어?", "probe": True},
    ]
    turns = perplexity.probe_turns(dialogue)
    assert [t.reference for t in turns] == ["초코는 나았어?"]
    assert turns[0].history == (("assistant", "안녕"), ("user", "응"))


# -- voting ----------------------------------------------------------------------------------------
def test_wilson_interval_by_hand():
    low, high = voting.wilson(8, 10)  # p = .8, z^2/n = .38416: centre .716738, half .226581
    assert (low, high) == (pytest.approx(0.490161, abs=1e-5), pytest.approx(0.943315, abs=1e-5))
    assert voting.wilson(0, 0) == (0.0, 1.0)


def _prefers(word: str) -> ScriptedChatModel:
    def answer(messages):
        prompt = messages[-1]["content"]
        first = prompt.split("응답 1: ")[1].split("\n")[0]
        second = prompt.split("응답 2: ")[1].split("\n")[0]
        return "1" if word in first else "2" if word in second else "비슷함"

    return ScriptedChatModel(responder=answer)


def test_voting_asks_both_orders_and_a_position_biased_judge_only_ties():
    a, b = "초코가 다 나아서 다행이에요.", "오늘 날씨가 좋네요."
    consistent = voting.VoteJudge(_prefers("초코"))
    assert voting.compare(consistent, "사용자: 안녕", a, b, "참고") == "a"
    assert voting.compare(consistent, "사용자: 안녕", b, a) == "b"
    prompts = [c[-1]["content"] for c in consistent.model.calls[:2]]
    assert f"응답 1: {a}" in prompts[0] and f"응답 1: {b}" in prompts[1]  # both orders asked
    biased = voting.VoteJudge(ScriptedChatModel(responder=lambda m: "1"))
    tally = voting.PairTally("keem", "accumulate")
    for _ in range(3):
        tally.add(voting.compare(biased, "c", a, b))
    tally.add(voting.compare(consistent, "c", a, b))
    assert tally.as_json()["wins_a"] == 1 and tally.as_json()["ties"] == 3
    assert tally.as_json()["win_rate_a"] == 1.0 and tally.as_json()["ci95_a"][0] == pytest.approx(0.206549, abs=1e-5)
    assert voting.parse_vote("응답 2") == "2" and voting.parse_vote("비슷함") == "tie"
    mute = voting.VoteJudge(ScriptedChatModel(responder=lambda m: "글쎄요"))
    assert voting.parse_vote("글쎄요") == "invalid" and voting.compare(mute, "c", a, b) == "invalid"


# -- human evaluation --------------------------------------------------------------------------------
def test_agreement_on_a_hand_example():
    units = [[0, 0], [1, 2], [2, 2]]
    # coincidences o00=2, o12=o21=1, o22=2; n=(2,1,3); ordinal d2: 01 2.25, 12 4, 02 12.25
    # alpha = 1 - 5 * 8 / 180 = 7/9; Fleiss: P = 2/3, Pe = 7/18, kappa = 5/11
    assert human.krippendorff_alpha_ordinal(units) == pytest.approx(7 / 9)
    assert human.fleiss_kappa(units) == pytest.approx(5 / 11)
    assert human.krippendorff_alpha_ordinal([[2, 2], [1, 1, 1], [0]]) == pytest.approx(1.0)


def _fill(sheet: Path, score_of) -> None:
    with sheet.open(newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["score"], row["update_needed"] = score_of(row)
    with sheet.open("w", newline="", encoding="utf-8-sig") as f:
        w = csv.DictWriter(f, human.SHEET_FIELDS)
        w.writeheader()
        w.writerows(rows)


def test_human_sheets_are_blind_and_round_trip_into_tables(tmp_path):
    samples = [
        {
            "strategy": s,
            "episode": "e1",
            "session": t,
            "dialogue": [{"role": "user", "text": "속상해요"}],
            "previous": ["사용자는 서울에 산다."],
            "memory": [f"사용자는 {s} 기억 {t}"],
        }
        for s in ("keem", "accumulate")
        for t in (1, 2)
    ]
    paths = human.export_sheets(samples, tmp_path, raters=2, seed=1)
    sheet_text = paths["rater1"].read_text(encoding="utf-8-sig")
    assert "strategy" not in sheet_text.splitlines()[0]
    key = {r["item_id"]: r for r in csv.DictReader(paths["key"].open(encoding="utf-8-sig"))}
    assert len(key) == 6  # 4 reflection + 2 update items

    def score(row):  # keem memories score 2, accumulate 1; rater 2 gives accumulate 0 on reflection
        strategy = key[row["item_id"]]["strategy"]
        value = 2 if strategy == "keem" else 1
        return str(value), "1" if row["task"] == "update" else ""

    _fill(paths["rater1"], score)
    _fill(
        paths["rater2"],
        lambda r: (
            ("0", "") if key[r["item_id"]]["strategy"] == "accumulate" and r["task"] == "reflection" else score(r)
        ),
    )
    k, ratings = human.import_sheets(paths["key"], [paths["rater1"], paths["rater2"]])
    t = human.tables(k, ratings)
    assert t["reflection"]["keem"]["mean"] == 2.0 and t["reflection"]["keem"]["full_rate"] == 1.0
    assert t["reflection"]["accumulate"]["mean"] == pytest.approx(0.5)
    assert t["update"]["accumulate"]["1-2"]["mean"] == 1.0 and t["update"]["keem"]["1-2"]["update_need_rate"] == 1.0
    assert t["agreement"]["reflection"]["items"] == 4
    _fill(paths["rater2"], lambda r: ("3", ""))
    with pytest.raises(Exception, match="not one of 0, 1, 2"):
        human.import_sheets(paths["key"], [paths["rater2"]])


# -- keem eval end to end ------------------------------------------------------------------------------
def update_responder(messages) -> str:
    """A fake update model that follows the KEEM prompts: summarize user turns, reflect as is, replace by topic."""
    prompt = messages[-1]["content"]
    if "요약으로 정리하세요" in prompt:
        turns = section(prompt, "\n대화 (", "\n요약:")[1:]
        return "\n".join(f'사용자는 "{t[4:].strip()}"라고 말했다.' for t in turns if t.startswith("사용자:"))
    if "감정과 그 감정의 원인" in prompt:
        return "\n".join(section(prompt, "\n요약:\n", "\n답:"))
    if "새 기억으로 통합" in prompt:
        previous = section(prompt, "\n이전 기억:\n", "\n이번 요약:")
        summary = section(prompt, "\n이번 요약:\n", "\n새 기억:")
        topics = {w for s in summary for w in keywords.nouns(s)}
        return "\n".join([p for p in previous if not topics & set(keywords.nouns(p))] + summary)
    if "새 문장을 기억에 어떻게 반영할지" in prompt:  # the operations baseline
        memory = section(prompt, "\n기억:\n", "\n새 문장: ")
        sentence = prompt.rsplit("새 문장: ", 1)[1].split("\n")[0]
        for number, line in enumerate(memory, 1):
            if set(keywords.nouns(line.split(". ", 1)[1])) & set(keywords.nouns(sentence)):
                return f"REPLACE {number}"
        return "APPEND"
    if "새 기억이 올바른지" in prompt:
        return "통과"
    if "드러낸 감정과 그 원인을 기록" in prompt:  # the emotion records step every strategy runs: none recorded
        return "없음"
    if "새 기억에서 빠졌습니다" in prompt:  # the guard's judge: every numbered pair it is asked about is replaced
        return "\n".join(f"{n}: 예" for n in range(1, 9))
    if "바꾸거나 끝냈을 수 있는 기억 문장의 번호" in prompt:  # a large memory's scope call: it names nothing
        return "번호: 없음"
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def judge_responder(messages) -> str:
    prompt = messages[-1]["content"]
    if "두 문장의 관계" in prompt:
        one, two = prompt.rsplit("문장 1: ", 1)[1].split("\n")[0], prompt.rsplit("문장 2: ", 1)[1].split("\n")[0]
        shared = {"무릎", "산책", "이사", "대전", "세종", "시험"} & set(keywords.nouns(one)) & set(keywords.nouns(two))
        return "모순" if shared else "중립"
    first = prompt.split("응답 1: ")[1].split("\n")[0]
    second = prompt.split("응답 2: ")[1].split("\n")[0]
    return "1" if len(first) > len(second) else "2" if len(second) > len(first) else "비슷함"


def chat_responder(messages) -> str:
    memory = [line[2:] for line in messages[0]["content"].splitlines() if line.startswith("- ")]
    return "기억나요. " + " ".join(memory[-2:])


def fake_models(spec: str):
    return {
        "fake": lambda: ScriptedChatModel(responder=update_responder, spec="fake"),
        "fake-judge": lambda: ScriptedChatModel(responder=judge_responder, spec="fake-judge"),
        "fake-chat": lambda: ScriptedChatModel(responder=chat_responder, spec="fake-chat"),
    }[spec]()


def _keem(argv: list[str]) -> argparse.Namespace:
    """`keem eval ...` parsed as `keem` hands it to run_eval: the shared options resolved as the app's settings."""
    args = build_parser().parse_args(argv)
    return apply_settings(args, settings_from(args))


def test_keem_eval_memory_on_the_carecall_fixture_writes_the_report(tmp_path, capsys):
    out = tmp_path / "run"
    args = _keem(
        [
            "eval",
            "memory",
            "--data",
            str(FIXTURE),
            "--strategies",
            "keem,accumulate,operations,data",
            "--update-model",
            "fake",
            "--judge",
            "fake-judge",
            "--ppl-model",
            "fake-chat",
            "--seed",
            "7",
            "--out",
            str(out),
            "--json",
            "--no-progress",
        ]
    )
    assert run_eval(args, load_model=fake_models) == 0
    result = json.loads(capsys.readouterr().out)
    report = (out / "report.md").read_text(encoding="utf-8")
    for heading in (
        "## Keyword recall",
        "## Conflict ratio (NLI)",
        "## Perplexity on the probe (fifth) session",
        "## Pairwise voting",
        "## Reproducibility",
    ):
        assert heading in report
    for png in ("keyword_recall.png", "conflict.png", "perplexity.png", "voting.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in report
    assert set(result["keyword_recall"]) == {"keem", "accumulate", "operations", "data"}
    assert result["updates"]["operations"] == {"ok": 8} and "| operations |" in report
    assert result["meta"]["samples"] == 6 and result["meta"]["seed"] == 7
    assert len(result["meta"]["data_sha256"]) == 64 and result["meta"]["prompt_hashes"]["update:keem"]
    assert result["conflict"]["updated_samples"] == 6 and "were sampled" not in report
    cr = result["conflict"]["strategies"]
    # accumulation keeps every old fact beside the new one; the fake KEEM update replaces by topic
    assert cr["accumulate"]["all"]["ratio"] > cr["keem"]["all"]["ratio"]
    ppl = result["perplexity"]["strategies"]
    assert all(v["turns"] == 5 and v["perplexity"] == pytest.approx(math.e) for v in ppl.values())  # fake: -1/char
    assert len(result["voting"]["pairs"]) == 6 and len(result["voting"]["examples"]) == 5
    assert sum(p["wins_a"] + p["wins_b"] + p["ties"] for p in result["voting"]["pairs"]) == 30

    from tests.conftest import build_nli_classifier

    classifier = build_nli_classifier(tmp_path / "nli", {0: "entailment", 1: "neutral", 2: "contradiction"}, 2)
    sampled = tmp_path / "sampled"
    assert (
        run_eval(
            _keem(
                [
                    "eval",
                    "memory",
                    "--data",
                    str(FIXTURE),
                    "--strategies",
                    "accumulate",
                    "--update-model",
                    "fake",
                    "--judge",
                    "fake-judge",
                    "--nli",
                    f"hf:{classifier}",
                    "--no-voting",
                    "--max-pairs",
                    "1",
                    "--out",
                    str(sampled),
                    "--json",
                    "--no-progress",
                ]
            ),
            load_model=fake_models,
        )
        == 0
    )
    small = json.loads(capsys.readouterr().out)["conflict"]["strategies"]["accumulate"]["all"]
    assert small["pairs"] == 6 and small["pairs_total"] > 6  # one pair per sample, six samples
    assert small["ratio"] == 1.0  # the classifier, not the scripted judge
    sampled_report = (sampled / "report.md").read_text(encoding="utf-8")
    assert "were sampled" in sampled_report and f"judged by `hf:{classifier}`" in sampled_report

    export = tmp_path / "human"
    assert (
        run_eval(
            _keem(
                [
                    "eval",
                    "human-export",
                    "--memories",
                    str(out / "memories.json"),
                    "--sample",
                    "3",
                    "--raters",
                    "2",
                    "--out",
                    str(export),
                ]
            ),
            load_model=fake_models,
        )
        == 0
    )
    for sheet in ("sheet_rater1.csv", "sheet_rater2.csv"):
        _fill(export / sheet, lambda r: ("2", "1" if r["task"] == "update" else ""))
    assert (
        run_eval(
            _keem(
                [
                    "eval",
                    "human-import",
                    "--key",
                    str(export / "key.csv"),
                    str(export / "sheet_rater1.csv"),
                    str(export / "sheet_rater2.csv"),
                    "--out",
                    str(export),
                ]
            ),
            load_model=fake_models,
        )
        == 0
    )
    assert "## Inter-rater agreement" in (export / "human.md").read_text(encoding="utf-8")
    assert (export / "human.png").exists()


def test_keem_eval_memory_compares_with_the_carecall_memory_the_dataset_gives(tmp_path, capsys):
    """On a file in the real CareCall sample's shape, `data` is the memory given before the next session."""
    out = tmp_path / "run"
    args = _keem(
        [
            "eval",
            "memory",
            "--data",
            str(SAMPLE),
            "--strategies",
            "keem,accumulate,operations,data",
            "--update-model",
            "fake",
            "--judge",
            "fake-judge",
            "--out",
            str(out),
            "--json",
            "--no-progress",
        ]
    )
    assert run_eval(args, load_model=fake_models) == 0
    result = json.loads(capsys.readouterr().out)
    report = (out / "report.md").read_text(encoding="utf-8")
    ids = ["interactive-1", "interactive-2", "interactive-3"]
    assert result["meta"]["episode_ids"] == ids and f"Episode ids: {', '.join(ids)}." in report
    for strategy in ("keem", "accumulate", "operations", "data"):
        rows_of = [line for line in report.splitlines() if line.startswith(f"| {strategy} |")]
        assert len(rows_of) == 3  # updates, keyword recall, conflict tables
    # 4 + 2 + 3 sessions; the dataset gives no memory after each episode's last one
    assert result["updates"]["data"] == {"data": 6, "no memory after last session": 3}
    assert result["updates"]["keem"] == {"ok": 9} and "| no memory after last session |" in report
    assert result["meta"]["samples"] == 3 and result["meta"]["samples_left_out"]["samples"] == 3
    assert "3 more samples are left out for every strategy" in report
    assert all(len(result["keyword_recall"][s]["samples"]) == 3 for s in result["keyword_recall"])
    assert {(r["episode"], r["session"]) for r in result["conflict"]["samples"]} == {
        ("interactive-1", 2),
        ("interactive-1", 3),
        ("interactive-3", 2),
    }
    rows = json.loads((out / "memories.json").read_text(encoding="utf-8"))
    data = {(r["episode"], r["session"]): r for r in rows if r["strategy"] == "data"}
    assert data[("interactive-1", 1)]["previous"] == [] and data[("interactive-1", 1)]["memory"] == [
        "허리가 아파 한의원에 다니심",
        "입맛이 없어 죽을 드심",
    ]  # = session 2's `memory`
    assert data[("interactive-1", 3)]["memory"] == [
        "복지관 노래 교실에 다니심",
        "허리가 거의 나으심",
        "아들이 반찬을 보내줌",
    ]
    assert ("interactive-1", 4) not in data and ("interactive-2", 2) not in data
    assert result["perplexity_skipped"] == result["voting_skipped"] == "the data has no probe sessions"


def test_strategy_data_is_refused_on_a_corpus_that_gives_no_memory(tmp_path):
    kmsc = FIXTURE.parent / "kmsc"
    args = _keem(
        [
            "eval",
            "memory",
            "--data",
            str(kmsc),
            "--strategies",
            "keem,data",
            "--update-model",
            "fake",
            "--judge",
            "fake-judge",
            "--out",
            str(tmp_path),
        ]
    )
    with pytest.raises(Exception, match=r"kmsc data gives none.*drop 'data' from --strategies"):
        run_eval(args, load_model=lambda spec: pytest.fail("no model should load"))


def test_eval_help_lists_every_registered_subcommand_with_examples(capsys):
    with pytest.raises(SystemExit):
        _keem(["eval", "--help"])
    text = capsys.readouterr().out
    assert all(name in text for name in EVAL_COMMANDS) and "keem eval memory --data" in text


def test_unknown_strategy_is_refused_before_any_model_call(tmp_path):
    args = _keem(
        [
            "eval",
            "memory",
            "--data",
            str(FIXTURE),
            "--strategies",
            "keem,nonsense",
            "--update-model",
            "fake",
            "--judge",
            "fake-judge",
            "--out",
            str(tmp_path),
        ]
    )
    with pytest.raises(Exception, match="unknown strategy nonsense"):
        run_eval(args, load_model=lambda spec: pytest.fail("no model should load"))
