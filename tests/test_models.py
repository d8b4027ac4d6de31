"""Model backends through their public protocol: fake, tiny transformers Llama, OpenAI-compatible, specs."""

from __future__ import annotations

import socket

import pytest

from models import GenerationOptions, load_chat_model, load_embedder
from models.errors import ContextOverflowError, GenerationError, ModelSpecError, ModelUnavailableError
from models.fake import ScriptedChatModel
from models.openai_backend import OpenAIChatModel
from tests.fake_openai import FakeOpenAIServer

HELLO = [{"role": "user", "content": "안녕"}]


def test_scripted_model_streams_queue_then_responder_and_raises_queued_errors():
    model = ScriptedChatModel(["첫 답"], responder=lambda msgs: "함수 답")
    assert model.complete(HELLO).text == "첫 답" and model.complete(HELLO).text == "함수 답"
    model = ScriptedChatModel(["첫 답", RuntimeError("boom")])
    assert model.complete(HELLO).text == "첫 답"
    with pytest.raises(RuntimeError):
        model.complete(HELLO)
    with pytest.raises(GenerationError, match="enqueue"):
        model.complete(HELLO)
    assert len(model.calls) == 3


def test_fakes_stop_at_their_token_budget_and_say_so():
    model = ScriptedChatModel(["사용자는 올해 초에 요가를 시작했다."])
    answer = model.complete(HELLO, GenerationOptions(max_new_tokens=8))
    assert answer.cut and answer.finish.reason == "length" and answer.text == "사용자는 올해 초"
    assert answer.finish.completion_tokens == 8
    whole = ScriptedChatModel(["사용자는 요가를 한다."]).complete(HELLO, GenerationOptions(max_new_tokens=64))
    assert not whole.cut and whole.text == "사용자는 요가를 한다."


def test_realistic_fake_wraps_drops_and_fails_like_a_real_model():
    from models.fake import RealisticChatModel

    ideal = "사용자는 서울에 산다.\n사용자는 고양이를 키운다.\n사용자는 요가를 시작했다."
    prompt = [{"role": "user", "content": "이전 기억:\n사용자는 서울에 산다.\n사용자는 고양이를 키운다."}]
    model = RealisticChatModel.all_habits(lambda msgs: ideal, seed=1)
    text = model.complete(prompt, GenerationOptions(max_new_tokens=400)).text
    assert text.startswith("<think>") and "```" in text and "Note:" in text and "1. " in text
    assert len(model.dropped) == 1 and model.dropped[0] in prompt[0]["content"]  # a line it was asked to copy
    assert model.dropped[0] not in text.split("</think>")[1]
    assert model.calls[-1]["finish"] == "stop"
    cut = model.complete(prompt, GenerationOptions(max_new_tokens=30))
    assert cut.cut and model.calls[-1]["finish"] == "length"
    verdicts = RealisticChatModel(lambda msgs: "통과", {"free_verdict": 1.0})
    assert verdicts.complete(HELLO).text != "통과" and "통과" in verdicts.complete(HELLO).text
    with pytest.raises(GenerationError, match="injected"):
        RealisticChatModel(lambda msgs: "통과", {"fail": 1.0}).complete(HELLO)


def test_tiny_llama_through_the_real_loading_path(tiny_llama_dir):
    model = load_chat_model(f"hf:{tiny_llama_dir}")
    assert model.spec == f"hf:{tiny_llama_dir}" and model.context_window == 2048
    pieces = list(model.stream(HELLO, GenerationOptions(max_new_tokens=8)))
    assert all(isinstance(p, str) for p in pieces)
    score = model.score(HELLO, "사용자는 테니스를 쳤다")
    assert score.n_tokens == model.count_tokens("사용자는 테니스를 쳤다") and score.logprob < 0
    assert score.perplexity > 1
    # Deterministic at temperature 0: the same prompt gives the same text.
    options = GenerationOptions(max_new_tokens=6, temperature=0.0)
    assert model.complete(HELLO, options).text == model.complete(HELLO, options).text
    # A random model never says EOS within 6 tokens: the answer is cut, and the backend says so.
    answer = model.complete(HELLO, options)
    assert answer.cut and answer.finish.completion_tokens == 6 and answer.finish.prompt_tokens > 0


def test_tiny_llama_drops_old_turns_to_fit_and_refuses_what_cannot_fit(tiny_llama_dir):
    model = load_chat_model(f"hf:{tiny_llama_dir}")
    long_history = [{"role": "user" if i % 2 == 0 else "assistant", "content": "안녕하세요 " * 60} for i in range(9)]
    assert isinstance(model.complete(long_history, GenerationOptions(max_new_tokens=4)).text, str)
    with pytest.raises(ContextOverflowError, match="shorten"):
        model.complete([{"role": "system", "content": "햇살 " * 600}, *HELLO], GenerationOptions(max_new_tokens=4))


