"""내 모델이 대답하고, 기억은 KEEM chat이: your own model answers, KEEM chat keeps the memory (docs/api.md).

keem chat &                                   # the app, with its API under /v1
export KEEM_TOKEN=$(keem token create --user 민수)
OPENAI_BASE_URL=http://127.0.0.1:11434/v1 MODEL=exaone3.5:7.8b python examples/own_model_bot.py
"""

import os
import sys
import uuid

import httpx
from openai import OpenAI

keem = httpx.Client(
    base_url=os.environ.get("KEEM_URL", "http://127.0.0.1:7860/v1"),
    headers={"Authorization": f"Bearer {os.environ['KEEM_TOKEN']}"},
    timeout=60,
)
model = OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "none"))  # your model's server: OPENAI_BASE_URL


def store(role: str, text: str) -> dict:
    """One turn into the user's conversation at KEEM; a retry with the same key stores it once."""
    r = keem.post(
        "/sessions/messages",
        json={"messages": [{"role": role, "content": text}]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    r.raise_for_status()
    return r.json()


for line in sys.stdin:
    if not line.strip():
        continue
    prompt = store("user", line.strip())["prompt"]  # the memory the reply needs, in KEEM's own chat prompt
    reply = model.chat.completions.create(model=os.environ.get("MODEL", "keem"), messages=prompt)
    text = reply.choices[0].message.content or ""
    print(text, flush=True)
    if text.strip():
        store("assistant", text)
ended = keem.post("/sessions/end").json()  # 대화가 끝나면 KEEM이 기억을 새로 씁니다
print(f"대화를 마쳤습니다. 기억을 새로 쓰는 중입니다 (job {ended['job_id']}).")
