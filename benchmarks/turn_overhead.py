"""Per-turn overhead outside generation (DB write + query embedding + FAISS search + prompt building)
next to the generation time, with the offline demo model. Prints a table; ratios are from one run.

usage: python benchmarks/turn_overhead.py [--turns 5] [--memory 50] [--max-new-tokens 48] [--model demo]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatbot.bot import Chatbot
from chatbot.settings import Settings
from memory.store import Sentence
from models import GenerationOptions, load_chat_model, load_embedder

TOPICS = [
    "테니스",
    "손목 부상",
    "제주도 여행",
    "회계사 시험",
    "고양이",
    "부산 이사",
    "둘째 딸",
    "카페 창업",
    "마라톤",
    "요리",
]
QUERIES = [
    "손목은 이제 괜찮아",
    "시험 결과 나왔어!",
    "고양이가 아파서 병원 다녀왔어",
    "새 집이 너무 좋아",
    "딸이 걸음마를 뗐어",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--memory", type=int, default=50, help="memory sentences stored for the user")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--model", default="demo")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(db=f"{tmp}/bench.db", reply_max_tokens=args.max_new_tokens)
        model, embedder = load_chat_model(args.model), load_embedder(settings.embedder)
        bot = Chatbot(settings, chat_model=model, embedder=embedder)
        session = bot.start("bench")
        memory = [f"사용자는 {TOPICS[i % len(TOPICS)]}에 관한 일 {i}번을 이야기했다." for i in range(args.memory)]
        bot.engine.commit(
            session.user_id, [Sentence(t) for t in memory], base=None, strategy="import", status="ok", author="import"
        )
        overhead, generation, tokens = [], [], []
        for i in range(args.turns):
            start = time.perf_counter()
            messages = session.prepare(QUERIES[i % len(QUERIES)])
            overhead.append(time.perf_counter() - start)
            start = time.perf_counter()
            reply = model.complete(messages, GenerationOptions(max_new_tokens=args.max_new_tokens)).text
            generation.append(time.perf_counter() - start)
            tokens.append(model.count_tokens(reply))
            session.history.append({"role": "assistant", "content": reply})
    med_o, med_g = statistics.median(overhead), statistics.median(generation)
    print(
        f"model {model.spec}, embedder {embedder.name}, {args.memory} memory sentences, {args.turns} turns, "
        f"max {args.max_new_tokens} new tokens"
    )
    print(f"{'part':<42}{'median ms':>12}{'max ms':>10}")
    print(f"{'overhead (db + embed + search + prompt)':<42}{med_o * 1000:>12.1f}{max(overhead) * 1000:>10.1f}")
    print(f"{'generation':<42}{med_g * 1000:>12.1f}{max(generation) * 1000:>10.1f}")
    print(f"overhead / generation = {med_o / med_g:.3f}; {statistics.mean(tokens):.0f} tokens per reply")


if __name__ == "__main__":
    main()
