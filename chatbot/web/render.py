"""What the browser app shows: Korean texts, escaped Markdown, the memory's header and sentences, update progress
(error messages: messages.py; the history and changelogs: why.py)."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from chatbot.bot import Chatbot
from chatbot.localtime import LocalTime
from chatbot.web.history import version_label
from chatbot.web.messages import DEMO_INFO, MODEL_INFO, korean_stored_error
from memory.dates import as_read
from memory.emotion_words import is_emotion
from memory.emotions import is_plan
from memory.engine import Hit
from memory.store import Version
from models.base import ChatModel

STAGES = {
    "queued": "대기 중",
    "summarizing": "대화 요약 중",
    "reflecting": "감정과 원인 정리 중",
    "updating": "기억 통합 중",
    "verifying": "새 기억 검증 중",
    "cues": "검색 단서 쓰는 중",
    "recompute": "그 사이 바뀐 기억 위에서 다시 계산하는 중",
    "ok": "완료",
    "fallback": (
        "완료 (안전 모드: 이전 기억은 그대로 두고 이번 대화를 덧붙였습니다. 이유는 기억 탭의 '바뀐 것과 그 이유'에)"
    ),
    "skipped": "나눈 말이 없어 기억은 그대로입니다",
    "failed": "실패",
}
# ":" too: marked (Gradio's Markdown) turns a bare http:// or ftp:// address into a link whose text is the raw
# source, so the backslashes escaping its "." and "_" would show ("127\.0\.0\.1"); "http\://" is no link
MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>:])")
ADDRESS = re.compile(r"(\s+at)?\s*\b[a-z][a-z0-9+.-]*://[^\s;,)]*", re.I)  # a URL, and the " at " before it
IMAGES = re.compile(r"!\[([^\]]*)\]\([^)]*\)|<\s*img\b[^>]*>?", re.I)


# -- text helpers ----------------------------------------------------------------------------------
def md(text: str) -> str:
    """Escape user- or model-written text for Markdown (no links, images, HTML or headings sneak in; a bare
    address such as http://127.0.0.1:8000 shows as plain text, not as a link spelled with backslashes)."""
    return MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False)).replace("\n", " ")


