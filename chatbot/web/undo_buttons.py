"""The memory tab's undo buttons (되살리기 on a dropped sentence, 되돌리기 on an update): each writes a new version by
the user (memory/undo.py), then shows the memory tab again (chatbot/web/memory_tab.py); what each sentence and update
says lives in chatbot/web/why.py.

Every undo re-checks who the tab acts for (AppContext.gone), takes the sentence ids and the version it acted on
from the tab's own server-side state (never from the page), and commits through compare-and-swap: a restore on
top of the latest memory (an addition), a revert on the version the tab showed (a change made meanwhile is kept
or the revert is refused and the tab reloads).
"""

from __future__ import annotations

from chatbot.web import toasts
from chatbot.web.backend import AppContext, for_user
from chatbot.web.memory_tab import panel
from chatbot.web.messages import korean_error
from chatbot.web.state import UserState
from chatbot.web.view import PageView
from memory.undo import dropped_sentence, restore, revert, update_base
from memory.words import particle
from models.errors import InputError, MemoryChangedError


class WhyTab:
    """The undo events of the memory tab; each takes the tab's UserState, where its panel kept what it showed."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def _panel(self, state: UserState) -> PageView:
        return panel(self.ctx, state)

    @for_user()
    def restore(self, slot: int, state: UserState) -> PageView:
        """Bring back the dropped sentence the slot showed: a new version by the user on the latest memory."""
        drops = state.shown_changes.get("drops") or []
        if not 0 <= slot < len(drops):
            raise InputError("no such dropped sentence on the page", code="restore_unknown_sentence")
        engine = self.ctx.bot.engine
        try:
            sentence = dropped_sentence(engine, state.user_id, drops[slot])  # refused unless it is this user's
            version = restore(engine, state.user_id, sentence)
        except InputError as exc:  # another tab brought it back meanwhile: show what is there now
            toasts.warning(korean_error(exc))
            return self._panel(state)
        toasts.info(f"문장을 되살려 새 기억 버전 {particle(f'v{version.number}', '을')} 저장했습니다.")
        return self._panel(state)

    @for_user()
    def revert(self, state: UserState) -> PageView:
        """ "이번 갱신 되돌리기": a new version equal to the one before the update the tab showed."""
        shown = state.shown_changes.get("version")
        if not isinstance(shown, int):
            raise InputError("nothing to revert", code="revert_nothing", latest=0)
        to = update_base(self.ctx.bot.store.versions.get(state.user_id, shown))
        if to is None:
            raise InputError("nothing to revert", code="revert_nothing", latest=shown)
        try:
            version = revert(self.ctx.bot.engine, state.user_id, to, base=shown)
        except MemoryChangedError as exc:
            toasts.warning(korean_error(exc))
            return self._panel(state)
        made = particle(f"v{version.number}", "을")
        toasts.info(f"갱신을 되돌려 {particle(f'v{to}', '과')} 같은 새 기억 버전 {made} 저장했습니다.")
        return self._panel(state)
