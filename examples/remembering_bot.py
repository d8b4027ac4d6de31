"""기억하는 챗봇: KEEM chat의 HTTP API로 대화하고, 끝나면 기억을 새로 씁니다 (docs/api.md).

keem chat &                                   # the app, with its API under /v1
export KEEM_TOKEN=$(keem token create --user 민수)
python examples/remembering_bot.py            # type messages; Ctrl-D ends the conversation
"""

import os
import sys
import uuid

from openai import OpenAI

url = os.environ.get("KEEM_URL", "http://127.0.0.1:7860/v1")
bot = OpenAI(base_url=url, api_key=os.environ["KEEM_TOKEN"])
history = []  # the client may resend everything: the server stores only the new message
for line in sys.stdin:
    history.append({"role": "user", "content": line.strip()})
    reply, key = "", str(uuid.uuid4())  # the client's retries resend it: the message is stored once
    for chunk in bot.chat.completions.create(
        model="keem", messages=history, stream=True, extra_headers={"Idempotency-Key": key}
    ):
        piece = (chunk.choices[0].delta.content or "") if chunk.choices else ""
        print(piece, end="", flush=True)
        reply += piece
    print()
    history.append({"role": "assistant", "content": reply})
ended = bot.post("/sessions/end", cast_to=dict)  # 다음 대화는 새로 쓴 기억에서 시작합니다
print(f"대화를 마쳤습니다. 기억을 새로 쓰는 중입니다 (job {ended['job_id']}).")