def shown(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as displayed: Markdown stays, but no image loads (a reply cannot make the browser fetch URLs)."""
    return {
        **message,
        "content": IMAGES.sub(
            lambda m: f"[그림 생략{': ' + m.group(1) if m.group(1) else ''}]", str(message["content"])
        ),
    }


def memory_header(version: Version | None, local: LocalTime) -> str:
    """The current memory's header: its version, its time in `local`'s zone (KEEM_TIMEZONE) with the zone named,
    who made it (named as the history names it: chatbot/web/history.py version_label) and its size."""
    if version is None:
        return "아직 기억이 없습니다. 대화를 나누고 **대화 끝내기**를 누르면 첫 기억이 만들어집니다."
    return (
        f"**현재 기억 v{version.number}** · {local.stamp(version.created_at)} · "
        f"{version_label(version, show_strategy=False)} · {len(version.sentences)}문장"
    )


def render_sentences(version: Version, today: date) -> list[str]:
    """Each sentence of `version` as its row shows it: numbered, an emotion-and-cause sentence marked, how the chat
    reads its times `today` where that differs ("오늘 기준: 2026년 12월 8일(사흘 전)에 시험이 있었다"), its search
    cues under it."""
    recorded = {r.sentence for r in version.records if not is_plan(r)}  # the records' feelings, then the heuristic
    lines = []
    for i, s in enumerate(version.sentences, 1):
        mark = " **〔감정·원인〕**" if s.text in recorded or is_emotion(s.text) else ""
        read = f"  \n*오늘 기준: {md(r)}*" if (r := as_read(s.text, today)) else ""
        cues = f"  \n*검색 단서: {md(s.cues)}*" if s.cues else ""
        lines.append(f"{i}\\. {md(s.text)}{mark}{read}{cues}")
    return lines


def technical(detail: str | None) -> str:
    """An error's technical line (English, from the log), folded away under "기술 정보"; empty when there is none."""
    if not detail:
        return ""
    return f"\n\n<details><summary>기술 정보</summary>\n\n{md(without_addresses(detail[:500]))}\n\n</details>\n"


def render_hits(hits: list[Hit]) -> str:
    if not hits:
        return "이번 답변에는 참고한 기억이 없어요."
    return "\n".join(f"- {md(h.text)}" for h in hits)  # the labelled view of a reply's memory: chatbot/web/used.py


def without_addresses(text: str) -> str:
    """`text` with no server address in it ("korean at http://10.0.0.5:8000/v1" -> "korean"): visitors never see
    where the model servers are (the operator has them in `keem chat`'s log and settings)."""
    return " ".join(ADDRESS.sub("", text).split())


def model_name(model: ChatModel) -> str:
    """A model as the model info names it, in Korean: its name and where it runs (a local server `auto` found, an
    OpenAI-compatible server, this computer); never the server's address."""
    kind, _, name = model.spec.partition(":")
    if model.spec == "demo":
        return MODEL_INFO["demo"]
    if kind == "openai" and model.found_on:
        return MODEL_INFO["found"].format(model=name, server=model.found_on)
    if kind in ("openai", "hf"):
        return MODEL_INFO[kind].format(model=without_addresses(name))
    return MODEL_INFO["other"].format(model=without_addresses(model.spec))


def model_banner(bot: Chatbot) -> str:
    """Which chat model, update model and embedder are loaded (in Korean, no server addresses); with the demo model,
    what it cannot do (the chat tab's note says what works anyway: chatbot/web/messages.py DEMO_NOTE)."""
    chat, update = bot.chat_model, bot.update_model
    text = f"**채팅 모델** {md(model_name(chat))} · **기억 갱신 모델** {md(model_name(update))} · **임베더** " + md(
        bot.engine.embedder.name
    )
    if "demo" in (chat.spec, update.spec):
        text += f"\n\n**안내** {md(DEMO_INFO)}"
    return text


def sentence(text: str) -> str:
    """A Korean message as a sentence of a longer line: ending with its full stop (messages mostly have one)."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def stage_text(job: dict[str, Any]) -> tuple[str, bool]:
    """(Korean progress line, whether the job is finished for now)."""
    stage = job["stage"] or "queued"
    if job["status"] == "done":
        return f"기억 갱신: {STAGES.get(stage, stage)}", True
    if stage == "failed" or job["status"] == "failed":
        reason = sentence(korean_stored_error(job.get("last_error")))
        retry = " 잠시 뒤 다시 시도합니다." if job["status"] == "pending" and "다시" not in reason else ""
        kept = "" if "이전 기억은 그대로" in reason else " 이전 기억은 그대로입니다."
        return f"기억 갱신 실패: {reason}{retry}{kept}{technical(job.get('last_error'))}", True
    return f"기억 갱신: {STAGES.get(stage, stage)} …", False


def render_jobs(jobs: list[dict[str, Any]], local: LocalTime) -> str:
    """This user's updates that have not become memory yet (waiting, running, or failed with their error), so a
    failure from an earlier session stays visible; empty when every update is done. No strategy names: in a blind
    trial a participant must not learn theirs."""
    lines = []
    for job in jobs:
        when = local.stamp(job.get("created_at"))
        if job["status"] == "failed":
            reason = sentence(korean_stored_error(job.get("last_error")))
            lines.append(
                f"- ⚠️ {when}에 끝낸 대화의 기억 갱신이 {job['attempts']}번 시도 끝에 실패했습니다. {reason} "
                "이전 기억은 그대로이고 대화 기록도 남아 있습니다. 아래 **실패한 갱신 다시 시도**를 누르거나, "
                f"앱이 다시 시작될 때 다시 시도합니다.{technical(job.get('last_error'))}"
            )
        elif job["status"] == "running":
            lines.append(
                f"- ⏳ {when}에 끝낸 대화의 기억을 갱신하는 중입니다 ({STAGES.get(job['stage'], job['stage'])})."
            )
        else:
            retry = (
                f" 앞선 시도가 실패했습니다. {sentence(korean_stored_error(job.get('last_error')))}"
                f"{technical(job.get('last_error'))}"
                if job["attempts"]
                else ""
            )
            lines.append(f"- ⏳ {when}에 끝낸 대화의 기억 갱신이 기다리는 중입니다.{retry}")
    return ("**아직 기억에 반영되지 않은 대화**\n\n" + "\n".join(lines)) if lines else ""
