"""A user trial in the browser (KEEM_STUDY): consent before anything is stored, the gap between sessions, the
questionnaire after every session, and the organiser's view behind KEEM_ADMIN_PASSWORD.

The rules live in chatbot/study.py; this module is only the page: which box shows when, and what is said. A
participant never sees their strategy. Nothing about a visitor is stored until they agree to the consent text:
the user row is created by the agree button. Answers are checked whole before any is stored.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import gradio as gr

from chatbot.exports import Exports
from chatbot.localtime import LocalTime
from chatbot.study import (
    ALL_DONE,
    Question,
    Study,
    assign_strategy,
    give_consent,
    has_consented,
    next_allowed,
    pending_questionnaires,
    refusal_message,
    session_number,
    submit_answers,
    trial_sessions,
)
from chatbot.study_records import records
from chatbot.trials.export import export, shown_name
from chatbot.web import toasts
from chatbot.web.guard import PRIVATE
from chatbot.web.render import md
from chatbot.web.state import Entrance, UserState
from chatbot.web.view import KEEP, Page, PageView, View
from models.errors import InputError

log = logging.getLogger(__name__)
ADMIN_ENV = "KEEM_ADMIN_PASSWORD"
GUESS_INTERVAL_S = 1.0  # at most one organiser password checked per second for each login, whatever its tabs


def admin_password(env: Mapping[str, str] | None = None) -> str | None:
    """The organiser's password, only from the environment (a Space secret); None: no organiser view."""
    value = (os.environ if env is None else env).get(ADMIN_ENV, "")
    return value if value.strip() else None


