"""One spec string picks a backend: hf:<id|path>, openai:<model>, demo, auto; embedders likewise."""

from __future__ import annotations

import functools

from models.base import ChatModel
from models.embedders import Embedder
from models.errors import ModelSpecError

KOREAN_LLAMA = "hf:yanolja/EEVE-Korean-Instruct-10.8B-v1.0"
CHAT_SPECS_HELP = "hf:<hub id or path>, openai:<model>, demo, auto"
EMBEDDER_SPECS_HELP = "use-multilingual (default, offline), minilm, ngram, st:<hub id or path>"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_auto(spec: str) -> str:
    """'auto' -> the Korean Llama on CUDA, else the offline demo; other specs unchanged."""
    if spec != "auto":
        return spec
    return KOREAN_LLAMA if cuda_available() else "demo"


def load_chat_model(spec: str, *, load_in_4bit: bool = False) -> ChatModel:
    """Build a chat model from its spec; heavy imports happen inside the backend's constructor."""
    spec = resolve_auto(spec.strip())
    kind, _, rest = spec.partition(":")
    if spec == "demo":
        from models.demo import load_demo

        return load_demo()
    if kind == "hf" and rest:
        from models.hf import TransformersChatModel

        return TransformersChatModel(rest, spec=spec, load_in_4bit=load_in_4bit)
    if kind == "openai" and rest:
        from models.openai_backend import OpenAIChatModel

        return OpenAIChatModel(rest)
    raise ModelSpecError(f"unknown model spec '{spec}'; use one of: {CHAT_SPECS_HELP}")


@functools.lru_cache(maxsize=4)
def load_embedder(spec: str = "use-multilingual") -> Embedder:
    """Build (once per process) the embedder a spec names."""
    from models import embedders

    spec = spec.strip()
    if spec in ("use-multilingual", "use", "default"):
        return embedders.USEEmbedder()
    if spec == "minilm":
        return embedders.minilm()
    if spec == "ngram":
        return embedders.NgramEmbedder()
    if spec.startswith("st:") and spec[3:]:
        return embedders.SentenceTransformerEmbedder(spec[3:])
    raise ModelSpecError(f"unknown embedder spec '{spec}'; use one of: {EMBEDDER_SPECS_HELP}")