def test_whole_characters_holds_a_trailing_broken_character_and_drops_it_at_the_end():
    from models.base import whole_characters

    assert list(whole_characters(["안녕", "하\ufffd"])) == ["안녕", "하"]  # the cut syllable's bytes: left out
    assert list(whole_characters(["가\ufffd", "\ufffd", "나"])) == ["가", "\ufffd\ufffd나"]  # text followed: kept
    assert list(whole_characters(["\ufffd"])) == [] and list(whole_characters([])) == []


def test_a_tiny_llama_reply_cut_mid_character_ends_before_it(tiny_llama_dir):
    """The random Llama writes byte tokens that are invalid UTF-8 on their own; cut at its token limit between
    the bytes of one character, the reply ends before that character, never in U+FFFD."""
    import torch

    from models.base import drain

    model = load_chat_model(f"hf:{tiny_llama_dir}")
    ids = model._prompt_ids(HELLO, 1000)
    out = model.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    new = out[0, ids.shape[1] :].tolist()
    raw = [model.tokenizer.decode(new[:n], skip_special_tokens=True) for n in range(1, len(new) + 1)]
    cuts = [n for n, text in enumerate(raw, 1) if text.endswith("\ufffd")]
    assert cuts, raw  # the plain decode of some cut ends in a broken character
    for n in cuts[:3]:
        answer = drain(model.stream(HELLO, GenerationOptions(max_new_tokens=n, temperature=0.0)))
        assert answer.cut and answer.text == raw[n - 1].rstrip("\ufffd") and not answer.text.endswith("\ufffd")


def test_openai_replies_cut_mid_character_end_before_it():
    """A server that sends a cut character's bytes as U+FFFD: neither the stream nor the answer ends in it."""
    from models.base import drain

    with FakeOpenAIServer(reply=lambda body: "반가워요 민\ufffd") as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", check=False)
        assert model.complete(HELLO).text == "반가워요 민"
        assert drain(model.stream(HELLO)).text == "반가워요 민"


