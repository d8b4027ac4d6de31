"""An oracle model for evaluation/fixtures/ko_emotions.json: it answers every update stage, the emotion records
step and the opening as a model that knows the fixture would (tests wrap it in models/fake.py's
RealisticChatModel for real models' habits)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from models.base import Message
from models.fake import section, stage_of

FIXTURE = Path(__file__).resolve().parents[1] / "evaluation" / "fixtures" / "ko_emotions.json"
STATUS = {"ongoing": "진행 중", "resolved": "해소", "past": "지난 일"}


def fixture_users() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["users"]


class EmotionOracle:
    def __init__(self, user: dict[str, Any]):
        self.turns = {t["text"]: t for s in user["sessions"] for t in s["turns"]}
        self.by_line = {line: t for t in self.turns.values() for line in (t["summary"], t.get("felt")) if line}

    def _said(self, lines: list[str]) -> list[dict[str, Any]]:
        said = [line[4:].strip() for line in lines if line.startswith("사용자:")]
        return [self.turns[t] for t in said if t in self.turns]

    def _replaces(self, new: str, old: str) -> bool:
        turn, gone = self.by_line.get(new), self.by_line.get(old)
        return bool(turn and gone and turn.get("replaces") in (gone["summary"], gone.get("felt")))

    def __call__(self, messages: list[Message]) -> str:
        system, prompt = messages[0]["content"], messages[-1]["content"]
        if "이번 대화는 당신이 먼저 시작합니다" in system:  # the opening; two questions, as chatty models write
            cause = re.search(r"원인: ([^,)]+)", system)
            return f"안녕! 지난번에 말한 {cause.group(1) if cause else '그 일'}은 어떻게 됐어? 요즘은 좀 어때?"
        stage = stage_of(prompt)
        if stage == "summarize":
            return "\n".join(t["summary"] for t in self._said(section(prompt, "\n대화 (", "요약:")))
        if stage == "reflect":
            lines = section(prompt, "\n요약:", "답:")
            return "\n".join(self.by_line[x].get("felt") or x if x in self.by_line else x for x in lines)
        if stage == "update":
            previous, summary = (
                section(prompt, "\n이전 기억:", "이번 요약:"),
                section(prompt, "\n이번 요약:", "새 기억:"),
            )
            kept = [p for p in previous if not any(self._replaces(s, p) for s in summary)]
            return "\n".join(kept + [s for s in summary if s not in kept])
        if stage == "verify":
            return "통과"
        if stage == "guard":
            out = []
            for n, line in enumerate(section(prompt, "\n질문:", "답:"), 1):
                old, _, new = line.partition(". A: ")[2].partition(" / B: ")
                out.append(f"{n}: {'예' if self._replaces(new, old) else '아니오'}")
            return "\n".join(out)
        if stage == "operations":
            memory = [re.sub(r"^\d+\.\s*", "", x) for x in section(prompt, "\n기억:", "새 문장:")]
            sentence = prompt.rsplit("새 문장:", 1)[1].split("\n")[0].strip()
            hit = next((n for n, m in enumerate(memory, 1) if self._replaces(sentence, m)), None)
            return f"REPLACE {hit}" if hit else "APPEND"
        if stage == "emotions":
            return self.records(prompt)
        return "그렇구나!"

    def records(self, prompt: str) -> str:
        shown = section(prompt, "지금까지의 기록:", "\n새 기억:")
        refs = {line.split("|")[2].strip(): line.split("|")[0].strip() for line in shown if line.startswith("R")}
        memory = [re.sub(r"^\d+\.\s*", "", x) for x in section(prompt, "\n새 기억:", "\n이번 대화:")]
        lines = []
        for turn in self._said(section(prompt, "\n이번 대화:", "답:")):
            r = turn.get("record")
            if not r:
                continue
            number = next((str(i) for i, m in enumerate(memory, 1) if m in (turn["summary"], turn.get("felt"))), "-")
            ref = refs.get(r["cause"], "새")
            lines.append(
                f"{ref} | {r['emotion']} | {r['cause']} | {STATUS[r['status']]} | {r.get('due', '-')} | {number} | "
                f"{turn['text']}"
            )
        return "\n".join(lines) or "없음"
