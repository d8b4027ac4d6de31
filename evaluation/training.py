"""Distil a local updater: LoRA fine-tuning of an `hf:` model on the dataset builder's passing rows.

Every row becomes exactly the update call the app makes: memory/updaters/steps.py's own `rewrite` is run on a
recorder model, so the messages (system prompt, memory/prompts/update.txt with the previous memory, the
reflected summary, both dates and the elapsed time) are the app's, byte for byte; the base model's chat template
renders them as the transformers backend does (models/hf.py, FALLBACK_TEMPLATE where the tokenizer has none);
the reference memory (the row's `memory`, one sentence per line) is the answer, followed by the template's end
of turn. A row the builder rewrote in part (`scope`) trains on the part the model saw: the carried sentences are
the first `scope.carried` of its memory. Loss is on the answer's tokens only.

Episodes, not rows, are split into train and validation, so no session of a validation episode is trained on.
Training runs in optimizer steps of `batch_size * grad_accum` examples in a seeded order per epoch; every
`eval_every` steps the validation loss is measured, the best adapter so far is saved at the top of the output
folder (what `hf:<base>+lora:<DIR>` loads) and a checkpoint (adapter, optimizer, random states, history) goes
to DIR/checkpoints/. Early stopping ends the run after `patience` evaluations without improvement. Running the
same command again resumes from the last checkpoint and ends on the same step an uninterrupted run does.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from memory.text import lenient_date
from memory.updaters.steps import DEFAULT_CEILING, Steps
from models.base import ChatModel, Completion, Finish, GenerationOptions, Message
from models.errors import InputError, ModelSpecError, ModelUnavailableError

PASSED = "통과"
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


# -- the rows and the prompts the app sends ------------------------------------------------------
def dataset_file(data: Path) -> Path:
    """DATA is a build-dataset folder (its dataset.jsonl) or the JSONL file itself."""
    path = Path(data) / "dataset.jsonl" if Path(data).is_dir() else Path(data)
    if not path.is_file():
        raise InputError(f"no dataset at {path}; give the --out folder of `keem build-dataset` or its dataset.jsonl")
    return path


def read_rows(data: Path) -> list[dict[str, Any]]:
    """The builder's rows; a line that is not one is an error naming the line."""
    path = dataset_file(data)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not all(k in row for k in ("key", "episode_id", "previous_memory", "reflected_summary", "memory")):
                raise KeyError
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(
                f"{path} line {number} is not a `keem build-dataset` row (key, episode_id, "
                "previous_memory, reflected_summary, memory, ...); fix or delete it"
            ) from None
        rows.append(row)
    return rows


def passing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose memory passed verification and holds sentences (dataset.jsonl has only those; be sure)."""
    return [r for r in rows if r.get("verdict", PASSED) == PASSED and r["memory"]]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def split_episodes(episode_ids: list[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, validation) episode ids: a seeded shuffle, at least one validation episode when there are two."""
    ids = sorted(set(episode_ids))
    if val_fraction <= 0 or len(ids) < 2:
        return ids, []
    random.Random(seed).shuffle(ids)
    n_val = min(len(ids) - 1, max(1, round(len(ids) * val_fraction)))
    return sorted(ids[n_val:]), sorted(ids[:n_val])