def test_tiny_llama_reuses_its_kv_cache_for_the_prefix_a_turn_shares_and_answers_the_same(tiny_llama_dir):
    import threading

    reuse = load_chat_model(f"hf:{tiny_llama_dir}")
    fresh = load_chat_model(f"hf:{tiny_llama_dir}")
    fresh.kv_cache.max_tokens = 0  # the same model without reuse
    computed: list[int] = []  # tokens each forward pass computes (the first pass of a call: its whole prompt part)
    reuse.model.register_forward_pre_hook(
        lambda module, args, kwargs: computed.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    options = GenerationOptions(max_new_tokens=6, temperature=0.0)
    system = {"role": "system", "content": "사용자는 테니스를 치다가 손목을 다쳤다. " * 4}
    turns = [system, {"role": "user", "content": "안녕하세요 오늘 기분이 어때요?"}]
    finishes = []
    for said in ["손목은 좀 나았어", "hello world, how are you?"]:
        computed.clear()
        answer = reuse.complete(turns, options)
        finishes.append(answer.finish)
        assert answer.text == fresh.complete(turns, options).text  # greedy: the same with and without reuse
        assert computed[0] == answer.finish.prompt_tokens - (answer.finish.cached_tokens or 0)
        assert all(n == 1 for n in computed[1:])  # then one token per step
        turns += [{"role": "assistant", "content": answer.text}, {"role": "user", "content": said}]
    # The second call reused the first: it computed only what follows the first prompt.
    assert finishes[0].cached_tokens == 0 and finishes[1].cached_tokens == finishes[0].prompt_tokens
    assert 0 < reuse.kv_cache.tokens <= reuse.kv_cache.max_tokens and "KV cache reused" in reuse.description
    # Concurrent sessions each take their own cache (never one shared): all answers equal the fresh model's.
    prompts = [[system, {"role": "user", "content": f"{name} 안녕하세요"}] for name in ("민수", "hello", "기억")]
    want = [fresh.complete(p, options).text for p in prompts]
    got: dict[int, str] = {}
    threads = [
        threading.Thread(target=lambda i=i: got.__setitem__(i, reuse.complete(prompts[i % 3], options).text))
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(6)] == want * 2


def test_unknown_specs_say_what_works():
    with pytest.raises(ModelSpecError, match="hf:<hub id or path>"):
        load_chat_model("gpt4")
    with pytest.raises(ModelSpecError, match="use-multilingual"):
        load_embedder("nope")


def test_missing_local_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match="check the hub id or path"):
        load_chat_model(f"hf:{tmp_path}/no-such-model")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_openai_server_fails_early_with_a_fix(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{_closed_port()}/v1")
    with pytest.raises(ModelUnavailableError, match="OPENAI_BASE_URL"):
        load_chat_model("openai:gpt-4o")


def test_openai_backend_streams_and_retries_429():
    with FakeOpenAIServer(reply=lambda body: "반가워요, 민수 님!", fail_first=2) as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", check=False)
        model.client = model.client.with_options(max_retries=3)
        answer = model.complete(HELLO, GenerationOptions(max_new_tokens=20))
        assert answer.text == "반가워요, 민수 님!" and not answer.cut and answer.finish.completion_tokens > 0
        assert len(server.requests) == 3  # two injected 429s, then success
        assert server.requests[-1]["temperature"] == 0.0 and not server.requests[-1].get("stream")
        assert "".join(model.stream(HELLO)) == "반가워요, 민수 님!" and server.requests[-1]["stream"] is True


def test_openai_backend_reports_answers_cut_at_max_tokens():
    from models.base import drain

    with FakeOpenAIServer(reply=lambda body: "사용자는 올해 초에 요가를 시작했다.") as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", check=False)
        answer = model.complete(HELLO, GenerationOptions(max_new_tokens=8))
        assert answer.cut and answer.text == "사용자는 올해 초" and answer.finish.completion_tokens == 8
        streamed = drain(model.stream(HELLO, GenerationOptions(max_new_tokens=8)))
        assert streamed.cut and streamed.text == "사용자는 올해 초"


@pytest.mark.parametrize("flavor", ["ollama", "llama-server", "bare"])
def test_local_servers_without_a_key_and_with_their_quirks_still_tell_a_cut_answer(flavor):
    """Ollama says "stop" for a cut answer, llama-server adds usage and timings to its stream, a bare server
    has no /v1/models, no finish reason and no usage: a cut answer is known as cut all the same."""
    from models.base import drain

    with FakeOpenAIServer(reply=lambda body: "사용자는 올해 초에 요가를 시작했다.", flavor=flavor) as server:
        model = OpenAIChatModel("local", base_url=server.url, api_key=None)  # no key, and the check passes
        for answer in (
            model.complete(HELLO, GenerationOptions(max_new_tokens=8)),
            drain(model.stream(HELLO, GenerationOptions(max_new_tokens=8))),
        ):
            assert answer.cut and answer.text == "사용자는 올해 초"
        whole = model.complete(HELLO, GenerationOptions(max_new_tokens=64))
        assert not whole.cut and whole.text == "사용자는 올해 초에 요가를 시작했다."
        assert not drain(model.stream(HELLO, GenerationOptions(max_new_tokens=64))).cut


def test_an_openai_stream_that_fails_mid_answer_keeps_what_came_and_says_why():
    """A server that sends an error event mid-stream (vLLM does): the pieces before it, then a GenerationError."""
    with FakeOpenAIServer(reply=lambda body: "반가워요, 민수 님!", fail_mid=3) as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", check=False)
        got: list[str] = []
        with pytest.raises(GenerationError, match="failed mid-answer: injected failure mid-stream") as failed:
            got.extend(model.stream(HELLO))
        assert "".join(got) == "반가워" and failed.value.code == "model_server_failed"


def test_an_openai_stream_with_a_line_that_is_not_json_keeps_what_came_and_says_so():
    with FakeOpenAIServer(reply=lambda body: "반가워요, 민수 님!", garbled_mid=3) as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", check=False)
        got: list[str] = []
        with pytest.raises(GenerationError, match="stream event that is not JSON") as failed:
            got.extend(model.stream(HELLO))
        assert "".join(got) == "반가워" and failed.value.code == "model_server_failed"


def test_openai_backend_gives_up_with_a_clear_error():
    with FakeOpenAIServer(fail_first=10, fail_status=500) as server:
        model = OpenAIChatModel("fake", base_url=server.url, api_key="k", max_retries=1, check=False)
        with pytest.raises(GenerationError, match="answered 500"):
            model.complete(HELLO)
        with pytest.raises(GenerationError, match="answered 500"):
            "".join(model.stream(HELLO))


def test_embedders_return_normalised_rows():
    import numpy as np

    for spec in ("ngram", "use-multilingual"):
        vectors = load_embedder(spec).embed(["사용자는 고양이를 키운다", "hello"])
        assert vectors.dtype == np.float32 and vectors.shape[0] == 2
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
