"""Distil a local updater: LoRA fine-tuning of an `hf:` model on the dataset builder's passing rows.

The rows become the app's own update calls (training/data.py); the base model and LoRA come from
training/model.py; the run's record and checkpoints are training/state.py. This module is
the loop: optimizer steps of `batch_size * grad_accum` examples in a seeded order per epoch, a linear warm-up
and decay; every `eval_every` steps the validation loss is measured, the best adapter so far is saved at the
top of the output folder (what `hf:<base>+lora:<DIR>` loads) and a checkpoint is written. Early stopping ends
the run after `patience` evaluations without improvement. Running the same command again resumes from the last
checkpoint and ends on the same step, with the same losses, as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from evaluation.files import file_sha256
from memory.updaters.steps import Steps
from models.hf import context_window, eos_ids, load_tokenizer, use_chat_template
from training.data import Example, Prepared, dataset_file, prepare, read_rows
from training.model import (
    add_lora,
    base_source,
    import_peft,
    import_torch,
    load_base,
    pick_device,
)
from training.state import (
    CHECKPOINTS,
    State,
    TrainConfig,
    check_resume,
    checkpoints,
    load_checkpoint,
    lock_folder,
    rng_state,
    save_adapter,
    save_checkpoint,
    set_rng_state,
    write_state,
)


def lr_at(step: int, total: int, config: TrainConfig) -> float:
    """Linear warm-up over `warmup` of the steps, then linear decay to zero."""
    warm = max(1, int(total * config.warmup)) if config.warmup > 0 else 0
    if step < warm:
        return config.lr * (step + 1) / warm
    return config.lr * max(0.0, (total - step) / max(1, total - warm))


def batch_indices(micro: int, n_train: int, batch_size: int, seed: int) -> list[int]:
    """The training examples of micro-batch `micro`: epoch by epoch, each in its own seeded order."""
    per_epoch = math.ceil(n_train / batch_size)
    epoch, b = divmod(micro, per_epoch)
    order = list(range(n_train))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order[b * batch_size : (b + 1) * batch_size]


def collate(examples: list[Example], pad_id: int, device: str) -> dict[str, Any]:
    torch = import_torch()
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        mask[i, :n] = 1
        labels[i, e.n_prompt : n] = torch.tensor(e.input_ids[e.n_prompt :])
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)}


def answer_loss(model: Any, batch: dict[str, Any], device: str) -> tuple[Any, int]:
    """(summed cross-entropy over the answer tokens, their number)."""
    torch = import_torch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return loss, int((labels != -100).sum())


def validation_loss(model: Any, examples: list[Example], batch_size: int, pad_id: int, device: str) -> float:
    torch = import_torch()
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            loss, n = answer_loss(model, collate(examples[i : i + batch_size], pad_id, device), device)
            total, tokens = total + float(loss), tokens + n
    model.train()
    return total / max(tokens, 1)


Hook = Callable[[State], None]


def train(config: TrainConfig, *, command: str = "", on_step: Hook | None = None) -> dict[str, Any]:
    """Train (or resume, or find finished) the adapter in config.out; returns the run's record (training.json).

    `on_step(state)` is called after every optimizer step (tests stop a run there, as a kill would).
    """
    torch = import_torch()
    import_peft()
    rows = read_rows(config.data)
    data_path = dataset_file(config.data)
    data_sha = file_sha256(data_path)
    source = base_source(config.base)
    device = pick_device(config)
    config.out.mkdir(parents=True, exist_ok=True)
    lock = lock_folder(config.out)
    try:
        old = check_resume(config.out, config, data_sha)
        if old is not None and old["state"]["finished"]:
            return old
        torch.manual_seed(config.seed)
        tokenizer = load_tokenizer(source)
        started_load = time.perf_counter()
        model = load_base(source, device, config.load_in_4bit)
        window = context_window(model)
        prepared = prepare(
            rows,
            tokenizer,
            context_window=window,
            eos_ids=eos_ids(model, tokenizer),
            max_length=config.max_length,
            val_fraction=config.val_fraction,
            seed=config.seed,
            ceiling=config.ceiling,
        )
        model = add_lora(model, config)
        load_seconds = time.perf_counter() - started_load
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
        per_epoch = math.ceil(len(prepared.train) / config.batch_size)
        total = config.max_steps or max(1, math.ceil(config.epochs * per_epoch / config.grad_accum))
        eval_every = config.eval_every or max(1, min(50, math.ceil(per_epoch / config.grad_accum / 2)))
        state, rng = State(total_steps=total), None
        latest = checkpoints(config.out)
        if latest:
            state, rng = load_checkpoint(latest[-1], model, optimizer)
            set_rng_state(rng)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        record = {
            "config": json.loads(json.dumps(config.resume_view(), default=str)),
            "data": {"path": str(data_path), "sha256": data_sha, **prepared.summary()},
            "model": {
                "base": config.base,
                "device": device,
                "dtype": "bfloat16" if device == "cuda" else "float32",
                "load_in_4bit": config.load_in_4bit,
                "context_window": window,
                "parameters": sum(p.numel() for p in model.parameters()),
                "trainable": sum(p.numel() for p in trainable),
                "chat_template_sha256": hashlib.sha256(use_chat_template(tokenizer).encode()).hexdigest()[:12],
                "load_seconds": round(load_seconds, 2),
            },
            "prompts": {
                "update": _update_prompt_hash(),
                "steps": Steps.prompt_hash(),
                "dataset": prepared.dataset_prompt_hashes,
            },
            "eval_every": eval_every,
            "commands": [*(old or {}).get("commands", []), *([command] if command else [])],
            "resumed_from": latest[-1].name if latest else None,
            "state": asdict(state),
        }
        write_state(config.out, record)
        _loop(model, optimizer, prepared, state, config, device, pad_id, eval_every, record, on_step)
        return record
    finally:
        lock.close()


def _update_prompt_hash() -> str:
    from memory.prompts import prompt_hash

    return prompt_hash("update_system", "update")


def _loop(
    model: Any,
    optimizer: Any,
    prepared: Prepared,
    state: State,
    config: TrainConfig,
    device: str,
    pad_id: int,
    eval_every: int,
    record: dict[str, Any],
    on_step: Hook | None,
) -> None:
    torch = import_torch()
    bar = None
    if config.progress:
        from tqdm import tqdm

        bar = tqdm(total=state.total_steps, initial=state.step, unit="step", desc="train-updater", dynamic_ncols=True)
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train()
    if state.step == 0 and not state.val:  # the base model's validation loss: where the curve starts
        _evaluate(model, prepared, state, config, device, pad_id)
    rng_done = rng_state()  # the random state after the last finished step: what a resume restores
    try:
        while state.step < state.total_steps and not state.stopped_early:
            started = time.perf_counter()
            micro = [
                [
                    prepared.train[i]
                    for i in batch_indices(
                        state.step * config.grad_accum + a, len(prepared.train), config.batch_size, config.seed
                    )
                ]
                for a in range(config.grad_accum)
            ]
            n_answer = sum(e.n_answer for batch in micro for e in batch)
            loss_sum = 0.0
            for batch in micro:
                loss, _ = answer_loss(model, collate(batch, pad_id, device), device)
                (loss / max(n_answer, 1)).backward()
                loss_sum += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            lr = lr_at(state.step, state.total_steps, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            seconds = time.perf_counter() - started
            state.train_seconds += seconds
            state.rows_seen += sum(len(b) for b in micro)
            state.tokens_seen += sum(len(e.input_ids) for b in micro for e in b)
            state.train.append(
                {
                    "step": state.step,
                    "loss": round(loss_sum / max(n_answer, 1), 5),
                    "lr": lr,
                    "seconds": round(seconds, 3),
                }
            )
            rng_done = rng_state()
            if state.step % eval_every == 0 or state.step == state.total_steps:
                _evaluate(model, prepared, state, config, device, pad_id)
                state.finished = state.step >= state.total_steps or state.stopped_early
                save_checkpoint(config.out, model, optimizer, state, rng_done)
                record["state"] = asdict(state)
                write_state(config.out, record)
            if bar is not None:
                val = state.val[-1]["loss"] if state.val else None
                bar.set_postfix_str(
                    f"loss={state.train[-1]['loss']:.3f}" + (f" val={val:.3f}" if val else ""), refresh=False
                )
                bar.update(1)
            if on_step is not None:
                on_step(state)
    except KeyboardInterrupt:  # Ctrl-C: keep the steps finished so far; the step in progress is lost
        if state.step and not (config.out / CHECKPOINTS / f"step-{state.step:06d}").is_dir():
            save_checkpoint(config.out, model, optimizer, state, rng_done)
        record["state"] = asdict(state)
        write_state(config.out, record)
        raise
    finally:
        if bar is not None:
            bar.close()
    if state.best_step is None:  # no validation episodes: the last adapter is the result
        save_adapter(model, config.out)
    state.finished = True
    record["state"] = asdict(state)
    write_state(config.out, record)


def _evaluate(model: Any, prepared: Prepared, state: State, config: TrainConfig, device: str, pad_id: int) -> None:
    """Validation loss; the best adapter so far to the top of the folder; early stopping."""
    if not prepared.val:
        return
    loss = validation_loss(model, prepared.val, config.batch_size, pad_id, device)
    state.val.append({"step": state.step, "loss": round(loss, 5)})
    if state.best_val is None or loss < state.best_val - config.min_delta:
        state.best_val, state.best_step, state.bad_evals = loss, state.step, 0
        save_adapter(model, config.out)
    else:
        state.bad_evals += 1
        state.stopped_early = state.bad_evals >= config.patience
