"""`keem trial report`: the analysis of a `keem trial export` folder, as report.md with PNGs and report.json.

Per strategy: participants, completion and drop-out, sessions and turns, memory size after each session, and
for each rating (Likert) item the mean with its 95% interval per session number and overall. Strategies are
compared with Kruskal-Wallis and pairwise Mann-Whitney U tests (Holm-corrected) on each participant's mean
rating: strategy is a between-participant factor, so a participant counts once. An export without
questionnaire answers still gets sessions, turns and memory sizes, and says there are no ratings.
"""

from __future__ import annotations

import csv
import functools
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chatbot.trials.stats import compare, mean_ci
from evaluation.files import read_json, read_jsonl
from evaluation.report import bar_chart, base_meta, fmt, md_table, provenance, render_report
from memory.updaters import STRATEGIES
from memory.words import plural
from models.errors import InputError

TEMPLATES = Path(__file__).parent / "templates"

AGAIN = "export the trial again (keem trial export)"


def load_export(folder: Path) -> dict[str, Any]:
    """The files of one export: sessions, memory versions, questionnaire answers (empty without the file)."""
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder; give --export the folder `keem trial export --out` wrote")
    for name in ("sessions.jsonl", "memory_versions.jsonl"):
        if not (folder / name).is_file():
            raise InputError(f"{folder} has no {name}; give --export the folder `keem trial export --out` wrote")
    answers: list[dict[str, Any]] = []
    if (folder / "questionnaire.csv").is_file():
        with open(folder / "questionnaire.csv", encoding="utf-8", newline="") as f:
            answers = list(csv.DictReader(f))
    manifest = folder / "manifest.json"
    return {
        "sessions": read_jsonl(folder / "sessions.jsonl", if_invalid=AGAIN),
        "versions": read_jsonl(folder / "memory_versions.jsonl", if_invalid=AGAIN),
        "answers": answers,
        "manifest": read_json(manifest, if_invalid=AGAIN) if manifest.is_file() else {},
    }


