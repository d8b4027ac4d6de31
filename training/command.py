"""`keem train-updater`: LoRA-train a local memory updater on a built dataset; report.md with loss curves.

chatbot/cli/main.py calls `add_train_parser(subs)` before it builds `keem eval` from evaluation/commands/eval.py's
registry (this also registers `keem eval updater`, training/evaluate.py), and `run_train(args)`.
The training is training/train.py (the loop), with training_data.py (rows -> examples), training_model.py
(base, LoRA, merge), training_state.py (record, checkpoints, resume); the report is training_report.py.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from memory.updaters.steps import DEFAULT_CEILING
from memory.words import plural
from models.errors import InputError
from training.state import TrainConfig

SIZES = """what fits where (LoRA r=16; docs/training.md has the basis of every figure):
  CPU             test-size models only. Measured on this project's shared 2-core machine: the tests' tiny
                  random Llama (0.23M parameters, ~880-token rows) 0.35-1.5 s a row, ~6-25 min per 1,000
                  rows; SmolLM2-135M 26 s a row (~2,300 tokens), ~7 h per 1,000 rows and epoch, and over
                  11 GB of RAM. A 1B model would take days per 1,000 rows (extrapolated); 7B is out of
                  reach.
  GPU estimates   (no GPU was measured; rows of ~1.5k tokens, per 1,000 rows and epoch)
    16 GB         7-8B with --4bit --gradient-checkpointing (tight), e.g. MLP-KTLim/llama-3-Korean-Bllossom-8B.
    24 GB         7-8B with --4bit --gradient-checkpointing, ~20-50 min; yanolja/EEVE-Korean-Instruct-10.8B-v1.0
                  likewise, ~30-70 min; ~3B in bf16.
    40-48 GB      8-10.8B in bf16 with --gradient-checkpointing.
    80 GB         8B in bf16 ~11-19 min on an A100; 10.8B in bf16 ~10-26 min."""

EXAMPLE = f"""examples:
  keem train-updater keem_ds/ --base hf:MLP-KTLim/llama-3-Korean-Bllossom-8B --out runs/updater --4bit \\
      --gradient-checkpointing
  keem session --user minsu --model auto --update-model hf:MLP-KTLim/llama-3-Korean-Bllossom-8B+lora:runs/updater
  keem eval updater --data keem_ds/ --model hf:MLP-KTLim/llama-3-Korean-Bllossom-8B+lora:runs/updater \\
      --model openai:gpt-4o --out runs/updater-eval

Run the same command again after an interruption: it resumes from the last checkpoint in DIR/checkpoints/.
Needs the train extra: pip install -e '.[train]' (QLoRA also '.[gpu]').

