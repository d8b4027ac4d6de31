"""`auto` finds a Korean model on a loopback server (models/local.py): servers answering like Ollama and vLLM."""

from __future__ import annotations

import socket

import pytest

from chatbot.settings import Settings
from models.errors import InputError
from models.local import (
    find_local_model,
    korean_rank,
    parse_ports,
    pick_korean,
    search_ports,
    served_models,
    size_b,
)
from models.spec import load_chat_model, resolve
from tests.fake_openai import FakeOpenAIServer


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_korean_list_picks_korean_chat_models_by_name_and_size():
    assert size_b("exaone3.5:7.8b") == 7.8 and size_b("Qwen/Qwen2.5-14B-Instruct") == 14 and size_b("qwen3") is None
    for name in (
        "exaone3.5:7.8b",
        "LGAI-EXAONE/EXAONE-3.5-2.4B-Instruct",
        "EXAONE-3.5-7.8B-Q4_K_M.gguf",
        "MLP-KTLim/llama-3-Korean-Bllossom-8B",
        "yanolja/EEVE-Korean-Instruct-10.8B-v1.0",
        "qwen2.5:14b",
        "qwen3",
        "gemma2:9b",
        "google/gemma-3-12b-it",
        "kanana-1.5-8b-instruct",
    ):
        assert korean_rank(name) is not None, name
    for name in (
        "llama3.2:3b",
        "gemma3",
        "gemma3:4b",
        "qwen2.5:0.5b",
        "nomic-embed-text",
        "bge-m3",
        "smollm2:135m",
        "mistral:7b",
        "qwen2.5vl:7b-vl",
        "Qwen/Qwen3-Embedding-8B",
    ):
        assert korean_rank(name) is None, name
    # the most preferred family wins whatever the order served; among equals the first served
    assert pick_korean(["llama3.2:3b", "qwen2.5:7b", "exaone3.5:7.8b"]) == "exaone3.5:7.8b"
    assert pick_korean(["qwen3:8b", "qwen3:14b"]) == "qwen3:8b"
    assert pick_korean(["llama3.2:3b"]) is None and pick_korean([]) is None


def test_ports_setting_lists_ports_or_turns_the_search_off():
    assert parse_ports("11434, 8080") == (11434, 8080) and parse_ports("") == () and parse_ports("off") == ()
    assert search_ports({}) == (11434, 8080, 1234, 8000) and search_ports({"KEEM_LOCAL_PORTS": "off"}) == ()
    with pytest.raises(InputError, match="KEEM_LOCAL_PORTS"):
        search_ports({"KEEM_LOCAL_PORTS": "ollama"})


def test_an_ollama_server_is_found_by_its_tags_and_its_korean_model_loads():
    served = ["nomic-embed-text:latest", "llama3.2:3b", "exaone3.5:7.8b"]
    with FakeOpenAIServer(flavor="ollama", models=served, reply=lambda body: "반가워요") as server:
        assert served_models(server.port) == ("Ollama", served)
        found = find_local_model([closed_port(), server.port])
        assert found is not None and (found.server, found.model) == ("Ollama", "exaone3.5:7.8b")
        assert found.base_url == server.url
        resolved = resolve("auto", [closed_port(), server.port])
        assert (resolved.spec, resolved.found_on) == ("openai:exaone3.5:7.8b", "Ollama")
        model = load_chat_model(resolved)
        assert model.found_on == "Ollama" and "".join(model.stream([{"role": "user", "content": "안녕"}])) == "반가워요"
        assert server.requests[-1]["model"] == "exaone3.5:7.8b"


def test_a_vllm_server_is_named_and_a_server_without_korean_models_is_passed_over():
    with (
        FakeOpenAIServer(flavor="vllm", models=["meta-llama/Llama-3.2-3B-Instruct"]) as english,
        FakeOpenAIServer(flavor="vllm", models=["Qwen/Qwen2.5-7B-Instruct"]) as vllm,
    ):
        assert served_models(english.port) == ("vLLM", ["meta-llama/Llama-3.2-3B-Instruct"])
        found = find_local_model([english.port, vllm.port])
        assert found is not None and (found.server, found.model) == ("vLLM", "Qwen/Qwen2.5-7B-Instruct")
        assert resolve("auto", [english.port]).spec in ("demo", "hf:yanolja/EEVE-Korean-Instruct-10.8B-v1.0")


def test_nothing_is_probed_without_ports_and_other_specs_pass_through():
    with FakeOpenAIServer(flavor="ollama") as server:
        assert resolve("auto", ()).found_on == "" and server.requests == []
        assert resolve("openai:x", [server.port]).spec == "openai:x"
    assert served_models(closed_port()) is None


def test_the_app_loads_what_auto_found_and_the_model_info_says_so_in_korean(tmp_path, capsys, monkeypatch):
    from chatbot.bot import load_bot
    from chatbot.web.render import model_banner

    with FakeOpenAIServer(flavor="ollama", models=["llama3.2:3b", "qwen2.5:7b"]) as server:
        monkeypatch.setenv("KEEM_LOCAL_PORTS", str(server.port))
        settings = Settings.load({}, db=str(tmp_path / "k.db"), embedder="ngram")
        bot = load_bot(settings)
        assert bot.chat_model is bot.update_model and bot.chat_model.spec == "openai:qwen2.5:7b"
        assert "model auto -> openai:qwen2.5:7b (found qwen2.5:7b on Ollama" in capsys.readouterr().err
        shown = model_banner(bot)
        assert "qwen2.5:7b (이 컴퓨터의 Ollama에서 자동으로 찾은 한국어 모델)" in shown.replace("\\", "")
        assert "127.0.0.1" not in shown and "http" not in shown and "데모" not in shown
