"""The model side of training: the base model and tokenizer, LoRA on top (peft), and merging the result.

The base loads as the transformers backend loads it for the app (models/hf.py): bf16 on CUDA, float32 on CPU,
the tokenizer's chat template (FALLBACK_TEMPLATE where it has none); with --4bit the base is nf4 on CUDA
(QLoRA). peft is imported only here, with the install hint, so the base install never needs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from models.errors import InputError, ModelSpecError, ModelUnavailableError
from models.hf import load_causal_lm, load_tokenizer
from training.state import STATE, TrainConfig


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


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the base install has it
        raise ModelUnavailableError(f"torch missing ({exc}); run `make install`") from exc
    return torch


def import_peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise ModelUnavailableError("training an updater needs peft: pip install -e '.[train]'") from exc
    return peft


def pick_device(config: TrainConfig) -> str:
    torch = import_torch()
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda, but torch sees no CUDA GPU here; use --device cpu")
    if config.load_in_4bit and device != "cuda":
        raise InputError("--4bit (QLoRA) needs a CUDA GPU; on CPU train a small model in float32 without it")
    return device


def load_base(source: str, device: str, load_in_4bit: bool, *, quantize: bool = True) -> Any:
    """The base model to train on (or, with quantize=False, to merge into): the app's loader (models/hf.py), on
    the one GPU with 4-bit."""
    return load_causal_lm(
        source,
        device,
        four_bit=load_in_4bit and quantize,
        missing_4bit="--4bit needs bitsandbytes: pip install -e '.[train,gpu]'",
        device_map={"": 0},
    )


def add_lora(model: Any, config: TrainConfig) -> Any:
    peft = import_peft()
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


def merge(out: Path, record: dict[str, Any]) -> Path:
    """DIR/merged: the base (unquantized) with the adapter merged in, its tokenizer, and the run's record."""
    from peft import PeftModel

    from models.hf import split_gguf

    source = base_source(record["model"]["base"])
    if split_gguf(source)[1]:
        raise InputError("a GGUF base cannot be saved merged; use the adapter (hf:<base>+lora:<DIR>) instead")
    device = record["model"]["device"]
    model = PeftModel.from_pretrained(load_base(source, device, False, quantize=False), str(out)).merge_and_unload()
    target, tmp = out / "merged", out / ".merged-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    load_tokenizer(source).save_pretrained(str(tmp))
    shutil.copy(out / STATE, tmp / STATE)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
