"""DIR/report.md of a `keem train-updater` run: loss curves (loss.png, matplotlib), the data and prompt hashes,
the model and its settings, the measured time per 1,000 rows, and the exact commands; from the run's record
(DIR/training.json) alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.words import plural


def plot_losses(record: dict[str, Any], path: Path) -> None:
    from evaluation.report import _plt

    plt = _plt()
    state = record["state"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if state["train"]:
        ax.plot(
            [p["step"] for p in state["train"]],
            [p["loss"] for p in state["train"]],
            label="train (answer tokens)",
            linewidth=1,
        )
    if state["val"]:
        ax.plot([p["step"] for p in state["val"]], [p["loss"] for p in state["val"]], "o-", label="validation")
    if state["best_step"] is not None:
        ax.axvline(state["best_step"], color="grey", linestyle=":", label=f"best (step {state['best_step']})")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy per answer token")
    ax.set_title(f"train-updater: {record['model']['base']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, record: dict[str, Any]) -> Path:
    from evaluation.report import git_commit, md_table, versions

    plot_losses(record, out / "loss.png")
    state, data, model, config = record["state"], record["data"], record["model"], record["config"]
    rows_seen = max(state["rows_seen"], 1)
    per_1k = state["train_seconds"] / rows_seen * 1000
    try:
        from importlib.metadata import version

        peft_version = version("peft")
    except Exception:
        peft_version = "not installed"
    lines = [
        f"# Updater training: {model['base']}",
        "",
        f"Use it: `--update-model {model['base']}+lora:{out}`"
        + (" (or `hf:" + str(out / "merged") + "`)" if (out / "merged").is_dir() else ""),
        f"Evaluate it: `keem eval updater --data {data['path']} --model {model['base']}+lora:{out} --out "
        f"{out / 'eval'}`",
        "",
        "## Command",
        "```",
        *(record["commands"] or ["(not recorded)"]),
        "```",
        ("Runs after the first resumed from the last checkpoint." if len(record["commands"]) > 1 else ""),
        "",
        "## Data",
        md_table(
            ["what", "value"],
            [
                ["dataset", f"`{data['path']}`"],
                ["dataset sha256", f"`{data['sha256']}`"],
                ["rows in the file", data["rows"]],
                ["not passing verification (skipped)", data["skipped_failed"]],
                ["longer than --max-length or the context (skipped)", len(data["skipped_long"])],
                ["rows used", data["used"]],
                ["train rows / episodes", f"{data['train_rows']} / {len(data['split']['train'])}"],
                ["validation rows / episodes", f"{data['val_rows']} / {len(data['split']['validation'])}"],
                ["validation episodes", ", ".join(data["split"]["validation"]) or "none"],
                [
                    "prompt tokens / answer tokens (all rows used)",
                    f"{data['prompt_tokens']:,} / {data['answer_tokens']:,}",
                ],
                ["answers longer than the app's output budget", len(data["over_budget"])],
                ["examples sha256 (token ids of every prompt and answer)", f"`{data['examples_sha256'][:16]}`"],
            ],
        ),
        "",
        "## Prompts",
        md_table(
            ["what", "hash"],
            [
                ["update prompt files now (update_system + update)", f"`{record['prompts']['update']}`"],
                ["all step prompts now (what the builder records)", f"`{record['prompts']['steps']}`"],
                ["prompt hashes in the dataset rows", ", ".join(f"`{h}`" for h in record["prompts"]["dataset"]) or "–"],
                ["chat template (sha256)", f"`{model['chat_template_sha256']}`"],
            ],
        ),
    ]
    if record["prompts"]["dataset"] and record["prompts"]["steps"] not in record["prompts"]["dataset"]:
        lines += [
            "",
            "**The dataset was built with other prompt files than this checkout's**: the rows were "
            "rendered with today's prompts, but the references answer the old ones.",
        ]
    lines += [
        "",
        "## Model and training",
        md_table(
            ["what", "value"],
            [
                ["base", f"`{model['base']}`"],
                [
                    "device / dtype",
                    f"{model['device']} / {model['dtype']}" + (" (4-bit nf4 base)" if model["load_in_4bit"] else ""),
                ],
                ["parameters / trainable (LoRA)", f"{model['parameters']:,} / {model['trainable']:,}"],
                [
                    "LoRA r / alpha / dropout / targets",
                    " / ".join(str(config[k]) for k in ("lora_r", "lora_alpha", "lora_dropout", "target_modules")),
                ],
                [
                    "steps done / planned",
                    f"{state['step']} / {state['total_steps']}" + (" (early stop)" if state["stopped_early"] else ""),
                ],
                ["rows per step (batch x accumulation)", f"{config['batch_size']} x {config['grad_accum']}"],
                ["learning rate, warm-up", f"{config['lr']:g}, {config['warmup']:g} of the steps, then linear decay"],
                ["validation every / patience", f"{plural(record['eval_every'], 'step')} / {config['patience']}"],
                [
                    "best validation loss (step)",
                    "–" if state["best_val"] is None else f"{state['best_val']:.4f} ({state['best_step']})",
                ],
                [
                    "training time (steps only)",
                    f"{state['train_seconds']:.1f} s for {plural(state['rows_seen'], 'row')}",
                ],
                ["time per 1,000 rows (measured here)", f"{per_1k:.0f} s ({per_1k / 3600:.2f} h)"],
                ["tokens per second", f"{state['tokens_seen'] / max(state['train_seconds'], 1e-9):,.0f}"],
                ["model load", f"{model['load_seconds']:.1f} s"],
            ],
        ),
        "",
        "## Loss",
        "![loss curves](loss.png)",
        "",
        md_table(["step", "validation loss"], [[p["step"], f"{p['loss']:.4f}"] for p in state["val"]])
        if state["val"]
        else "No validation episodes (--val-fraction 0, or a single episode).",
        "",
        "## Provenance",
        f"git commit `{git_commit()}`; "
        + ", ".join(f"{k} {v}" for k, v in {**versions(), "peft": peft_version}.items()),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
