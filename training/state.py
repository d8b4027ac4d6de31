"""A training run on disk: its settings, its state, its checkpoints, and resuming it.

DIR/training.json is the run's record (settings, data, model, prompt hashes, state); DIR/checkpoints/step-N
holds the adapter, the optimizer, the random states and the state after step N, written whole or not at all
(a kill never leaves half a checkpoint). Running the same command again resumes from the last checkpoint; a
folder trained with other data or settings is refused.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from memory.updaters.steps import DEFAULT_CEILING
from models.errors import InputError

STATE = "training.json"
CHECKPOINTS = "checkpoints"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# Settings that change what is trained: a resumed run must have the same ones.
RESUME_KEYS = (
    "base",
    "epochs",
    "max_steps",
    "batch_size",
    "grad_accum",
    "lr",
    "warmup",
    "weight_decay",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "target_modules",
    "max_length",
    "val_fraction",
    "seed",
    "eval_every",
    "patience",
    "min_delta",
    "load_in_4bit",
    "ceiling",
)


@dataclass
class TrainConfig:
    data: Path  # a build-dataset folder, or its dataset.jsonl
    base: str  # hf:<hub id or path>
    out: Path
    epochs: float = 2.0
    max_steps: int | None = None  # overrides epochs
    batch_size: int = 1
    grad_accum: int = 8
    lr: float = 2e-4
    warmup: float = 0.05  # share of the steps with a linear warm-up; then linear decay to 0
    weight_decay: float = 0.0
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: str = "all-linear"  # or comma-separated module names (q_proj,v_proj)
    max_length: int = 4096  # tokens of prompt + answer; longer rows are skipped (and counted)
    val_fraction: float = 0.1  # of the episodes
    seed: int = 0
    eval_every: int | None = None  # steps; default: twice an epoch, at most every 50 steps
    patience: int = 3  # evaluations without improvement before stopping
    min_delta: float = 0.0
    load_in_4bit: bool = False  # QLoRA: nf4 base on CUDA (bitsandbytes)
    gradient_checkpointing: bool = False
    device: str | None = None  # cpu | cuda; default cuda when available
    ceiling: int = DEFAULT_CEILING  # KEEM_UPDATE_MAX_TOKENS of the app that will run the model
    progress: bool = True

    def resume_view(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in RESUME_KEYS}


@dataclass
class State:
    """What a checkpoint and DIR/training.json keep of a run."""

    step: int = 0
    total_steps: int = 0
    best_val: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    stopped_early: bool = False
    finished: bool = False
    train: list[dict[str, float]] = field(default_factory=list)
    val: list[dict[str, float]] = field(default_factory=list)
    train_seconds: float = 0.0
    rows_seen: int = 0
    tokens_seen: int = 0


def rng_state() -> dict[str, Any]:
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_adapter(model: Any, target: Path) -> None:
    """The adapter's two files into `target`, each replaced whole (a kill never leaves half a file)."""
    tmp = target / f".adapter-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    for name in ADAPTER_FILES:
        os.replace(tmp / name, target / name)
    shutil.rmtree(tmp, ignore_errors=True)


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    folder = out / CHECKPOINTS
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith("step-") and (p / "state.pt").is_file())


def save_checkpoint(out: Path, model: Any, optimizer: Any, state: State, rng: dict[str, Any], keep: int = 1) -> Path:
    import torch

    final = out / CHECKPOINTS / f"step-{state.step:06d}"
    tmp = out / CHECKPOINTS / f".tmp-step-{state.step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp))
    torch.save({"optimizer": optimizer.state_dict(), "rng": rng, "state": asdict(state)}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model: Any, optimizer: Any) -> tuple[State, dict[str, Any]]:
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = torch.load(path / "state.pt", weights_only=False)
    set_peft_model_state_dict(model, load_file(str(path / "adapter_model.safetensors")))
    optimizer.load_state_dict(saved["optimizer"])
    return State(**saved["state"]), saved["rng"]


def lock_folder(out: Path) -> IO[str]:
    handle = (out / ".lock").open("w")
    try:
        import fcntl

        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # pragma: no cover - not POSIX
        pass
    except OSError:
        handle.close()
        raise InputError(f"another train-updater is writing {out}; wait for it or use another --out") from None
    return handle


def read_state(out: Path) -> dict[str, Any] | None:
    path = Path(out) / STATE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_state(out: Path, record: dict[str, Any]) -> None:
    tmp = out / f".{STATE}.tmp"
    tmp.write_text(json.dumps(record, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, out / STATE)


def check_resume(out: Path, config: TrainConfig, data_sha: str) -> dict[str, Any] | None:
    """The earlier run's record; refuses a folder trained with other data or settings."""
    old = read_state(out)
    if old is None:
        return None
    theirs = {**old["config"], "data_sha256": old["data"]["sha256"]}
    ours = {**json.loads(json.dumps(config.resume_view(), default=str)), "data_sha256": data_sha}
    for key in ours:
        if theirs.get(key) != ours[key]:
            raise InputError(
                f"{out} holds a training run with {key} {theirs.get(key)!r}, not {ours[key]!r}; use a "
                f"new --out folder, or the same {key} to resume it"
            )
    return old
