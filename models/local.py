"""`auto`'s search for a Korean model already running on this computer: OpenAI-compatible servers on their usual
loopback ports (Ollama, llama.cpp's server, LM Studio, vLLM), asked with a short timeout which models they serve.

Only loopback addresses are asked, only when `auto` is resolved (never at import), on the ports KEEM_LOCAL_PORTS
lists (default 11434,8080,1234,8000; "off" or "" turns the search off). Which served models count as Korean-capable
chat models is the one list KOREAN_MODELS below.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from models.errors import InputError

LOOPBACK = "127.0.0.1"
TIMEOUT_S = 0.5  # per request: a loopback server answers in milliseconds, a closed port refuses at once
# port -> the server usually there (what the log and the page call it when it answers)
SERVERS = {11434: "Ollama", 8080: "llama.cpp server", 1234: "LM Studio", 8000: "vLLM"}
DEFAULT_PORTS = tuple(SERVERS)


@dataclass(frozen=True)
class Family:
    """Served model names that `pattern` matches are Korean-capable chat models when at least `min_b` billion
    parameters; a name that states no size is taken as `default_b` (the size a bare Ollama tag pulls)."""

    name: str
    pattern: str
    min_b: float = 0.0
    default_b: float = 0.0


# Korean-capable chat models, most preferred first (README "노트북에서 한국어 모델로" lists the same).
KOREAN_MODELS = (
    Family("EXAONE (LG AI Research)", r"exaone"),
    Family("Kanana (Kakao)", r"kanana"),
    Family("HyperCLOVA X SEED (Naver)", r"hyperclova"),
    Family("Llama-3 Korean Bllossom", r"bllossom"),
    Family("EEVE Korean (Yanolja)", r"eeve"),
    Family("Llama 3.x Korean", r"llama-?3.*korean|korean.*llama"),
    Family("Qwen 2.5", r"qwen-?2\.5", min_b=7, default_b=7),
    Family("Qwen 3", r"qwen-?3", min_b=7, default_b=8),
    Family("Gemma 2", r"gemma-?2", min_b=9, default_b=9),
    Family("Gemma 3", r"gemma-?3", min_b=9, default_b=4),
)
NOT_CHAT = re.compile(r"embed|rerank|whisper|guard|-vl\b|vision|-base\b", re.I)
SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*b(?![a-z])", re.I)


@dataclass(frozen=True)
class LocalModel:
    """A Korean chat model a loopback server serves: `spec` is what loads it (with `base_url`)."""

    server: str  # "Ollama", "vLLM", ...
    base_url: str  # http://127.0.0.1:<port>/v1
    model: str  # the server's name for it

    @property
    def spec(self) -> str:
        return f"openai:{self.model}"


def size_b(name: str) -> float | None:
    """The parameter count a model name states, in billions ("exaone3.5:7.8b" -> 7.8); None when it states none."""
    found = SIZE.findall(name.split("/")[-1])
    return float(found[-1]) if found else None


def korean_rank(name: str) -> int | None:
    """Where `name` stands in KOREAN_MODELS (0 is the most preferred); None when it is not a Korean chat model."""
    if NOT_CHAT.search(name):
        return None
    for rank, family in enumerate(KOREAN_MODELS):
        if re.search(family.pattern, name, re.I):
            size = size_b(name)
            return rank if (family.default_b if size is None else size) >= family.min_b else None
    return None


def pick_korean(names: Iterable[str]) -> str | None:
    """The most preferred Korean chat model among `names` (the first served, among equals)."""
    ranked = [(rank, i, n) for i, n in enumerate(names) if (rank := korean_rank(n)) is not None]
    return min(ranked)[2] if ranked else None


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def _get(url: str, timeout_s: float) -> dict | None:
    try:
        with NO_PROXY.open(url, timeout=timeout_s) as response:
            data = json.loads(response.read(1_000_000))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return data if isinstance(data, dict) else None


def served_models(port: int, timeout_s: float = TIMEOUT_S) -> tuple[str, list[str]] | None:
    """(server name, model names) a loopback port serves, from /v1/models and, for Ollama, /api/tags; None when
    nothing OpenAI-compatible answers there."""
    base = f"http://{LOOPBACK}:{port}"
    listed = _get(f"{base}/v1/models", timeout_s)
    names = [str(m["id"]) for m in (listed or {}).get("data") or [] if isinstance(m, dict) and m.get("id")]
    tags = _get(f"{base}/api/tags", timeout_s)  # Ollama's own list: it tells Ollama from the others
    ollama = tags is not None and isinstance(tags.get("models"), list)
    if ollama:
        names += [str(m["name"]) for m in tags["models"] if isinstance(m, dict) and m.get("name")]  # type: ignore[index]
    if listed is None and not ollama:
        return None
    owners = {str(m.get("owned_by", "")) for m in (listed or {}).get("data") or [] if isinstance(m, dict)}
    server = "Ollama" if ollama else "vLLM" if "vllm" in owners else SERVERS.get(port, "OpenAI 호환 서버")
    return server, list(dict.fromkeys(names))


def find_local_model(ports: Sequence[int] = DEFAULT_PORTS, timeout_s: float = TIMEOUT_S) -> LocalModel | None:
    """The first loopback server (in `ports`' order) that serves a Korean chat model, and its preferred one."""
    for port in ports:
        found = served_models(port, timeout_s)
        if found is None:
            continue
        server, names = found
        model = pick_korean(names)
        if model is not None:
            return LocalModel(server, f"http://{LOOPBACK}:{port}/v1", model)
    return None


def search_ports(env: dict[str, str] | None = None) -> tuple[int, ...]:
    """The ports `auto` searches: KEEM_LOCAL_PORTS from `env` (os.environ), else DEFAULT_PORTS."""
    raw = (os.environ if env is None else env).get("KEEM_LOCAL_PORTS")
    if raw is None:
        return DEFAULT_PORTS
    try:
        return parse_ports(raw)
    except ValueError as exc:
        raise InputError(f"{exc}; list port numbers with commas, or set it to off") from None


def parse_ports(text: str) -> tuple[int, ...]:
    """KEEM_LOCAL_PORTS ("11434,8080"; "off" or empty: no search) as ports; a word that is no port is an error."""
    if text.strip().lower() == "off":
        return ()
    ports = []
    for word in text.replace(" ", ",").split(","):
        if not word:
            continue
        if not word.isdigit() or not 0 < int(word) < 65536:
            raise ValueError(f"KEEM_LOCAL_PORTS: {word!r} is not a port number")
        ports.append(int(word))
    return tuple(ports)
