"""The memory tab's handlers: the panel (updates not yet in memory, the one list of the current memory, the
changelog and the history, the retry button), the update's progress, retrying failed updates, editing / adding /
deleting a sentence, erasing one completely ("완전히 지우기"), and forgetting the user. A sentence's row
(chatbot/web/editing.py) names it as "version:index" of the list it showed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from chatbot import edits
from chatbot.web import toasts
from chatbot.web.backend import AppContext, for_user
from chatbot.web.emotions import render_timeline
from chatbot.web.memory_list import memory_list
from chatbot.web.messages import korean_error
from chatbot.web.render import render_jobs, stage_text
from chatbot.web.state import UserState
from chatbot.web.view import PageView, signed_out
from chatbot.web.why import changes_hint, why_panel
from memory.provenance import explain_all
from memory.store import Version
from models.errors import InputError, MemoryChangedError


def panel(ctx: AppContext, state: UserState) -> PageView:
    """The memory tab: updates not yet in memory; the current memory, each sentence once with its provenance; the
    changelog and the history; the retry button, shown while an update of this user's has failed (for good, or
    waiting in its backoff)."""
    store = ctx.bot.store
    versions = store.versions.of_user(state.user_id)
    latest = versions[-1] if versions else None
    waiting = store.queue.jobs(state.user_id, ("pending", "running", "failed"))
    local = ctx.bot.settings.local_time  # KEEM_TIMEZONE: every time shown, the zone named
    whys = explain_all(store, latest) if latest else []
    return PageView(
        jobs=render_jobs(waiting, local),
        memory=memory_list(latest, whys, local),
        retry=gr.update(visible=any(store.queue.retryable(j) for j in waiting)),
        emotions=render_timeline(list(latest.records) if latest else [], not ctx.bot.update_model.runs_to_budget),
    ) | why_panel(ctx, state, versions)


class MemoryTab:
    """The memory tab's events; each takes the tab's server-side UserState."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def panel(self, state: UserState) -> PageView:
        return panel(self.ctx, state)

    def followed(self, state: UserState | None) -> dict[str, Any] | None:
        """The update job the tab follows, as stored now (None: none, or it is gone)."""
        if state is None or state.job_id is None:
            return None
        try:
            return self.ctx.bot.store.queue.get(state.job_id)
        except InputError:
            return None

    @for_user(PageView)
    def poll(self, state: UserState, job: dict[str, Any] | None = None) -> PageView:
        """Progress of this tab's update job (Flow.watch reads it once a second, `job` as `followed` just read it);
        refreshes the memory panel when it finishes, and then the tab follows no job any more (`state.job_id` is
        None)."""
        if state.job_id is None:
            return PageView()
        if job is None or job["id"] != state.job_id:
            job = self.followed(state)
        if job is None:
            state.job_done()
            return PageView(progress="")
        if job["user_id"] != state.user_id:  # cannot happen: job ids come from this state only
            state.job_done()
            return PageView(progress="")
        text, finished = stage_text(job)
        if not finished:
            return PageView(progress=text)
        state.job_done()
        return PageView(progress=text + changes_hint(job)) | self.panel(state)

    @for_user()
    def retry_failed(self, state: UserState) -> PageView:
        """Run this user's failed updates now (failed for good or waiting in a backoff); the progress line then follows
        the newest one (Flow.watch, chained after this event)."""
        ids = self.ctx.bot.store.queue.retry(user_id=state.user_id)
        if not ids:
            return PageView(progress="다시 시도할 실패한 갱신이 없습니다.") | self.panel(state)
        self.ctx.worker.notify()
        state.follow(ids[-1])
        return PageView(progress=f"실패한 기억 갱신 {len(ids)}개를 다시 시도합니다 …") | self.panel(state)

    def _pick(self, state: UserState, pick: str | None) -> tuple[Version, int]:
        """The version the tab showed (the pick names it) and the sentence's place in it: the base of the edit."""
        if not pick or ":" not in pick:
            raise InputError("pick the sentence to change first", code="sentence_not_picked")
        number, _, index = pick.partition(":")
        if not (number.isdigit() and index.isdigit()):
            raise InputError("pick the sentence from the list", code="sentence_not_in_list")
        try:
            shown: Version | None = self.ctx.bot.store.versions.get(state.user_id, int(number))
        except InputError:
            shown = None
        if shown is None or not 0 <= int(index) < len(shown.sentences):
            raise InputError("the memory changed meanwhile; pick from the list again", code="list_changed")
        return shown, int(index)

    def _commit(self, state: UserState, change: Callable[[], Version], done: PageView | None = None) -> PageView:
        """Store the user's own version (chatbot/edits.py: made on the version the tab showed); the panel shows the
        result, with `done` on top (the add box emptied). Since that version, another tab's or an update's version
        may have come: the change is then replayed onto the latest when it still applies, else refused
        (memory/store/rebase.py) and the panel reloads with the latest memory and a notice, the typed text kept, so
        the user decides again."""
        try:
            change()
        except MemoryChangedError as exc:
            toasts.warning(korean_error(exc))
            return self.panel(state)
        toasts.info("새 기억 버전을 저장했습니다.")
        return self.panel(state) | (done or PageView())

    @for_user()
    def edit_sentence(self, pick: str | None, new_text: str, state: UserState) -> PageView:
        shown, index = self._pick(state, pick)
        engine = self.ctx.bot.engine
        return self._commit(state, lambda: edits.edit(engine, state.user_id, shown, index, new_text))

    @for_user()
    def delete_sentence(self, pick: str | None, state: UserState) -> PageView:
        shown, index = self._pick(state, pick)
        engine = self.ctx.bot.engine
        return self._commit(state, lambda: edits.delete(engine, state.user_id, shown, index))

    @for_user()
    def erase_sentence(self, pick: str | None, sure: bool, state: UserState) -> PageView:
        """ "완전히 지우기" once confirmed (its row's checkbox): the row's sentence leaves every version, the turns
        that said it read [삭제됨], and no copy stays on the server (Chatbot.forget_sentence)."""
        latest, index = self._pick(state, pick)
        if sure is not True:
            raise InputError("tick the box to confirm the erasure first; it cannot be undone", code="erase_unconfirmed")
        erased = self.ctx.bot.forget_sentence(state.user_id, latest.sentences[index].text)
        toasts.info(
            f"그 내용을 완전히 지웠습니다: 기억 버전 {erased.counts['memory_versions']}개에서 지우고, "
            f"대화 속 메시지 {erased.counts['turns']}개를 [삭제됨]으로 바꿨습니다."
        )
        return self.panel(state)

    @for_user()
    def add_sentence(self, new_text: str, state: UserState) -> PageView:
        """An addition applies to whatever memory is latest when it commits, so its base is the latest now."""
        edits.clean_sentence(new_text)  # refused before anything is read: the typed text stays in the box
        engine, user_id = self.ctx.bot.engine, state.user_id
        return self._commit(state, lambda: edits.add(engine, user_id, new_text), PageView(add_text=""))

    @for_user()
    def forget(self, confirm: str, state: UserState) -> PageView:
        """Delete everything about this user once they type their name; the tab returns to the start screen."""
        if (confirm or "").strip() != state.name:
            raise InputError("type the name exactly to confirm forgetting", code="forget_name_mismatch")
        state.take_pending()
        state.session.ended = True  # no update job for a user being forgotten
        self.ctx.worker.end(state.session, "forget")
        self.ctx.bot.forget(state.user_id)
        toasts.info("모든 대화와 기억을 삭제했습니다.")
        return signed_out() | PageView(confirm="")