def analyse(
    data: dict[str, Any],
    planned_sessions: int | None = None,
    strategies: Sequence[str] | None = None,
    scales: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Everything report.md shows, as plain data (also written as report.json). `scales` (item: lowest,
    highest; from the study plan) cuts the rating intervals to the scale."""
    if not data["sessions"]:
        raise InputError("the export has no sessions; run the trial first, then export it again")
    seen = {s["strategy"] for s in data["sessions"] if s.get("strategy")}
    strategies = list(strategies or [s for s in STRATEGIES if s in seen] + sorted(seen - set(STRATEGIES)))
    strategy_of = _participant_strategies(data["sessions"])
    per_participant: dict[str, int] = defaultdict(int)
    for s in (s for s in data["sessions"] if s.get("number")):  # the sessions the participant spoke in
        per_participant[s["participant"]] = max(per_participant[s["participant"]], s["number"])
    planned = planned_sessions or max(per_participant.values(), default=1)
    numbers = list(range(1, max([planned, *per_participant.values()]) + 1))
    return {
        "strategies": strategies,
        "planned_sessions": planned,
        "session_numbers": numbers,
        "participation": _participation(data, strategies, strategy_of, per_participant, planned, numbers),
        "memory": _memory_sizes(data, strategies, numbers),
        "ratings": _ratings(data["answers"], strategies, strategy_of, numbers, scales or {}),
        "free_text": _free_text(data["answers"], strategies, strategy_of),
    }


def _participant_strategies(sessions: list[dict[str, Any]]) -> dict[str, str]:
    """Each participant's strategy: the one of their last session (a trial keeps one per participant)."""
    return {s["participant"]: s["strategy"] for s in sessions if s.get("strategy")}


Data = dict[str, Any]


def _participation(
    data: Data,
    strategies: list[str],
    strategy_of: dict[str, str],
    per_participant: dict[str, int],
    planned: int,
    numbers: list[int],
) -> dict[str, Any]:
    out = {}
    answered = {(a["participant"], a["session"]) for a in data["answers"]}
    for strategy in strategies:
        people = [p for p, s in strategy_of.items() if s == strategy]
        sessions = [s for s in data["sessions"] if s["participant"] in people and s.get("number")]
        turns = sum(sum(t["role"] == "user" for t in s["turns"]) for s in sessions)
        out[strategy] = {
            "participants": len(people),
            "completed": sum(per_participant.get(p, 0) >= planned for p in people),
            "dropped_out": sum(per_participant.get(p, 0) < planned for p in people),
            "sessions": len(sessions),
            "user_turns": turns,
            "turns_per_session": turns / len(sessions) if sessions else None,
            "questionnaires": sum((s["participant"], str(s["session"])) in answered for s in sessions),
            "reached": {n: sum(per_participant.get(p, 0) >= n for p in people) for n in numbers},
            "turns_by_session": {
                n: mean_ci([sum(t["role"] == "user" for t in s["turns"]) for s in sessions if s["number"] == n])
                for n in numbers
            },
        }
    return out


def _memory_sizes(data: Data, strategies: list[str], numbers: list[int]) -> dict[str, dict[int, dict[str, Any]]]:
    """Sentences in the memory written after each session (its last version), per strategy and session number."""
    number_of = {(s["participant"], s["session"]): s.get("number") for s in data["sessions"]}
    strategy_of = {(s["participant"], s["session"]): s["strategy"] for s in data["sessions"]}
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for v in data["versions"]:
        key = (v["participant"], v.get("session_id"))
        if v.get("session_id") is not None and key in number_of:
            last[key] = v
    sizes: dict[str, dict[int, list[int]]] = {s: defaultdict(list) for s in strategies}
    for key, v in last.items():
        if number_of[key] and strategy_of[key] in sizes:
            sizes[strategy_of[key]][number_of[key]].append(len(v["sentences"]))
    return {s: {n: mean_ci(sizes[s].get(n, [])) for n in numbers} for s in strategies}


def _ratings(
    answers: list[dict[str, Any]],
    strategies: list[str],
    strategy_of: dict[str, str],
    numbers: list[int],
    scales: dict[str, tuple[int, int]],
) -> dict[str, Any]:
    likert = [a for a in answers if a.get("kind") == "likert" and str(a.get("value", "")).strip()]
    items = list(dict.fromkeys(a["item"] for a in likert))
    questions = {a["item"]: a.get("question") or a["item"] for a in likert}
    by_session: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    by_participant: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for a in likert:
        strategy = a.get("strategy") or strategy_of.get(a["participant"])
        if not strategy:
            continue  # no session of theirs names a strategy: the answer counts for none
        value = float(a["value"])
        by_participant[(strategy, a["item"], a["participant"])].append(value)
        if a.get("session_number"):
            by_session[(strategy, a["item"], int(a["session_number"]))].append(value)
    means: dict[tuple[str, str], list[float]] = defaultdict(list)  # one mean per participant
    for (strategy, item, _), values in by_participant.items():
        means[(strategy, item)].append(sum(values) / len(values))
    return {
        "items": items,
        "questions": questions,
        "answers": len(likert),
        "scales": scales,
        "overall": {s: {i: mean_ci(means.get((s, i), []), bounds=scales.get(i)) for i in items} for s in strategies},
        "by_session": {
            s: {i: {n: mean_ci(by_session.get((s, i, n), []), bounds=scales.get(i)) for n in numbers} for i in items}
            for s in strategies
        },
        "tests": {i: compare({s: means.get((s, i), []) for s in strategies}) for i in items},
    }


def _free_text(answers: list[dict[str, Any]], strategies: list[str], strategy_of: dict[str, str]) -> dict[str, int]:
    texts = [a for a in answers if a.get("kind") == "text" and str(a.get("value", "")).strip()]
    return {s: sum((a.get("strategy") or strategy_of.get(a["participant"])) == s for a in texts) for s in strategies}


# -- writing -------------------------------------------------------------------------------------------
def _cell(summary: dict[str, Any], digits: int = 2) -> str:
    if not summary["n"]:
        return "–"
    ci = summary["ci95"]
    interval = f" [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]" if ci else ""
    return f"{fmt(summary['mean'], digits)}{interval} (n={summary['n']})"


def _p(value: float) -> str:
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def write_report(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """report.md (chatbot/trials/templates/trial_report.md.j2), report.json and the PNGs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    strategies, numbers = result["strategies"], result["session_numbers"]
    part, memory, ratings = result["participation"], result["memory"], result["ratings"]
    sessions = [f"session {n}" for n in numbers]
    files: dict[str, Path] = {}
    files["turns"] = bar_chart(
        out_dir / "turns.png",
        "User turns per session",
        sessions,
        {s: [part[s]["turns_by_session"][n]["mean"] for n in numbers] for s in strategies},
        "user turns",
        errors=_errors(strategies, numbers, lambda s, n: part[s]["turns_by_session"][n]),
    )
    files["memory_size"] = bar_chart(
        out_dir / "memory_size.png",
        "Memory size after each session",
        sessions,
        {s: [memory[s][n]["mean"] for n in numbers] for s in strategies},
        "sentences",
        errors=_errors(strategies, numbers, lambda s, n: memory[s][n]),
    )
    keys = ("participants", "completed", "dropped_out", "sessions", "questionnaires", "user_turns")
    texts = result["free_text"]
    report = render_report(
        "trial_report",
        TEMPLATES,
        strategies=strategies,
        sessions=sessions,
        participants=sum(part[s]["participants"] for s in strategies),
        planned=result["planned_sessions"],
        completed=f"completed ({plural(result['planned_sessions'], 'session')})",
        meta=result["meta"],
        participation=[[s, *(part[s][k] for k in keys), fmt(part[s]["turns_per_session"], 1)] for s in strategies],
        reached=[[s, *(part[s]["reached"][n] for n in numbers)] for s in strategies],
        turns=[[s, *(_cell(part[s]["turns_by_session"][n], 1) for n in numbers)] for s in strategies],
        memory=[[s, *(_cell(memory[s][n], 1) for n in numbers)] for s in strategies],
        ratings="\n".join(_ratings_md(ratings, strategies, numbers, sessions, out_dir, files))
        if ratings["items"]
        else None,
        free_text=sum(texts.values()),
        free_text_by=", ".join(f"{s}: {texts[s]}" for s in strategies),
        provenance=provenance(result["meta"]),
    )
    files["report"] = out_dir / "report.md"
    files["report"].write_text(report, encoding="utf-8")
    files["json"] = out_dir / "report.json"
    files["json"].write_text(json.dumps(result, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    return files


def _session_summary(by_session: dict[str, Any], item: str, strategy: str, number: int) -> dict[str, Any]:
    return by_session[strategy][item][number]


def _errors(
    strategies: list[str], numbers: list[int], summary: Callable[[str, int], dict[str, Any]]
) -> dict[str, list[tuple[float, float] | None]]:
    """Each bar's 95% interval, for evaluation.report._bars."""
    return {s: [tuple(summary(s, n)["ci95"]) if summary(s, n)["ci95"] else None for n in numbers] for s in strategies}


def _ratings_md(
    ratings: dict[str, Any],
    strategies: list[str],
    numbers: list[int],
    sessions: list[str],
    out_dir: Path,
    files: dict[str, Path],
) -> list[str]:
    items, overall = ratings["items"], ratings["overall"]
    md = [
        f"{plural(ratings['answers'], 'rating')}. Items:",
        "",
        md_table(["Item", "Question"], [[i, ratings["questions"][i]] for i in items]),
        "",
        "### Overall",
        "",
        "Each participant's mean rating over their sessions, then the mean over participants [95% t interval"
        + (
            ", cut to the scale]:"
            if ratings["scales"]
            else "; with few participants it may reach past the scale: give --study to cut it there]:"
        ),
        "",
        md_table(["Strategy", *items], [[s, *(_cell(overall[s][i]) for i in items)] for s in strategies]),
        "",
    ]
    files["ratings"] = bar_chart(
        out_dir / "ratings.png",
        "Ratings (participant means)",
        items,
        {s: [overall[s][i]["mean"] for i in items] for s in strategies},
        "mean rating",
        errors={
            s: [tuple(overall[s][i]["ci95"]) if overall[s][i]["ci95"] else None for i in items] for s in strategies
        },
    )
    md += ["![ratings](ratings.png)", "", "### By session", ""]
    for i in items:
        md += [
            f"**{i}** ({ratings['questions'][i]}), mean [95% CI]:",
            "",
            md_table(
                ["Strategy", *sessions],
                [[s, *(_cell(ratings["by_session"][s][i][n]) for n in numbers)] for s in strategies],
            ),
            "",
        ]
        path = out_dir / f"ratings_{i}.png"
        files[f"ratings_{i}"] = bar_chart(
            path,
            f"{i} by session",
            sessions,
            {s: [ratings["by_session"][s][i][n]["mean"] for n in numbers] for s in strategies},
            "mean rating",
            errors=_errors(strategies, numbers, functools.partial(_session_summary, ratings["by_session"], i)),
        )
        md += [f"![{i} by session]({path.name})", ""]
    md += [
        "### Between strategies",
        "",
        "Kruskal-Wallis on the participant means; pairwise two-sided Mann-Whitney U with Holm's correction over "
        "the pairs of each item; r is the rank-biserial correlation (positive: A rated higher).",
        "",
    ]
    tests = ratings["tests"]
    md += [
        md_table(
            ["Item", "H", "df", "p", "n per strategy"],
            [
                [i, "–", "–", "–", f"skipped: {tests[i]['skipped']}"]
                if tests[i]["kruskal"] is None
                else [
                    i,
                    fmt(tests[i]["kruskal"]["H"], 2),
                    tests[i]["kruskal"]["df"],
                    _p(tests[i]["kruskal"]["p"]),
                    ", ".join(f"{s}: {n}" for s, n in tests[i]["kruskal"]["n"].items()),
                ]
                for i in items
            ],
        ),
        "",
    ]
    pairs = [
        [i, f"{p['a']} vs {p['b']}", fmt(p["U"], 1), _p(p["p"]), _p(p["p_holm"]), fmt(p["r"], 2)]
        for i in items
        for p in tests[i]["pairs"]
    ]
    if pairs:
        md += [md_table(["Item", "A vs B", "U", "p", "p (Holm)", "r"], pairs), ""]
    return md


def run_report(export_dir: Path, out_dir: Path, study: Any = None, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Read the export, analyse it (with the study plan's strategies, sessions and scales, when given) and write
    the report; returns the result with `files`."""
    data = load_export(export_dir)
    result = analyse(
        data,
        study.sessions if study else None,
        study.strategies if study else None,
        {q.id: (q.low, q.high) for q in study.questions if q.kind == "likert"} if study else None,
    )
    manifest = data["manifest"]
    result["meta"] = {
        **base_meta(argv),
        "export": str(export_dir),
        "scrubbed": {True: "yes", False: "no (--no-scrub)"}.get(manifest.get("scrubbed"), "unknown"),
        "export_created": manifest.get("created_at"),
    }
    result["files"] = {k: str(v) for k, v in write_report(result, out_dir).items()}
    return result
