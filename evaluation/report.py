"""The evaluation report: one Markdown file with the paper's tables, PNG plots, and the run's provenance.

`write_memory_report(result, out_dir)` and `write_human_report(tables, meta, out_dir)` write report.md /
human.md beside their PNGs and a JSON twin (result.json / human.json) for machines.
"""

from __future__ import annotations

import functools
import json
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from memory.words import plural

TEMPLATE_DIR = Path(__file__).parent / "templates"
PACKAGES = ("keem-chat", "torch", "transformers", "kiwipiepy", "numpy", "matplotlib", "openai")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit(root: Path | None = None) -> str | None:
    try:
        run = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root or Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=root or Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (run.stdout.strip() + ("+dirty" if dirty else "")) if run.returncode == 0 else None


def base_meta(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["keem", *(argv if argv is not None else sys.argv[1:])]),
        "git_commit": git_commit(),
        "versions": versions(),
    }


def fmt(value: Any, digits: int = 3, pct: bool = False) -> str:
    if value is None:
        return "–"
    if pct:
        return f"{100 * value:.1f}%"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_chart(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    ylabel: str,
    errors: Mapping[str, Sequence[tuple[float, float] | None]] | None = None,
) -> Path:
    """Grouped bar chart: one group per entry of `groups`, one bar per series."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(groups) * max(1, len(series)) / 2 + 2), 3.6))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None else 0.0 for v in values]
        yerr = None
        if errors and errors.get(name):
            yerr = [
                [max(0.0, y - (e[0] if e else y)) for y, e in zip(ys, errors[name])],
                [max(0.0, (e[1] if e else y) - y) for y, e in zip(ys, errors[name])],
            ]
        ax.bar(xs, ys, width, label=name, yerr=yerr, capsize=3 if yerr else 0)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def provenance(meta: dict) -> str:
    lines = [
        "## Reproducibility",
        "",
        f"- created: {meta.get('created_at')}",
        f"- command: `{meta.get('command')}`",
        f"- git commit: {meta.get('git_commit')}",
    ]
    for name in ("data", "data_sha256", "key", "sheets", "seed", "episodes", "samples", "strategies"):
        if name in meta:
            lines.append(f"- {name.replace('_', ' ')}: {meta[name]}")
    for title, key in (
        ("arguments", "arguments"),
        ("models", "models"),
        ("prompt hashes", "prompt_hashes"),
        ("versions", "versions"),
    ):
        if meta.get(key):
            lines.append(f"- {title}: " + ", ".join(f"{k} = `{v}`" for k, v in meta[key].items()))
    return "\n".join(lines)


@functools.cache
def _templates(folder: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(folder), undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.globals["table"] = md_table
    return env


def render_report(name: str, folder: Path = TEMPLATE_DIR, **context: Any) -> str:
    """Render `folder`/<name>.md.j2 (Markdown, with `table(header, rows)`); a missing variable is an error, never an
    empty hole. Each package keeps its reports' templates beside it (evaluation/templates, chatbot/trials/templates)."""
    return _templates(folder).get_template(f"{name}.md.j2").render(**context)


def _ci(bounds: Sequence[float] | None) -> str:
    return " – ".join(fmt(bound, pct=True) for bound in bounds) if bounds else "–"


def write_memory_report(result: dict, out_dir: Path) -> dict[str, Path]:
    """report.md, result.json and the PNGs of a `keem eval memory` run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = result["meta"]
    strategies: list[str] = meta["strategies"]
    files: dict[str, Path] = {}
    outcomes = sorted({k for v in result["updates"].values() for k in v})
    kw = result["keyword_recall"]
    sizes = list(next(iter(kw.values()))["mean"]) if kw else []
    files["keyword_recall"] = bar_chart(
        out_dir / "keyword_recall.png",
        "Keyword recall",
        [f"top {k}" for k in sizes],
        {s: [kw[s]["mean"][k] for k in sizes] for s in strategies},
        "recall",
    )
    cf = result["conflict"]["strategies"]
    files["conflict"] = bar_chart(
        out_dir / "conflict.png",
        "Conflict ratio",
        ["all samples", "updated samples"],
        {s: [cf[s]["all"]["ratio"], cf[s]["updated"]["ratio"]] for s in strategies},
        "contradiction ratio",
    )
    judged = sum(cf[s]["all"].get("pairs", 0) for s in strategies)
    total = sum(cf[s]["all"].get("pairs_total", 0) for s in strategies)
    context: dict[str, Any] = {
        "meta": meta,
        "strategies": strategies,
        "left_out": (meta.get("samples_left_out") or {})
        if (meta.get("samples_left_out") or {}).get("samples")
        else None,
        "outcomes": outcomes,
        "updates": [[s, *(result["updates"][s].get(k, 0) for k in outcomes)] for s in strategies],
        "recall_header": [f"top {k}" for k in sizes],
        "recall": [[s, *(fmt(kw[s]["mean"][k]) for k in sizes)] for s in strategies],
        "nli_model": meta["models"].get("nli") or meta["models"].get("judge"),
        "updated_samples": plural(result["conflict"]["updated_samples"], "sample"),
        "conflict": [
            [s, *(cf[s]["all"][k] for k in ("pairs", "contradiction", "entailment", "neutral", "invalid"))]
            + [
                fmt(cf[s]["all"]["ratio"], pct=True),
                cf[s]["updated"]["pairs"],
                fmt(cf[s]["updated"]["ratio"], pct=True),
            ]
            for s in strategies
        ],
        "sampled": {"max_pairs": result["conflict"].get("max_pairs"), "judged": f"{judged:,}", "total": f"{total:,}"}
        if total > judged
        else None,
        "perplexity": _perplexity(result, strategies, out_dir, files),
        "perplexity_skipped": result.get("perplexity_skipped", "no --ppl-model given"),
        "voting": _voting(result, strategies, out_dir, files),
        "voting_skipped": result.get("voting_skipped", "no probe sessions"),
        "provenance": provenance(meta),
    }
    files["report"] = out_dir / "report.md"
    files["report"].write_text(render_report("memory_report", **context), encoding="utf-8")
    files["json"] = out_dir / "result.json"
    files["json"].write_text(json.dumps(result, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    return files


def _perplexity(result: dict, strategies: list[str], out_dir: Path, files: dict[str, Path]) -> dict | None:
    """The perplexity tables' rows (and its chart in `files`); None when the run skipped perplexity."""
    ppl = result.get("perplexity")
    if not (ppl and ppl.get("strategies")):
        return None
    by = ppl["strategies"]
    files["perplexity"] = bar_chart(
        out_dir / "perplexity.png",
        f"Perplexity ({ppl['model']})",
        ["probe session"],
        {s: [by[s]["perplexity"]] for s in strategies},
        "perplexity",
    )
    return {
        "summary": [f"`{ppl['model']}`", *(fmt(by[s]["perplexity"], 2) for s in strategies)],
        "rows": [[s, by[s]["turns"], by[s]["n_tokens"], fmt(by[s]["logprob"], 2)] for s in strategies],
    }