class _Recorder(ChatModel):
    """A model that answers nothing and keeps the messages and options of the call the steps made."""

    spec = "recorder"

    def __init__(self, count_tokens: Callable[[str], int], context_window: int):
        self._count = count_tokens
        self.context_window = context_window
        self.messages: list[Message] | None = None
        self.options: GenerationOptions | None = None

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    def complete(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> Completion:
        self.messages, self.options = messages, options
        return Completion("", Finish("stop"))


def row_dates(row: dict[str, Any]) -> tuple[Any, Any]:
    """(this session's date, the previous session's date) from the row's provenance; None where unknown."""
    dates = (row.get("source") or {}).get("session_dates") or []
    session = lenient_date(dates[-1]) if dates else None
    previous = lenient_date(dates[-2]) if len(dates) >= 2 else None
    return session, previous


def update_call(
    row: dict[str, Any], count_tokens: Callable[[str], int], context_window: int, ceiling: int = DEFAULT_CEILING
) -> tuple[list[Message], int, str] | None:
    """(the messages the app sends for this row's update, its output budget, the answer), or None when the app
    would not send it (the prompt leaves no room in the context)."""
    previous, answer = list(row["previous_memory"]), list(row["memory"])
    carried = int((row.get("scope") or {}).get("carried") or 0)
    if carried:  # scoped rewrite: the model saw only the touched sentences and wrote what follows the carried
        left = list(answer[:carried])
        part = []
        for text in previous:
            if text in left:
                left.remove(text)
            else:
                part.append(text)
        previous, answer = part, answer[carried:]
    recorder = _Recorder(count_tokens, context_window)
    session_date, previous_date = row_dates(row)
    Steps.for_model(recorder, ceiling=ceiling).rewrite(
        previous, list(row["reflected_summary"]), session_date, previous_date
    )
    if recorder.messages is None or recorder.options is None:
        return None
    return list(recorder.messages), recorder.options.max_new_tokens, "\n".join(answer)


@dataclass
class Example:
    key: str
    episode_id: str
    input_ids: list[int]
    n_prompt: int  # tokens before the answer (no loss there)
    budget: int  # the output budget the app gives this update

    @property
    def n_answer(self) -> int:
        return len(self.input_ids) - self.n_prompt


def chat_template(tokenizer: Any) -> str:
    """The template the transformers backend uses for this tokenizer (its own, else the backend's fallback)."""
    from models.hf import FALLBACK_TEMPLATE

    if not tokenizer.chat_template:
        tokenizer.chat_template = FALLBACK_TEMPLATE
    return tokenizer.chat_template


def encode(tokenizer: Any, messages: list[Message], answer: str, eos_ids: set[int]) -> tuple[list[int], int]:
    """(prompt + answer token ids, prompt length): the prompt tokenized as models/hf.py does at inference, the
    answer as the template continues it (its end-of-turn mark), ending on an end-of-sequence token."""
    chat_template(tokenizer)
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": answer}], tokenize=False)
    completion = full[len(prompt) :] if full.startswith(prompt) and len(full) > len(prompt) else answer
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    if not eos_ids & set(answer_ids[-3:]) and tokenizer.eos_token_id is not None:
        answer_ids.append(tokenizer.eos_token_id)
    return list(prompt_ids) + list(answer_ids), len(prompt_ids)


@dataclass
class Prepared:
    train: list[Example]
    val: list[Example]
    split: dict[str, list[str]]
    rows: int  # rows in the file
    used: int
    skipped_failed: int  # not passing verification
    skipped_long: list[str]  # keys past max_length or the context
    over_budget: list[str]  # keys whose answer is longer than the app's output budget
    examples_sha256: str  # over every example's token ids: prompts, template, answers
    prompt_tokens: int
    answer_tokens: int
    dataset_prompt_hashes: list[str]

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("train", "val"):
            d.pop(k)
        return {**d, "train_rows": len(self.train), "val_rows": len(self.val)}


def prepare(
    rows: list[dict[str, Any]],
    tokenizer: Any,
    *,
    context_window: int,
    eos_ids: set[int],
    max_length: int,
    val_fraction: float,
    seed: int,
    ceiling: int = DEFAULT_CEILING,
) -> Prepared:
    """Examples from the passing rows, split by episode."""
    good = passing(rows)
    train_ids, val_ids = split_episodes([r["episode_id"] for r in good], val_fraction, seed)
    val_set = set(val_ids)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    train, val, long_keys, over = [], [], [], []
    digest = hashlib.sha256()
    for row in sorted(good, key=lambda r: (r["episode_id"], r.get("session_index", 0), r["key"])):
        call = update_call(row, count, context_window, ceiling)
        if call is None:
            long_keys.append(row["key"])
            continue
        messages, budget, answer = call
        ids, n_prompt = encode(tokenizer, messages, answer, eos_ids)
        if len(ids) > min(max_length, context_window):
            long_keys.append(row["key"])
            continue
        if len(ids) - n_prompt > budget:
            over.append(row["key"])
        digest.update(json.dumps([row["key"], n_prompt, ids]).encode())
        example = Example(row["key"], row["episode_id"], ids, n_prompt, budget)
        (val if row["episode_id"] in val_set else train).append(example)
    if not train:
        raise InputError(
            f"no training rows: {len(rows)} rows, {len(good)} passing, {len(long_keys)} longer than "
            f"{max_length} tokens; build more rows, or raise --max-length"
        )
    used = train + val
    return Prepared(
        train,
        val,
        {"train": train_ids, "validation": val_ids},
        len(rows),
        len(used),
        len(rows) - len(good),
        long_keys,
        over,
        digest.hexdigest(),
        sum(e.n_prompt for e in used),
        sum(e.n_answer for e in used),
        sorted({str(r.get("prompt_hash")) for r in good if r.get("prompt_hash")}),
    )


# -- the model -------------------------------------------------------------------------------------
def base_source(spec: str) -> str:
    """hf:<id|path> -> the id or path; anything else is refused with what works."""
    kind, _, rest = spec.strip().partition(":")
    if kind != "hf" or not rest:
        raise ModelSpecError(f"--base must be hf:<hub id or local folder> (a transformers causal LM), not '{spec}'")
    if "+lora:" in rest:
        raise ModelSpecError(
            "--base takes the base model alone; training on top of an adapter is not supported "
            "(merge it first: keem train-updater ... --merge, then --base hf:<DIR>/merged)"
        )
    return rest


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the base install has it
        raise ModelUnavailableError(f"torch missing ({exc}); run `make install`") from exc
    return torch


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise ModelUnavailableError("training an updater needs peft: pip install -e '.[train]'") from exc
    return peft


def pick_device(config: TrainConfig) -> str:
    torch = _torch()
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda, but torch sees no CUDA GPU here; use --device cpu")
    if config.load_in_4bit and device != "cuda":
        raise InputError("--4bit (QLoRA) needs a CUDA GPU; on CPU train a small model in float32 without it")
    return device


def load_tokenizer(source: str) -> Any:
    from transformers import AutoTokenizer

    from models.hf import split_gguf

    folder, gguf = split_gguf(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **({"gguf_file": gguf} if gguf else {}))
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(
            f"cannot load the tokenizer of '{source}' ({str(exc).splitlines()[0]}); check "
            "the hub id or path, or that the hub is reachable (HF_TOKEN for gated models)"
        ) from exc
    chat_template(tokenizer)
    return tokenizer


def load_base(source: str, device: str, load_in_4bit: bool, *, quantize: bool = True) -> Any:
    """The base model to train on (or, with quantize=False, to merge into): bf16 on CUDA (nf4 with 4-bit),
    float32 on CPU."""
    torch = _torch()
    from transformers import AutoModelForCausalLM

    from models.hf import split_gguf

    folder, gguf = split_gguf(source)
    kwargs: dict[str, Any] = {"dtype": torch.bfloat16 if device == "cuda" else torch.float32}
    if gguf:
        kwargs["gguf_file"] = gguf
    if load_in_4bit and quantize:
        try:
            import bitsandbytes  # noqa: F401
            from transformers import BitsAndBytesConfig
        except ImportError as exc:
            raise ModelUnavailableError("--4bit needs bitsandbytes: pip install -e '.[train,gpu]'") from exc
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16,
        )
        kwargs["device_map"] = {"": 0}
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelUnavailableError(
            f"cannot load '{source}' with transformers ({str(exc).splitlines()[0]}); check "
            "the hub id or path, or that the hub is reachable"
        ) from exc
    if "device_map" not in kwargs:
        model.to(device)
    return model


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos = tokenizer.eos_token_id if eos is None else eos
    return set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())