class Limiter:
    """At most one attempt per `interval_s` for each key (a login) in this process, whatever the tabs or routes: one
    lock and, per key, the time of its last attempt let through. An attempt within its key's interval is refused at
    once (no thread waits). Keyed so that no login can lock out another: a participant flooding guesses from many
    tabs still gets one checked a second, and the organiser's own login is checked at once."""

    def __init__(self, interval_s: float = GUESS_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.interval_s, self.clock = interval_s, clock
        self.taken = 0  # attempts let through so far, all keys together
        self._last: dict[str | None, float] = {}
        self._lock = threading.Lock()

    def take(self, key: str | None = None) -> bool:
        """True (and `key`'s interval starts again) when an attempt for `key` may go ahead now."""
        with self._lock:
            now = self.clock()
            if now - self._last.get(key, float("-inf")) < self.interval_s:
                return False
            self._last[key], self.taken = now, self.taken + 1
            return True

    def ready(self, key: str | None = None) -> bool:
        """Whether an attempt for `key` now would go ahead (without taking it)."""
        with self._lock:
            return self.clock() - self._last.get(key, float("-inf")) >= self.interval_s

    def reset(self) -> None:
        """Every key's next attempt goes ahead at once (a new process starts so; tests start each test so)."""
        with self._lock:
            self._last.clear()


ORGANISER_GUESSES = Limiter()  # the organiser password's limiter in this process, one interval per login


def may_guess(limiter: Limiter, store: Any, login: str | None) -> bool:
    """Whether `login`'s guess at the organiser password is checked now: this process's limiter first (a flood from
    many tabs never reaches the database), then the store's row for the login, which every process of the store
    (`keem serve`) shares, so N processes still check one guess a second per login, not N."""
    return limiter.take(login) and records(store).take_guess(login, limiter.interval_s)


@dataclass(frozen=True)
class Unlocked:
    """The organiser's view is open for this login (the Gradio request's username; None when the app runs without
    logins), held in the tab's server-side state: another login presenting the tab's session gets nothing."""

    login: str | None


def login_name(request: gr.Request | None) -> str | None:
    return getattr(request, "username", None) if request is not None else None


@dataclass
class Participant:
    """Who is at this tab in a study, held server-side like UserState: the identity typed or signed in, whether
    they may chat now, and the session whose questionnaire is open."""

    name: str
    browser_key: str | None
    hf_user: bool
    key: str  # the store's user name for this identity (Chatbot.user_key)
    user_id: int | None = None  # None until they agree: nothing is stored before
    admitted: bool = False
    survey: int | None = None  # the session whose questionnaire is shown


@dataclass
class StudyView(View):
    """What a study event changes on the page (the parts StudyUI builds), by name; KEEP: left as it is."""

    person: Any = KEEP  # the tab's Participant (server-side)
    consent: Any = KEEP  # the consent box
    agreed: Any = KEEP  # the consent box's checkbox
    agree: Any = KEEP  # the consent box's agree button (takes clicks once the checkbox is ticked)
    start: Any = KEEP  # the chat page's start button (no clicks while the consent box is open)
    gate_note: Any = KEEP  # when the next session may start
    survey: Any = KEEP  # the questionnaire box
    survey_title: Any = KEEP
    answers: Any = KEEP  # one value per question
    who: Any = KEEP  # the chat page's line naming who a login signed in as
    again: Any = KEEP  # the chat page's 새 대화 시작 (after 대화 끝내기: what the plan allows next)
    granted: Any = KEEP  # the organiser's password was right (server-side)
    organiser: Any = KEEP  # the organiser's section: only on the organiser's address (?organiser)
    admin_view: Any = KEEP
    overview: Any = KEEP
    password: Any = KEEP
    archive: Any = KEEP


GATED = ("person", "consent", "agreed", "agree", "start", "gate_note", "survey", "survey_title", "answers", "who")
SURVEY = ("person", "survey", "survey_title", "answers")


def consent_box(shown: bool) -> StudyView:
    """The consent box open (its checkbox clear, agree waiting for it, the start button off meanwhile) or closed."""
    return StudyView(
        consent=gr.update(visible=shown),
        agreed=False,
        agree=gr.update(interactive=False),
        start=gr.update(interactive=not shown),
    )


def trial_page(study: Study, password: str | None) -> Callable[[Entrance], StudyPage]:
    """The study's part of the page, for chatbot/web/app.py build_app(trial=...)."""
    return lambda entry: StudyPage(StudyUI(entry, study, password))


class StudyUI:
    """A participant's handlers (admission, the questionnaire); `entry` is the chat page's way in (identity,
    login); `organiser` has the organiser's."""

    def __init__(self, entry: Entrance, study: Study, password: str | None):
        self.entry, self.study = entry, study
        self.organiser = Organiser(entry, study, password)

    @property
    def store(self) -> Any:
        return self.entry.bot.store

    @property
    def local(self) -> LocalTime:
        """How times are shown: KEEM_TIMEZONE's zone (Settings.local_time), as on the chat page."""
        return self.entry.bot.settings.local_time

    # -- admission ---------------------------------------------------------------------------------
    def enter(
        self,
        name: str,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
    ) -> StudyView:
        """The start button: the participant, the consent box, the note and the questionnaire. A visitor who has not
        agreed to this study's consent text sees it, and nothing is stored; one who has is admitted unless it is too
        early (the note says when to come back). Either way an unanswered questionnaire is offered."""
        who = self.entry.identify(name, browser_key, request, profile)
        key = self.entry.bot.user_key(who.name, who.browser_key, who.hf_user)
        person = Participant(who.name, who.browser_key, who.hf_user, key, self.store.users.find(key))
        if person.user_id is None or not has_consented(self.store, person.user_id, self.study):
            return StudyView(person=person, gate_note="") | consent_box(True) | self.survey_view(None)
        return self._admit(person, login_name(request))

    def agree(self, person: Participant | None, agreed: bool = False) -> StudyView:
        """The agree button, once its checkbox is ticked (checked here too, not only by the disabled button): the
        participant exists from now on, with their consent (time and text hash)."""
        if person is None:
            raise InputError("enter a name or participant code first", code="consent_no_name")
        if agreed is not True:
            raise InputError("tick the consent box first", code="consent_unticked")
        person.user_id = self.store.users.get_or_create(person.key)
        give_consent(self.store, person.user_id, self.study)
        return self._admit(person)

    def decline(self, person: Participant | None) -> StudyView:
        return (
            StudyView(
                person=None,
                gate_note="동의하지 않으셨습니다. 아무것도 저장하지 않았습니다. 마음이 바뀌면 다시 '대화 시작'을 "
                "누르세요.",
            )
            | consent_box(False)
            | self.survey_view(None)
        )

    def leave(self) -> StudyView:
        """The tab logged out: forget who was here (the next start asks again) and hide the study's boxes."""
        return StudyView(person=None, gate_note="") | consent_box(False) | self.survey_view(None)

    def tick(self, agreed: bool) -> StudyView:
        """The consent checkbox: the agree button takes clicks only while it is ticked."""
        return StudyView(agree=gr.update(interactive=agreed is True))

    def _admit(self, person: Participant, login: str | None = None) -> StudyView:
        """Admitted now, or told when (one thing at a time: a login's line then no longer asks for 대화 시작)."""
        assert person.user_id is not None
        when = next_allowed(self.store, person.user_id, self.study)
        person.admitted = when is None
        note = "" if when is None else refusal_message(when, self.local)
        if when is not None and when < ALL_DONE:
            note += " 그때 다시 접속해 주세요."
        pending = pending_questionnaires(self.store, person.user_id, self.study)
        person.survey = pending[0]["id"] if pending else None
        who = f"**{md(login)}** 님으로 로그인했습니다." if login and when is not None else KEEP
        return StudyView(person=person, gate_note=note, who=who) | consent_box(False) | self.survey_view(person)

    def open_chat(
        self,
        person: Participant | None,
        browser_key: str | None = None,
        request: gr.Request | None = None,
        profile: gr.OAuthProfile | None = None,
    ) -> PageView:
        """Chained after enter/agree: opens the chat for an admitted participant with the study's strategy;
        leaves the page as it is otherwise."""
        if person is None or not person.admitted or person.user_id is None:
            return PageView()
        person.admitted = False  # one chat per admission: a later start decides again
        strategy = assign_strategy(self.store, person.user_id, self.study)
        return self.entry.login(person.name, person.browser_key or browser_key, request, profile, strategy=strategy)

    # -- the questionnaire ---------------------------------------------------------------------------
    def survey_view(self, person: Participant | None) -> StudyView:
        """The questionnaire box, its title and one value per question: shown for `person.survey`, else hidden."""
        if person is None or person.survey is None or person.user_id is None:
            kept = [gr.update() for _ in self.study.questions]
            return StudyView(survey=gr.update(visible=False), survey_title="", answers=kept)
        number = session_number(self.store, person.user_id, person.survey)
        title = (
            f"### {number}번째 대화에 대한 설문\n"
            "대화는 끝났고 기억 갱신은 따로 진행됩니다. 각 문항에 답한 뒤 **설문 제출**을 눌러 주세요. "
            "창을 닫으면 다음 접속 때 다시 보여 드립니다."
        )
        answers = [gr.update(value=None) for _ in self.study.questions]
        return StudyView(survey=gr.update(visible=True), survey_title=title, answers=answers)

    def after_end(self, state: UserState | None, person: Participant | None) -> StudyView:
        """Chained after '대화 끝내기': the questionnaire of the session just ended (if they said anything in it)."""
        if state is None or person is None or person.user_id != state.user_id or not state.session.ended:
            return StudyView(person=person) | self.survey_view(None)
        if session_number(self.store, state.user_id, state.session.session_id) is not None:
            pending = pending_questionnaires(self.store, state.user_id, self.study)
            ids = [p["id"] for p in pending]
            person.survey = state.session.session_id if state.session.session_id in ids else person.survey
        return StudyView(person=person, again=self.next_step(state.user_id)) | self.survey_view(person)

    def next_step(self, user_id: int) -> Any:
        """The card's main button after 대화 끝내기: 새 대화 시작 when the plan allows one now, else (off) when the
        next one may start, or that the study is done."""
        when = next_allowed(self.store, user_id, self.study)
        if when is None:
            return gr.update(value="새 대화 시작", interactive=True)
        if when >= ALL_DONE:
            return gr.update(value="연구의 대화를 모두 마쳤습니다", interactive=False)
        local = self.local
        return gr.update(
            value=f"다음 대화는 {local.minute(when, round_up=True)} ({local.korean}) 이후에", interactive=False
        )

    def submit(self, person: Participant | None, *values: Any) -> StudyView:
        """Store the open questionnaire, every answer or none (a bad or missing one is named, nothing written);
        then the next unanswered one, if any."""
        if person is None or person.user_id is None or person.survey is None:
            raise InputError(
                "no questionnaire is waiting; one comes after a conversation ends", code="questionnaire_none"
            )
        answers = {q.id: _value(q, v) for q, v in zip(self.study.questions, values)}
        submit_answers(self.store, person.survey, person.user_id, self.study, answers)
        toasts.info("설문을 저장했습니다. 감사합니다.")
        pending = pending_questionnaires(self.store, person.user_id, self.study)
        person.survey = pending[0]["id"] if pending else None
        return StudyView(person=person) | self.survey_view(person)


ORGANISER_QUERY = "organiser"  # the organiser's address: the app's with ?organiser (participants never see it)


class Organiser:
    """The organiser's view behind KEEM_ADMIN_PASSWORD: progress, failed updates, a scrubbed export."""

    def __init__(
        self, entry: Entrance, study: Study, password: str | None, limiter: Limiter = ORGANISER_GUESSES
    ) -> None:
        self.entry, self.study, self.password, self.limiter = entry, study, password, limiter
        self.exports = Exports()
        self.exports.sweep()  # zips a stopped app left behind

    @property
    def store(self) -> Any:
        return self.entry.bot.store

    @property
    def local(self) -> LocalTime:
        """How times are shown: KEEM_TIMEZONE's zone (Settings.local_time), as on the chat page."""
        return self.entry.bot.settings.local_time

    def section(self, request: gr.Request | None = None) -> StudyView:
        """The organiser's section shows only on the organiser's address (the app's with ?organiser): a participant
        never sees it (the password still guards it there)."""
        query = getattr(request, "query_params", None) or {}
        return StudyView(organiser=gr.update(visible=ORGANISER_QUERY in query))

    def unlock(self, password: str, granted: Unlocked | None, request: gr.Request | None = None) -> StudyView:
        """The right password opens the organiser's view for this tab and this login (and empties the password box).
        One password is checked per second for each login, in all the store's processes (`may_guess`): a guess
        sooner from the same login is refused unchecked, whatever its tab, route or process; another login is not
        held back."""
        if self.password is None:
            raise InputError(
                "the organiser view is off: set KEEM_ADMIN_PASSWORD on the server and restart", code="organiser_off"
            )
        if not may_guess(self.limiter, self.store, login_name(request)):
            raise InputError(
                "one organiser password is checked a second per login; wait a moment and enter it again",
                code="organiser_wait",
            )
        if not hmac.compare_digest((password or "").encode(), self.password.encode()):
            log.warning("a wrong organiser password was given")
            raise InputError("wrong organiser password", code="organiser_wrong")
        return StudyView(
            granted=Unlocked(login_name(request)),
            admin_view=gr.update(visible=True),
            overview=self.overview(),
            password="",
        )

    def refresh(self, granted: Unlocked | None, request: gr.Request | None = None) -> StudyView:
        self._check(granted, request)
        return StudyView(overview=self.overview())

    def download(self, granted: Unlocked | None, request: gr.Request | None = None) -> StudyView:
        """A zip of `keem trial export` (personal data scrubbed), served to the login that unlocked this view only
        (chatbot/web/guard.py PRIVATE: another login, or anyone after a restart, gets 404)."""
        login = self._check(granted, request)
        stamp = self.local.local(datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M")
        # in Gradio's cache already (no second copy), removed within minutes and on any forget: chatbot/exports.py
        name = PRIVATE.name(f"{self.study.id}-{stamp}")
        archive, counts = self.exports.make(lambda folder: export(self.store, folder, local=self.local), name)
        PRIVATE.grant(archive, login)
        replaced = sum(counts["pii"].values())
        toasts.info(
            f"내보냈습니다: 참가자 {counts['participants']}명, 설문 응답 {counts['answers']}개, "
            f"가린 개인정보 {replaced}개."
        )
        return StudyView(archive=str(archive))

    def _check(self, granted: Unlocked | None, request: gr.Request | None) -> str | None:
        """The login the view was unlocked for, when it is this request's; else InputError."""
        login = login_name(request)
        if not isinstance(granted, Unlocked) or granted.login != login or self.password is None:
            raise InputError("type the organiser password first", code="organiser_locked")
        return login

    def overview(self) -> str:
        """Participants with sessions done / due and when the next may start, questionnaire completion, and the
        update jobs that are waiting or failed, with their errors (Markdown; names escaped)."""
        study, store = self.study, self.store
        now = study.clock()
        rows = [
            f"### {md(study.title)} ({md(study.id)})",
            f"참가자마다 대화 {study.sessions}회, 대화 사이 최소 {study.min_gap.total_seconds() / 3600:g}시간.",
            "",
            "| 참가자 | 전략 | 끝낸 대화 | 남은 대화 | 다음 대화 가능 | 설문 | 갱신 대기 | 갱신 실패 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        answered_by_user: dict[int, set[int]] = {}
        for a in records(store).answers(study_id=study.id):
            answered_by_user.setdefault(a["user_id"], set()).add(a["session_id"])
        failures = []
        consented = 0
        for user in store.users.all():
            if not has_consented(store, user["id"], study):
                continue
            consented += 1
            done = trial_sessions(store, user["id"])
            when = next_allowed(store, user["id"], study, now)
            # rounded up as the participant's refusal is (study.py refusal_message): both read the same minute
            nxt = "지금" if when is None else "끝" if when >= ALL_DONE else self.local.stamp(when, round_up=True)
            jobs = store.queue.jobs(user["id"], ("pending", "running", "failed"))
            failed = [j for j in jobs if j["status"] == "failed"]
            failures += [(user["name"], j) for j in failed]
            rows.append(
                f"| {md(shown_name(user['name']))} | {user['strategy'] or '-'} | {len(done)} | "
                f"{max(study.sessions - len(done), 0)} | {nxt} | "
                f"{len(answered_by_user.get(user['id'], set()))}/{len(done)} | "
                f"{len(jobs) - len(failed)} | {len(failed)} |"
            )
        if not consented:
            rows.append("| (아직 동의한 참가자가 없습니다) | | | | | | | |")
        if failures:
            rows += [
                "",
                "**실패한 기억 갱신** (참가자가 기억 탭에서, 또는 `keem jobs retry`로 다시 시도할 수 있습니다)",
            ]
            rows += [
                f"- {md(shown_name(name))} · 작업 {j['id']} · {j['attempts']}회 시도 · "
                f"{md((j['last_error'] or '')[:300])}"
                for name, j in failures
            ]
        return "\n".join(rows)


class StudyPage:
    """The study's part of the page (chatbot/web/app.py Trial): its boxes and the wiring of its events."""

    def __init__(self, ui: StudyUI):
        self.ui = ui

    def build_gate(self, page: Page) -> None:
        """In the login box: the note that says when the next session may start."""
        page.add(gate_note=gr.Markdown(elem_id="study-note"))

    def build_boxes(self, page: Page) -> None:
        """The consent text with agree / decline (hidden until a visitor who has not agreed presses start), and
        the questionnaire (hidden until a session ends)."""
        with gr.Column(visible=False, elem_id="consent") as consent:
            # the organiser's own Markdown (the study file), paragraphs kept; Gradio sanitizes any HTML in it
            gr.Markdown(f"### {md(self.ui.study.title)}\n\n{self.ui.study.consent}", elem_id="consent-text")
            agreed = gr.Checkbox(label="위 내용을 읽었고 참여에 동의합니다", value=False, elem_id="consent-check")
            with gr.Row():
                agree = gr.Button("동의하고 대화 시작", variant="primary", interactive=False, elem_id="consent-agree")
                decline = gr.Button("동의하지 않음", elem_id="consent-decline")
        page.add(consent=consent, agreed=agreed, agree=agree, decline=decline, person=gr.State(None))
        with gr.Column(visible=False, elem_id="survey") as survey:
            title = gr.Markdown(elem_id="survey-title")
            answers: list[Any] = []
            for q in self.ui.study.questions:
                if q.kind == "likert":
                    choices = [(f"{q.low + i} {label}", q.low + i) for i, label in enumerate(q.labels)]
                    answers.append(gr.Radio(choices, label=q.text, elem_id=f"q-{q.id}"))
                else:
                    answers.append(gr.Textbox(label=q.text, lines=3, max_length=q.max_chars, elem_id=f"q-{q.id}"))
            submit = gr.Button("설문 제출", variant="primary", elem_id="survey-submit")
        page.add(survey=survey, survey_title=title, answers=answers, submit=submit)

    def build_organiser(self, page: Page) -> None:
        """Built only with a password: the password box, and the view it opens (overview, refresh, export)."""
        with gr.Accordion("연구자 화면", open=False, visible=False, elem_id="organiser") as section:
            page.add(
                organiser=section,
                granted=gr.State(None),  # Unlocked(login) once the password was right
                password=gr.Textbox(label="연구자 비밀번호", type="password", max_lines=1, elem_id="admin-password"),
                unlock=gr.Button("열기", elem_id="admin-open"),
            )
            with gr.Column(visible=False, elem_id="organiser-view") as view:
                page.add(admin_view=view, overview=gr.Markdown(elem_id="organiser-overview"))
                with gr.Row():
                    page.add(
                        refresh=gr.Button("새로 고침", size="sm", elem_id="admin-refresh"),
                        export=gr.Button("내보내기 (개인정보 가림, zip)", size="sm", elem_id="admin-export"),
                    )
                page.add(archive=gr.File(label="내보낸 파일", interactive=False, elem_id="admin-file"))

    def wire(self, page: Page) -> list[Any]:
        """The study's events, after the chat page's: consent, then the gap between sessions, decide; the chat
        opens only for an admitted participant. Returns the events that may open the chat."""
        p, person, ui = page, page["person"], self.ui
        key = [p["key"]] if "key" in p else []
        opened = []
        for triggers, handler, inputs in (
            ([p["start"].click, p["name"].submit], ui.enter, [p["name"], *key]),
            ([p["agree"].click], ui.agree, [person, p["agreed"]]),
        ):
            admitted = p.on(triggers, handler, inputs, GATED, concurrency_limit=None)
            opened.append(p.on(None, ui.open_chat, [person, *key], p.logged_in(), after=admitted))
        p.on([p["decline"].click], ui.decline, [person], GATED)
        p.on([p["agreed"].change], ui.tick, [p["agreed"]], ["agree"], show_progress="hidden")
        p.on([p["submit"].click], ui.submit, [person, *p["answers"]], SURVEY)
        p.on(None, ui.after_end, [p["state"], person], [*SURVEY, "again"], after=p.events["ended"])
        p.on(None, ui.leave, None, GATED, after=p.events["signed_out"])
        organiser = self.ui.organiser
        if organiser.password is not None:  # no password, no organiser view at all
            self.build_organiser(p)
            granted = p["granted"]
            p.on(
                [p["unlock"].click],
                organiser.unlock,
                [p["password"], granted],
                ["granted", "admin_view", "overview", "password"],
            )
            p.on([p["refresh"].click], organiser.refresh, [granted], ["overview"])
            p.on([p.events["load"]], organiser.section, None, ["organiser"], show_progress="hidden")
            p.on([p["export"].click], organiser.download, [granted], ["archive"])
        return opened


def _value(q: Question, value: Any) -> Any:
    """A field's value as the study checks it: a Radio gives the rating (or None), a Textbox the text."""
    if q.kind == "likert" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value