def _voting(result: dict, strategies: list[str], out_dir: Path, files: dict[str, Path]) -> dict | None:
    """The voting tables' rows (and its chart in `files`); None when the run had no votes."""
    vt = result.get("voting")
    if not (vt and vt.get("pairs")):
        return None
    share = vt["share"]
    files["voting"] = bar_chart(
        out_dir / "voting.png",
        "Vote win rate (decisive votes)",
        ["all pairings"],
        {s: [share[s]["rate"]] for s in strategies},
        "win rate",
        errors={s: [tuple(share[s]["ci95"]) if share[s]["ci95"] else None] for s in strategies},
    )
    return {
        "chat_model": vt["chat_model"],
        "judge": vt["judge"],
        "shares": [
            [s, share[s]["wins"], share[s]["decisive"], fmt(share[s]["rate"], pct=True), _ci(share[s]["ci95"])]
            for s in strategies
        ],
        "pairs": [
            [f"{p['a']} vs {p['b']}", p["wins_a"], p["wins_b"], p["ties"], p["invalid"]]
            + [fmt(p["win_rate_a"], pct=True), _ci(p["ci95_a"])]
            for p in vt["pairs"]
        ],
    }


def write_human_report(tables: dict, meta: dict, out_dir: Path) -> dict[str, Path]:
    """human.md, human.json and human.png from evaluation.metrics.human.tables()."""
    out_dir.mkdir(parents=True, exist_ok=True)
    strategies = sorted(set(tables["reflection"]) | set(tables["update"]))
    refl = tables["reflection"]
    md = [
        "# KEEM human evaluation",
        "",
        f"Raters: {', '.join(tables['raters'])}.",
        "",
        "## Emotion and cause reflection (0-2)",
        "",
        md_table(
            ["Strategy", "items", "ratings", "reflected (score 2)", "score"],
            [
                [
                    s,
                    refl[s]["items"],
                    refl[s]["ratings"],
                    fmt(refl[s]["full_rate"], pct=True),
                    fmt(refl[s]["mean"], 2),
                ]
                for s in strategies
                if s in refl
            ],
        ),
        "",
        "## Update need and accuracy (0-2)",
        "",
    ]
    rows = []
    for s in strategies:
        for step, v in sorted(tables["update"].get(s, {}).items(), key=lambda kv: (kv[0] == "all", kv[0])):
            rows.append(
                [
                    s,
                    f"Session {step}" if step != "all" else "all",
                    v["items"],
                    fmt(v["update_need_rate"], pct=True),
                    fmt(v["mean"], 2),
                ]
            )
    md += [
        md_table(["Strategy", "Sessions", "items", "update needed", "accuracy score"], rows),
        "",
        "## Inter-rater agreement",
        "",
        md_table(
            ["Task", "items rated by 2+", "Krippendorff's alpha (ordinal)", "Fleiss' kappa"],
            [
                [t, a["items"], fmt(a["krippendorff_alpha_ordinal"]), fmt(a["fleiss_kappa"])]
                for t, a in tables["agreement"].items()
            ],
        ),
        "",
    ]
    files = {
        "png": bar_chart(
            out_dir / "human.png",
            "Human scores (0-2)",
            ["reflection", "update"],
            {
                s: [refl.get(s, {}).get("mean"), tables["update"].get(s, {}).get("all", {}).get("mean")]
                for s in strategies
            },
            "mean score",
        )
    }
    md += ["![human scores](human.png)", "", provenance(meta), ""]
    files["report"] = out_dir / "human.md"
    files["report"].write_text("\n".join(md), encoding="utf-8")
    files["json"] = out_dir / "human.json"
    files["json"].write_text(json.dumps({"meta": meta, **tables}, ensure_ascii=False, indent=2), encoding="utf-8")
    return files
