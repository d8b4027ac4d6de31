"""Does a chat slow down as it goes on? A 20-turn Korean session over 30 memory sentences, in one run:

- prompt tokens each turn shares with the previous turn's prompt (the prompt layout a server can cache, goal >= 90%
  from turn 2), and the tokens our KV reuse served;
- time to first token at turns 1, 10 and 20 through the transformers backend (the demo model), with KV reuse and
  without it (the same prompt, the same model; goal: turn 20 within 1.3x of turn 1 with reuse);
- the same prompts through a loopback `openai:` server that charges for every prompt token it has not cached
  (`--ms-per-token`), with its prefix cache and without, to show what a caching server (vLLM, llama.cpp, Ollama)
  gains from the layout.

usage: python benchmarks/chat_latency.py [--turns 20] [--memory 30] [--max-new-tokens 8] [--embedder auto]
                                        [--token-budget 600]

The 30 sentences take 1,818 of the demo model's tokens, over the default KEEM_TOKEN_BUDGET (600): the system prompt
holds the selection pinned for the session and notes bring the rest as the messages need them. `--token-budget 2000`
pins the whole memory instead: what each layout costs at turn 1 and saves later is in the last lines.

Time to first token is the time of a call for one new token (prompt in, one token out); the reply that goes into
the history is a second call, served from the cache the first one left.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from memory.store import Sentence
from models import GenerationOptions, load_chat_model, load_embedder
from models.base import ChatModel, Message, estimate_tokens
from models.hf import TransformersChatModel, chat_prompt, shared_prefix, token_ids
from models.openai_backend import OpenAIChatModel
from tests.fake_openai import FakeOpenAIServer

MEMORY = [
    "사용자는 지난달에 테니스를 치다가 손목을 다쳐 보호대를 차고 있다.",
    "사용자는 고양이 두 마리(나비, 호두)를 키운다.",
    "사용자는 다음 달에 가족과 제주도 여행을 계획하고 있다.",
    "사용자의 언니는 부산에 살고 조카가 둘 있다.",
    "사용자는 회사에서 마케팅 팀장으로 일한다.",
    "사용자는 매운 음식을 좋아하지만 위가 약하다.",
    "사용자는 요즘 퇴근 후 피아노를 배우고 있다.",
    "사용자는 작년 가을에 서울 마포구로 이사했다.",
    "사용자는 회계사 시험을 준비하다가 그만둔 적이 있다.",
    "사용자의 아버지는 올봄에 무릎 수술을 받았다.",
    "사용자는 주말마다 한강에서 달리기를 한다.",
    "사용자는 커피를 하루에 세 잔 마신다.",
    "사용자는 최근 팀원과의 갈등 때문에 스트레스를 받고 있다.",
    "사용자는 대학 때 밴드에서 베이스를 쳤다.",
    "사용자는 겨울이 되면 우울해지는 편이라고 했다.",
    "사용자는 친구 결혼식 축가를 부탁받아 긴장하고 있다.",
    "사용자는 운전면허를 따려고 학원에 등록했다.",
    "사용자는 요리를 잘 못하지만 된장찌개는 자신 있다.",
    "사용자는 어릴 때 강아지를 잃어버린 기억 때문에 슬퍼한다.",
    "사용자는 영어 회화 스터디에 나가고 있다.",
    "사용자는 허리가 안 좋아서 필라테스를 시작했다.",
    "사용자의 남자친구는 대전에서 일해서 주말에만 만난다.",
    "사용자는 내년에 대학원 진학을 고민하고 있다.",
    "사용자는 공포 영화를 싫어하고 로맨스 영화를 좋아한다.",
    "사용자는 할머니 댁이 있는 전주에 자주 간다.",
    "사용자는 지난주 건강검진에서 빈혈 소견을 받았다.",
    "사용자는 식물 키우기를 좋아해서 몬스테라를 키운다.",
    "사용자는 월급의 절반을 저축하고 있다.",
    "사용자는 새벽에 자주 깨서 잠을 설친다.",
    "사용자는 동생과 사이가 좋아 자주 통화한다.",
]
TURNS = [
    "안녕, 오늘 좀 피곤하다.",
    "손목은 이제 많이 나았어. 보호대도 풀었어.",
    "나비가 어제 밤새 울어서 잠을 못 잤어.",
    "제주도 여행 숙소를 아직 못 정했어.",
    "회사에서 또 팀원이랑 부딪혔어.",
    "퇴근하고 피아노 학원 갔는데 손가락이 안 움직여.",
    "아빠 무릎은 재활 잘 하고 계셔.",
    "이번 주말에도 한강 뛰러 갈 거야.",
    "커피를 좀 줄여야 할 것 같아.",
    "친구 결혼식 축가 연습을 시작했어.",
    "운전 연습하다가 학원 선생님한테 혼났어.",
    "오늘 된장찌개 끓여 먹었어, 맛있었어.",
    "영어 스터디에서 발표했는데 떨렸어.",
    "필라테스 하니까 허리가 좀 나아진 것 같아.",
    "남자친구가 이번 주말에 서울 온대.",
    "대학원 원서 마감이 다음 달이야.",
    "어제 로맨스 영화 봤는데 좋았어.",
    "빈혈 때문에 철분제 먹기 시작했어.",
    "몬스테라에 새 잎이 났어!",
    "동생이랑 통화하다가 한 시간이 지났어.",
]


class CachingServer(FakeOpenAIServer):
    """A loopback OpenAI-compatible server that charges `ms_per_token` for each prompt token its prefix cache
    does not hold (every token when `cache` is False): what vLLM's prefix caching or llama.cpp's cache_prompt do."""

    def __init__(self, ms_per_token: float, cache: bool):
        self.ms_per_token, self.cache = ms_per_token, cache
        self.seen: list[list[str]] = []
        self.charged: list[int] = []
        self.guard = threading.Lock()
        super().__init__(reply=self.answer)

    def answer(self, body: dict) -> str:
        text = "".join(f"<{m['role']}>{m.get('content', '')}" for m in body["messages"])
        pieces = [text[i : i + 2] for i in range(0, len(text), 2)]  # stand-in tokens; charged in estimated tokens
        with self.guard:
            shared = max((shared_prefix(p, pieces) for p in self.seen), default=0) if self.cache else 0
            self.seen = [*self.seen[-7:], pieces]
        uncached = estimate_tokens(text[shared * 2 :])
        self.charged.append(uncached)
        time.sleep(uncached * self.ms_per_token / 1000)
        return "그랬구나, 오늘 이야기해 줘서 고마워."


def first_token(model: ChatModel, messages: list[Message], max_new_tokens: int) -> tuple[float, str, int | None]:
    """(seconds to the first text piece, the whole reply, prompt tokens a cache served). With max_new_tokens=1
    the whole call is the time to the first token (a streamer holds text back until a word ends)."""
    started, first, pieces = time.perf_counter(), None, []
    stream = model.stream(messages, GenerationOptions(max_new_tokens=max_new_tokens, temperature=0.0))
    while True:
        try:
            piece = next(stream)
        except StopIteration as done:
            cached = done.value.cached_tokens if done.value else None
            break
        if first is None:
            first = time.perf_counter() - started
        pieces.append(piece)
    return (first if first is not None else time.perf_counter() - started), "".join(pieces), cached


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--memory", type=int, default=30, help="memory sentences (at most 30)")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="reply length (replies only feed the history)")
    parser.add_argument("--model", default="demo", help="an hf: model or demo")
    parser.add_argument("--embedder", default="auto")
    parser.add_argument("--ms-per-token", type=float, default=1.0, help="the loopback server's price of a token")
    parser.add_argument(
        "--token-budget",
        type=int,
        default=Settings.token_budget,
        help="KEEM_TOKEN_BUDGET: the whole memory is pinned in the system prompt when it fits (default %(default)s)",
    )
    args = parser.parse_args()
    marks = sorted({1, (args.turns + 1) // 2, args.turns})
    with tempfile.TemporaryDirectory() as tmp:
        model = load_chat_model(args.model)
        assert isinstance(model, TransformersChatModel), "the KV reuse measured here is the transformers backend's"
        settings = Settings(db=f"{tmp}/bench.db", reply_max_tokens=args.max_new_tokens, token_budget=args.token_budget)
        bot = Chatbot(settings, chat_model=model, embedder=load_embedder(args.embedder))
        user_id = bot.start("bench").user_id
        bot.engine.commit(
            user_id,
            [Sentence(t) for t in MEMORY[: args.memory]],
            base=None,
            strategy="import",
            status="ok",
            author="import",
        )
        session = bot.start("bench")
        servers = {True: CachingServer(args.ms_per_token, True), False: CachingServer(args.ms_per_token, False)}
        rows: list[dict[str, object]] = []
        previous: list[int] = []
        with servers[True], servers[False]:
            remote = {
                on: OpenAIChatModel("fake", base_url=server.url, api_key="x", check=False)
                for on, server in servers.items()
            }
            for turn in range(1, args.turns + 1):
                messages = session.prepare(TURNS[(turn - 1) % len(TURNS)])
                ids = token_ids(model.tokenizer, chat_prompt(model.tokenizer, messages))
                row: dict[str, object] = {
                    "turn": turn,
                    "prompt": len(ids),
                    "shared": shared_prefix(previous, ids) / len(ids) if previous else None,
                    "pinned": len(session.pinned[1]) if session.pinned else 0,
                    "noted": len(session.notes.get(len(session.history) - 1, [])),
                }
                previous = ids
                if turn in marks:  # the same prompt without reuse, before the reuse call (which must not see it)
                    kept, model.kv_cache.max_tokens = model.kv_cache.max_tokens, 0
                    row["ttft_fresh"] = first_token(model, messages, 1)[0]
                    model.kv_cache.max_tokens = kept
                row["ttft_reuse"], _, row["cached"] = first_token(model, messages, 1)
                reply = first_token(model, messages, args.max_new_tokens)[1]  # served from the call just made
                for on in (True, False):
                    row[f"remote_{on}"] = first_token(remote[on], messages, args.max_new_tokens)[0]
                    row[f"charged_{on}"] = servers[on].charged[-1]
                session.history.append({"role": "assistant", "content": reply.replace("\ufffd", "").strip() or "…"})
                rows.append(row)
                print(f"turn {turn}: {row}", file=sys.stderr)
    report(rows, marks, args)
    return 0


def report(rows: list[dict[str, object]], marks: list[int], args: argparse.Namespace) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nmodel={args.model} embedder={args.embedder} turns={args.turns} memory={args.memory} "
        f"reply={args.max_new_tokens} tokens token budget={args.token_budget} "
        f"server={args.ms_per_token} ms/uncached token "
        f"cpus={os.cpu_count()} load average={load:.1f}"
    )
    print(
        "\nturn | prompt tokens | memory pinned + noted | shared with previous | KV reuse served | TTFT reuse | "
        "TTFT no reuse | server cached: uncached, TTFT | server uncached: charged, TTFT"
    )
    for r in rows:
        shared = f"{r['shared']:.1%}" if r["shared"] is not None else "-"
        fresh = f"{r['ttft_fresh']:.2f} s" if "ttft_fresh" in r else ""
        print(
            f"{r['turn']:>4} | {r['prompt']:>13} | {r['pinned']:>12} + {r['noted']:<6} | {shared:>20} | "
            f"{r['cached'] or 0:>15} | {r['ttft_reuse']:.2f} s"
            f" | {fresh:>13} | {r['charged_True']:>6}, {r['remote_True']:.2f} s | {r['charged_False']:>6}, "
            f"{r['remote_False']:.2f} s"
        )
    later = [float(r["shared"]) for r in rows[1:] if r["shared"] is not None]  # type: ignore[arg-type]
    by = {int(r["turn"]): r for r in rows}  # type: ignore[call-overload]
    first, last = by[marks[0]], by[marks[-1]]
    print(
        f"\nshared from turn 2: min {min(later, default=0):.1%}, median {sorted(later)[len(later) // 2]:.1%} "
        "(goal >= 90%)"
        if later
        else ""
    )
    computed = [int(r["prompt"]) - int(r["cached"] or 0) for r in rows]  # type: ignore[call-overload]
    print(
        f"prompt tokens computed with KV reuse: turn 1 {computed[0]:,}, turns 2-{len(rows)} "
        f"{sum(computed[1:]):,} ({max(computed[1:], default=0):,} at most in one turn), {sum(computed):,} in all"
    )
    for name, key in (("with reuse", "ttft_reuse"), ("without reuse", "ttft_fresh")):
        print(
            f"TTFT {name}: "
            + ", ".join(f"turn {m} {float(by[m][key]):.2f} s" for m in marks)  # type: ignore[arg-type]
            + f"; turn {marks[-1]} / turn {marks[0]} = {float(last[key]) / float(first[key]):.2f}"  # type: ignore[arg-type]
            + (" (goal <= 1.3)" if key == "ttft_reuse" else "")
        )
    for on, name in ((True, "caching server"), (False, "server without a cache")):
        charged = sum(int(r[f"charged_{on}"]) for r in rows)  # type: ignore[call-overload]
        print(
            f"{name}: {charged:,} prompt tokens charged in all; TTFT turn {marks[0]} "
            f"{float(first[f'remote_{on}']):.2f} s, turn {marks[-1]} {float(last[f'remote_{on}']):.2f} s"  # type: ignore[arg-type]
        )


if __name__ == "__main__":
    sys.exit(main())