{SIZES}"""


def add_train_parser(subs: Any) -> argparse.ArgumentParser:
    """Add `train-updater` to the `keem` parser's subparsers, and `updater` to `keem eval` (call this first)."""
    from training import evaluate as updater_eval

    updater_eval.register_eval()
    d = TrainConfig(Path("."), "", Path("."))
    p = subs.add_parser(
        "train-updater",
        help="LoRA-train a local memory-update model on a built dataset",
        description="Fine-tune an hf: model with LoRA (QLoRA with --4bit on CUDA) on the passing "
        "rows of `keem build-dataset`: each row becomes the exact update call the app "
        "makes, with the reference memory as the answer (loss on the answer only). "
        "Episodes are split into train and validation; early stopping on validation "
        "loss; checkpoints to resume from; DIR/report.md with loss curves. Use the "
        "result as --update-model hf:<base>+lora:<DIR>.",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", type=Path, help="a `keem build-dataset` --out folder, or its dataset.jsonl")
    p.add_argument("--base", required=True, help="the model to adapt: hf:<hub id or local folder>")
    p.add_argument("--out", type=Path, required=True, help="output folder: the adapter, checkpoints, report.md")
    g = p.add_argument_group("training")
    g.add_argument(
        "--epochs", type=float, default=d.epochs, help=f"passes over the training rows (default {d.epochs:g})"
    )
    g.add_argument("--max-steps", type=int, help="optimizer steps in all (overrides --epochs)")
    g.add_argument(
        "--batch-size", type=int, default=d.batch_size, help=f"rows per forward pass (default {d.batch_size})"
    )
    g.add_argument(
        "--grad-accum",
        type=int,
        default=d.grad_accum,
        help=f"forward passes per optimizer step (default {d.grad_accum})",
    )
    g.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr:g})")
    g.add_argument("--warmup", type=float, default=d.warmup, help=f"share of steps warming up (default {d.warmup:g})")
    g.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay (default 0)")
    g.add_argument(
        "--max-length",
        type=int,
        default=d.max_length,
        help=f"tokens of prompt + answer; longer rows are skipped and counted (default {d.max_length})",
    )
    g.add_argument(
        "--val-fraction",
        type=float,
        default=d.val_fraction,
        help=f"share of the episodes held out for validation (default {d.val_fraction:g})",
    )
    g.add_argument("--seed", type=int, default=d.seed, help="split, order and initialisation seed (default 0)")
    g.add_argument(
        "--eval-every", type=int, help="steps between validations and checkpoints (default: twice an epoch, at most 50)"
    )
    g.add_argument(
        "--patience",
        type=int,
        default=d.patience,
        help=f"validations without improvement before stopping (default {d.patience})",
    )
    g.add_argument("--min-delta", type=float, default=d.min_delta, help="improvement that counts (default 0)")
    g.add_argument(
        "--update-max-tokens",
        type=int,
        default=DEFAULT_CEILING,
        help=f"KEEM_UPDATE_MAX_TOKENS of the app that will run the model: rows whose answer is longer "
        f"than the budget it gives are counted (default {DEFAULT_CEILING})",
    )
    lora = p.add_argument_group("LoRA and hardware")
    lora.add_argument("--lora-r", type=int, default=d.lora_r, help=f"rank (default {d.lora_r})")
    lora.add_argument("--lora-alpha", type=int, default=d.lora_alpha, help=f"scale (default {d.lora_alpha})")
    lora.add_argument("--lora-dropout", type=float, default=d.lora_dropout, help=f"(default {d.lora_dropout:g})")
    lora.add_argument(
        "--target-modules",
        default=d.target_modules,
        help="all-linear (default) or comma-separated module names, e.g. q_proj,v_proj",
    )
    lora.add_argument(
        "--4bit",
        dest="load_in_4bit",
        action="store_true",
        help="QLoRA: the base in 4-bit nf4 on CUDA (needs bitsandbytes: pip install -e '.[gpu]')",
    )
    lora.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations: less GPU memory, about a third slower",
    )
    lora.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available, else cpu")
    p.add_argument(
        "--merge",
        action="store_true",
        help="also write DIR/merged: the base with the adapter merged in (use as hf:DIR/merged)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the run's record as JSON")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    for name in ("batch_size", "grad_accum", "max_length", "lora_r", "lora_alpha", "patience", "update_max_tokens"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("max_steps", "eval_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    if args.epochs <= 0 or args.lr <= 0:
        raise InputError("--epochs and --lr must be above 0")
    if not 0 <= args.val_fraction < 1 or not 0 <= args.warmup < 1 or not 0 <= args.lora_dropout < 1:
        raise InputError("--val-fraction, --warmup and --lora-dropout are shares: at least 0, below 1")
    return TrainConfig(
        data=args.data,
        base=args.base,
        out=args.out,
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        lr=args.lr,
        warmup=args.warmup,
        weight_decay=args.weight_decay,
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=args.target_modules,
        max_length=args.max_length,
        val_fraction=args.val_fraction,
        seed=args.seed,
        eval_every=args.eval_every,
        patience=args.patience,
        min_delta=args.min_delta,
        load_in_4bit=args.load_in_4bit,
        gradient_checkpointing=args.gradient_checkpointing,
        device=args.device,
        ceiling=args.update_max_tokens,
        progress=not args.no_progress,
    )


def command_line(config: TrainConfig) -> str:
    """The command that reproduces this run, with every setting spelled out."""
    parts = ["keem", "train-updater", str(config.data), "--base", config.base, "--out", str(config.out)]
    options = {
        "epochs": config.epochs,
        "max-steps": config.max_steps,
        "batch-size": config.batch_size,
        "grad-accum": config.grad_accum,
        "lr": config.lr,
        "warmup": config.warmup,
        "weight-decay": config.weight_decay,
        "max-length": config.max_length,
        "val-fraction": config.val_fraction,
        "seed": config.seed,
        "eval-every": config.eval_every,
        "patience": config.patience,
        "min-delta": config.min_delta,
        "update-max-tokens": config.ceiling,
        "lora-r": config.lora_r,
        "lora-alpha": config.lora_alpha,
        "lora-dropout": config.lora_dropout,
        "target-modules": config.target_modules,
        "device": config.device,
    }
    for name, value in options.items():
        if value is not None:
            parts += [f"--{name}", f"{value:g}" if isinstance(value, float) else str(value)]
    parts += ["--4bit"] * config.load_in_4bit + ["--gradient-checkpointing"] * config.gradient_checkpointing
    return shlex.join(parts)


def run_train(args: argparse.Namespace) -> int:
    from training.model import merge
    from training.report import write_report
    from training.train import train

    config = config_from_args(args)
    try:
        record = train(config, command=command_line(config))
    except KeyboardInterrupt:
        print(
            f"\ninterrupted; run the same command again to resume from the last checkpoint in "
            f"{config.out / 'checkpoints'}",
            file=sys.stderr,
        )
        return 130
    merged = merge(config.out, record) if args.merge else None
    report = write_report(config.out, record)
    state = record["state"]
    if args.json:
        print(
            json.dumps(
                {**record, "report": str(report), "merged": str(merged) if merged else None},
                ensure_ascii=False,
                indent=2,
                default=str,
            )
        )
        return 0
    data = record["data"]
    best = (
        f"best validation loss {state['best_val']:.4f} at step {state['best_step']}"
        if state["best_val"] is not None
        else "no validation episodes: the last step's adapter was kept"
    )
    print(
        f"{state['step']}/{plural(state['total_steps'], 'step')}{' (stopped early)' if state['stopped_early'] else ''} "
        f"on {plural(data['train_rows'], 'row')} ({plural(len(data['split']['train']), 'episode')}), {best}"
    )
    print(f"adapter: {config.out}  ->  --update-model {config.base}+lora:{config.out}")
    if merged:
        print(f"merged model: {merged}  ->  --update-model hf:{merged}")
    print(f"report: {report}")
    return 0
