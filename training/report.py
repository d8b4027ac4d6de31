"""DIR/report.md of a `keem train-updater` run: loss curves (loss.png, matplotlib), the data and prompt hashes,
the model and its settings, the measured time per 1,000 rows, and the exact commands; from the run's record
(DIR/training.json) alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.words import plural

TEMPLATES = Path(__file__).parent / "templates"


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
    """DIR/report.md (training/templates/training_report.md.j2) and its loss.png."""
    from evaluation.report import git_commit, render_report, versions

    plot_losses(record, out / "loss.png")
    try:
        from importlib.metadata import version

        peft_version = version("peft")
    except Exception:
        peft_version = "not installed"
    state, data, model, prompts = record["state"], record["data"], record["model"], record["prompts"]
    report = render_report(
        "training_report",
        TEMPLATES,
        model=model,
        data=data,
        out=out,
        merged=out / "merged" if (out / "merged").is_dir() else None,
        eval_out=out / "eval",
        commands=record["commands"],
        data_rows=_data_rows(data),
        prompt_rows=[
            ["update prompt files now (update_system + update)", f"`{prompts['update']}`"],
            ["all step prompts now (what the builder records)", f"`{prompts['steps']}`"],
            ["prompt hashes in the dataset rows", ", ".join(f"`{h}`" for h in prompts["dataset"]) or "–"],
            ["chat template (sha256)", f"`{model['chat_template_sha256']}`"],
        ],
        stale_prompts=bool(prompts["dataset"]) and prompts["steps"] not in prompts["dataset"],
        model_rows=_model_rows(record),
        val_rows=[[p["step"], f"{p['loss']:.4f}"] for p in state["val"]],
        commit=git_commit(),
        versions=", ".join(f"{k} {v}" for k, v in {**versions(), "peft": peft_version}.items()),
    )
    path = out / "report.md"
    path.write_text(report, encoding="utf-8")
    return path


def _data_rows(data: dict[str, Any]) -> list[list[Any]]:
    return [
        ["dataset", f"`{data['path']}`"],
        ["dataset sha256", f"`{data['sha256']}`"],
        ["rows in the file", data["rows"]],
        ["not passing verification (skipped)", data["skipped_failed"]],
        ["longer than --max-length or the context (skipped)", len(data["skipped_long"])],
        ["rows used", data["used"]],
        ["train rows / episodes", f"{data['train_rows']} / {len(data['split']['train'])}"],
        ["validation rows / episodes", f"{data['val_rows']} / {len(data['split']['validation'])}"],
        ["validation episodes", ", ".join(data["split"]["validation"]) or "none"],
        ["prompt tokens / answer tokens (all rows used)", f"{data['prompt_tokens']:,} / {data['answer_tokens']:,}"],
        ["answers longer than the app's output budget", len(data["over_budget"])],
        ["examples sha256 (token ids of every prompt and answer)", f"`{data['examples_sha256'][:16]}`"],
    ]


def _model_rows(record: dict[str, Any]) -> list[list[Any]]:
    state, model, config = record["state"], record["model"], record["config"]
    per_1k = state["train_seconds"] / max(state["rows_seen"], 1) * 1000
    lora = " / ".join(str(config[k]) for k in ("lora_r", "lora_alpha", "lora_dropout", "target_modules"))
    steps = f"{state['step']} / {state['total_steps']}" + (" (early stop)" if state["stopped_early"] else "")
    best = "–" if state["best_val"] is None else f"{state['best_val']:.4f} ({state['best_step']})"
    return [
        ["base", f"`{model['base']}`"],
        [
            "device / dtype",
            f"{model['device']} / {model['dtype']}" + (" (4-bit nf4 base)" if model["load_in_4bit"] else ""),
        ],
        ["parameters / trainable (LoRA)", f"{model['parameters']:,} / {model['trainable']:,}"],
        ["LoRA r / alpha / dropout / targets", lora],
        ["steps done / planned", steps],
        ["rows per step (batch x accumulation)", f"{config['batch_size']} x {config['grad_accum']}"],
        ["learning rate, warm-up", f"{config['lr']:g}, {config['warmup']:g} of the steps, then linear decay"],
        ["validation every / patience", f"{plural(record['eval_every'], 'step')} / {config['patience']}"],
        ["best validation loss (step)", best],
        ["training time (steps only)", f"{state['train_seconds']:.1f} s for {plural(state['rows_seen'], 'row')}"],
        ["time per 1,000 rows (measured here)", f"{per_1k:.0f} s ({per_1k / 3600:.2f} h)"],
        ["tokens per second", f"{state['tokens_seen'] / max(state['train_seconds'], 1e-9):,.0f}"],
        ["model load", f"{model['load_seconds']:.1f} s"],
    ]