def context_window(model: Any) -> int:
    """As models/hf.py computes it: the model's positions, at most 8192."""
    return min(int(getattr(model.config, "max_position_embeddings", None) or 8192), 8192)


def add_lora(model: Any, config: TrainConfig) -> Any:
    peft = _peft()
    if config.load_in_4bit:
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=config.gradient_checkpointing)
    elif config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.config.use_cache = False
    targets: Any = config.target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    lora = peft.LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(model, lora)
    except ValueError as exc:
        raise InputError(
            f"LoRA cannot target '{config.target_modules}' in this model ({exc}); use all-linear or "
            "module names it has (e.g. q_proj,k_proj,v_proj,o_proj)"
        ) from exc


# -- the loop --------------------------------------------------------------------------------------
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
    torch = _torch()
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
    torch = _torch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return loss, int((labels != -100).sum())


def validation_loss(model: Any, examples: list[Example], batch_size: int, pad_id: int, device: str) -> float:
    torch = _torch()
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            loss, n = answer_loss(model, collate(examples[i : i + batch_size], pad_id, device), device)
            total, tokens = total + float(loss), tokens + n
    model.train()
    return total / max(tokens, 1)


def _rng_state() -> dict[str, Any]:
    torch = _torch()
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch = _torch()
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _save_adapter(model: Any, target: Path) -> None:
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
    torch = _torch()
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
    torch = _torch()
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = torch.load(path / "state.pt", weights_only=False)
    set_peft_model_state_dict(model, load_file(str(path / "adapter_model.safetensors")))
    optimizer.load_state_dict(saved["optimizer"])
    return State(**saved["state"]), saved["rng"]


def _lock(out: Path) -> IO[str]:
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


Hook = Callable[[State], None]


def train(config: TrainConfig, *, command: str = "", on_step: Hook | None = None) -> dict[str, Any]:
    """Train (or resume, or find finished) the adapter in config.out; returns the run's record (training.json).

    `on_step(state)` is called after every optimizer step (tests stop a run there, as a kill would).
    """
    torch = _torch()
    _peft()
    rows = read_rows(config.data)
    data_path = dataset_file(config.data)
    data_sha = file_sha256(data_path)
    source = base_source(config.base)
    device = pick_device(config)
    config.out.mkdir(parents=True, exist_ok=True)
    lock = _lock(config.out)
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
            _set_rng_state(rng)
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
                "chat_template_sha256": hashlib.sha256(chat_template(tokenizer).encode()).hexdigest()[:12],
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
    torch = _torch()
    bar = None
    if config.progress:
        from tqdm import tqdm

        bar = tqdm(total=state.total_steps, initial=state.step, unit="step", desc="train-updater", dynamic_ncols=True)
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train()
    if state.step == 0 and not state.val:  # the base model's validation loss: where the curve starts
        _evaluate(model, prepared, state, config, device, pad_id)
    rng_done = _rng_state()  # the random state after the last finished step: what a resume restores
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
            rng_done = _rng_state()
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
        _save_adapter(model, config.out)
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
        _save_adapter(model, config.out)
    else:
        state.bad_evals += 1
        state.stopped_early = state.bad_evals >= config.patience
