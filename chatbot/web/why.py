"""The memory tab's "왜?" and its history: a sentence's provenance (memory/provenance.py, opened from its row:
chatbot/web/editing.py), "바뀐 것과 그 이유" (the latest version's changelog, memory/changelog.py, with one button per
dropped sentence to bring it back and "이번 갱신 되돌리기", memory/undo.py) and "버전 기록" (each earlier version
folded with its own changelog). Plain Korean; in a blind user trial nothing names a strategy or an operation.

(The buttons' events: chatbot/web/undo_buttons.py.)
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import gradio as gr

from chatbot.localtime import LocalTime
from chatbot.web.backend import AppContext
from chatbot.web.history import version_label, version_reasons
from chatbot.web.render import md
from chatbot.web.state import UserState
from chatbot.web.view import RESTORE_SLOTS, PageView
from memory.changelog import HEADINGS, Changelog, changelog
from memory.provenance import Why
from memory.store import Version
from memory.undo import update_base

HISTORY_SHOWN = 30  # earlier versions whose changelogs "버전 기록" shows; older ones: their titles and reasons
STEPS = {
    "rewrite": "대화가 끝난 뒤 기억을 통합해 다시 쓰면서 적은 문장",
    "summary": "대화 요약(감정과 원인 정리)에서 그대로 온 문장",
    "operation": "대화 요약의 한 문장을 기억에 반영한 문장",
    "fallback": "안전 모드에서 대화 요약을 덧붙인 문장",
    "user": "사용자가 직접 쓴 문장",
    "import": "가져온 기억",
    "restore": "빠졌다가 사용자가 되살린 문장",
    "revert": "사용자가 이전 버전으로 되돌리면서 돌아온 문장",
}


def render_why(w: Why, local: LocalTime) -> str:
    """Where one sentence came from (the row's "왜?"): its sessions, the user's own words (quoted, with their
    time; no match score), what it continues, the summary line and step it came through (in words: the page never
    names an operation or a strategy; `keem memory why` does), an emotion's words and cause. Times in `local`'s zone
    (KEEM_TIMEZONE: Settings.local_time)."""
    rows = []
    if w.sessions:
        days = dict.fromkeys(f"{local.local(at):%Y-%m-%d}" for at in w.sessions)  # the local dates, in order
        rows.append(f"대화한 날: {', '.join(days)}")
    for q in w.quotes:
        rows.append(f"사용자가 한 말: “{html.escape(q.text)}” ({local.stamp(q.at)})")  # no raw match score
    for old in w.continues:
        rows.append(f"이어 쓴 이전 기억: {html.escape(old)}")
    if w.summary_line:
        rows.append(f"거쳐 온 요약: {html.escape(w.summary_line)}")
    if w.emotion:
        rows.append(
            f"감정: <b>{html.escape(', '.join(w.emotion.emotion))}</b> · 원인: "
            f"<b>{html.escape(w.emotion.cause or '문장에 드러나지 않음')}</b>"
        )
    step = STEPS.get(w.step, w.step) if w.step else "출처를 기록하기 전에 만든 문장"
    rows.append(f"어떻게: {step}" + (f", {local.stamp(w.written_at)}" if w.written_at else ""))
    return f'<p class="why-sources">{"<br>".join(rows)}</p>'


def _entry(e: Any, local: LocalTime) -> str:
    head = f"**{HEADINGS[e.kind]}**"
    if e.kind == "fallback":
        return f"- {head} {md(e.reason)}"
    if e.kind == "rewritten":
        marked = " ".join(f"**{md(part)}**" if changed else md(part) for part, changed in e.changed)
        text = f"{md(e.old or '')} → {marked}"
    elif e.kind == "dropped":
        text = f"~~{md(e.text)}~~"
    else:
        text = md(e.text)
    said = "".join(f"  \n  근거: “{md(q.text)}” ({local.stamp(q.at)})" for q in e.quotes[:2])
    return f"- {head} {text}  \n  {md(e.reason)}{said}"


def changelog_counts(log: Changelog) -> str:
    return " · ".join(f"{HEADINGS[k]} {n}" for k, n in log.counts().items()) or "바뀐 것 없음"


def changelog_lines(log: Changelog, local: LocalTime, reasons: Sequence[str] = ()) -> str:
    """A changelog's body: why the version is as it is (chatbot/web/history.py version_reasons), then its entries."""
    lines = [f"*{md(r)}*  " for r in reasons]
    lines += [_entry(e, local) for e in log.entries if e.kind not in ("kept", "carried")]
    carried = log.of("carried")
    if carried:
        lines.append(f"- **{HEADINGS['carried']}** {len(carried)}문장: {md(carried[0].reason)}")
    kept = log.of("kept")
    if kept:
        lines.append(f"- **{HEADINGS['kept']}** {len(kept)}문장")
    return "\n".join(lines)


def render_changelog(log: Changelog, title: str, local: LocalTime, reasons: Sequence[str] = ()) -> str:
    """ "바뀐 것과 그 이유": one version's changelog under its title, open."""
    return f"#### {title}\n{changelog_counts(log)}\n\n{changelog_lines(log, local, reasons)}"


def render_versions(
    versions: Sequence[Version], logs: Sequence[Changelog | None], show_strategy: bool, local: LocalTime
) -> str:
    """ "버전 기록": each version (newest first) folded under its title and counts, its changelog inside; a version
    given no changelog (older than the HISTORY_SHOWN the tab computes) shows its title and reasons only."""
    blocks = []
    for v, log in zip(reversed(versions), reversed(logs), strict=True):
        title = html.escape(_title(v, local, show_strategy))
        if log is None:
            why = "".join(f" · <i>{html.escape(r)}</i>" for r in version_reasons(v))
            blocks.append(f"<p><b>{title}</b>{why}</p>")
            continue
        body = changelog_lines(log, local, version_reasons(v))
        blocks.append(
            f'<details class="version-entry" id="version-{v.number}"><summary><b>{title}</b> · '
            f"{html.escape(changelog_counts(log))}</summary>\n\n{body}\n\n</details>"
        )
    return "\n\n".join(blocks)


def changes_hint(job: dict[str, Any]) -> str:
    """After the progress line of an update that made a version: where to read what it changed."""
    return " · 바뀐 것과 그 이유는 기억 탭에서 볼 수 있습니다." if job.get("version_id") else ""


def _title(v: Version, local: LocalTime, show_strategy: bool) -> str:
    return f"v{v.number} · {local.stamp(v.created_at)} · {version_label(v, show_strategy)}"


def why_panel(ctx: AppContext, state: UserState, versions: Sequence[Version]) -> PageView:
    """ "바뀐 것과 그 이유" (the latest version's changelog with the undo buttons) and "버전 기록" (every earlier
    version with its own changelog, folded; titles only past HISTORY_SHOWN); what the buttons act on is kept in the
    tab's server-side state."""
    store = ctx.bot.store
    if not versions:
        state.showed_changes()
        return PageView(
            changelog="",
            history="이전 버전이 없습니다.",
            restore=[gr.update(visible=False)] * RESTORE_SLOTS,
            revert=gr.update(visible=False),
        )
    latest, older = versions[-1], versions[:-1]
    known = max(len(versions) - HISTORY_SHOWN - 1, 0)  # the latest and the HISTORY_SHOWN before it get changelogs
    pairs = list(zip([None, *versions], versions, strict=False))
    # in words only: the page names no operation (REPLACE ...) or strategy, trial or not; `keem memory changes` does
    logs = [changelog(store, p, v, blind=True) if i >= known else None for i, (p, v) in enumerate(pairs)]
    local = ctx.bot.settings.local_time  # KEEM_TIMEZONE; the page names no strategy (`keem memory history` does)
    latest_log = logs[-1]
    assert latest_log is not None
    title = _title(latest, local, show_strategy=False)  # as the memory's header names it
    text = render_changelog(latest_log, f"이번 변경 ({title})", local, version_reasons(latest))
    history = render_versions(older, logs[:-1], False, local) if older else "이전 버전이 없습니다."
    if known:
        history += (
            f"\n\n*v{versions[known - 1].number}까지는 제목만 보입니다 (바뀐 것은 최근 {HISTORY_SHOWN}개 버전까지 "
            "보여 줍니다).*"
        )
    drops = restorable(versions, logs)
    state.showed_changes(latest.number, [e.sentence_id for _, e in drops])
    buttons = [
        gr.update(
            visible=True,
            value=f"되살리기: {e.text[:40]}" if n == latest.number else f"되살리기 (v{n}에서 빠짐): {e.text[:36]}",
        )
        for n, e in drops
    ]
    buttons += [gr.update(visible=False)] * (RESTORE_SLOTS - len(drops))
    to = update_base(latest)
    return PageView(
        changelog=text,
        history=history,
        restore=buttons,
        revert=gr.update(visible=to is not None, value=f"이번 갱신 되돌리기 (v{to} 기억으로)" if to else ""),
    )


def restorable(versions: Sequence[Version], logs: Sequence[Changelog | None]) -> list[tuple[int, Any]]:
    """(version number, dropped entry) for each sentence an update dropped that the memory lacks now, the latest
    version's drops first, then earlier ones newest first (so a later session does not put them out of reach),
    each text once; at most RESTORE_SLOTS."""
    current = set(versions[-1].texts)
    found: list[tuple[int, Any]] = []
    for version, log in zip(reversed(versions), reversed(logs), strict=True):
        for entry in log.of("dropped") if log is not None else []:
            if entry.text not in current and all(entry.text != e.text for _, e in found):
                found.append((version.number, entry))
    return found[:RESTORE_SLOTS]
