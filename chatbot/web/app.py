"""The Gradio 6 browser app: the page's components and the wiring of its events (the handlers are in chat.py and
memory_tab.py; identity lives only in server-side session state, chatbot/web/state.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

import fastapi
import gradio as gr

from chatbot.api.app import RATE_PER_MIN, build_api, mount
from chatbot.api.mcp_http import McpEndpoint, lifespan, mcp_route
from chatbot.bot import Chatbot
from chatbot.study import Study
from chatbot.web import identity as hf_login
from chatbot.web import login
from chatbot.web.actions import REPLY_ACTIONS
from chatbot.web.backend import Backend
from chatbot.web.blocks import PageBlocks
from chatbot.web.catch_up import CatchUp, wire_catch_up
from chatbot.web.chat import PLACEHOLDER, ChatUI
from chatbot.web.editing import build as sentence_rows
from chatbot.web.flow import Flow
from chatbot.web.guard import refuse_routes
from chatbot.web.messages import DEMO_NOTE, DEMO_TITLE, GRADIO_WORDS
from chatbot.web.opening import Opening, wire_openings
from chatbot.web.state import Entrance
from chatbot.web.style import CSS, HEAD
from chatbot.web.undo_buttons import WhyTab
from chatbot.web.view import PANEL, RESTORE_SLOTS, SIGNED_OUT, Page
from chatbot.worker import Worker

MAX_FILE_SIZE = "1kb"  # the page has no upload control; this also caps Gradio's other multipart routes
# Events waiting in Gradio's queue at once, all tabs together: far above what one process serves (a tab waits on a
# few at most), a bound against a flood. Gradio's own default is no bound, but on ZeroGPU one waiting event, which
# refused a page's login while its load events waited ("Queue is full": the page showed 오류).
QUEUE_MAX = 1024


class Trial(Protocol):
    """A user trial's part of the page (chatbot/trials/web.py StudyPage), made by the caller's factory."""

    def build_gate(self, page: Page) -> None:
        """Inside the login box: the note that says when the next session may start."""

    def build_boxes(self, page: Page) -> None:
        """Below the login box: the consent text and the questionnaire."""

    def wire(self, page: Page) -> list[Any]:
        """The trial's events, its login among them (returned: the events after which the chat may open)."""
        ...


# Gradio's queue rebuilt a pandas table of the last 10,000 events after every event, for its /monitoring page
# (which the app does not serve: launch_options): a few ms of every event, growing as the app runs. Its queue reads
# these when `Blocks.queue` makes it: the table then keeps 100 events and is rebuilt once every 10,000.
QUIET_QUEUE = {"GRADIO_ANALYTICS_MAX_EVENTS": "100", "GRADIO_ANALYTICS_CACHE_FREQUENCY": "10000"}


def queue_options() -> dict[str, Any]:
    """What every launch of the app passes to `Blocks.queue`: four events of one kind at a time unless the event
    says otherwise (replies: Page.streams), and QUEUE_MAX waiting, on ZeroGPU too. Called just before it, this also
    sets QUIET_QUEUE in the environment where the operator has not set those variables."""
    for name, value in QUIET_QUEUE.items():
        os.environ.setdefault(name, value)
    return {"default_concurrency_limit": 4, "max_size": QUEUE_MAX}


def launch_options(app: gr.Blocks | None = None) -> dict[str, Any]:
    """What every launch of the app passes to `Blocks.launch` besides host, port and logins: no file uploads, no
    direct use of Gradio's API, private files to their login only (chatbot/web/guard.py); the page's CSS
    (chatbot/web/style.py) and the login page's Korean message (chatbot/web/login.py). With the `app` build_app made,
    its HTTP API (chatbot/api) is served under /v1 on the same server, before Gradio's routes, and its MCP server at
    /mcp (chatbot/api/mcp_http.py), which the server's lifespan starts.

    A fresh dict each call (Gradio adds its own entries to `app_kwargs`).
    """
    api = getattr(app, "keem_api", None)
    mcp = getattr(app, "keem_mcp", None)
    served: dict[str, Any] = {"routes": [mcp_route(mcp), mount(api)], "lifespan": lifespan(mcp)} if api and mcp else {}
    return {
        "max_file_size": MAX_FILE_SIZE,
        "app_kwargs": {"dependencies": [fastapi.Depends(refuse_routes)], "routes": [], **served},
        "css": CSS,
        "head": HEAD,
        "auth_message": login.MESSAGE,
        # Gradio's own words its Korean lacks, for every browser (the page is Korean whatever its language)
        "i18n": gr.I18n(ko=GRADIO_WORDS, en=GRADIO_WORDS),
        "enable_monitoring": False,  # Gradio's traffic page: not for visitors (and its table costs: QUIET_QUEUE)
        # Gradio's launch asks the page it just started for a HEAD / with a 3-s timeout and, if that times out, takes
        # localhost for unreachable (a notebook's case) and raises "a shareable link must be created": on a loaded
        # machine a healthy app process exited 8 s after it had started serving (under supervisord: restarted,
        # refusing connections meanwhile). The server is up once launch returns; nothing here needs a share link.
        "_frontend": False,
    }


def build_app(
    bot: Chatbot | Backend,
    worker: Worker | None = None,
    *,
    title: str = "KEEM 채팅",
    browser_identity: bool = False,
    study: Study | None = None,
    trial: Callable[[Entrance], Trial] | None = None,
    reply_slots: int | None = None,
    api_rate: int = RATE_PER_MIN,
) -> gr.Blocks:
    """The Blocks app; every event is private to the page (api_visibility='private') and reads identity from state.

    `bot` may be a loading `Backend`: the page serves at once and says the models are loading. With
    `browser_identity` a random key kept in the browser's localStorage is part of who the user is. With a `study`
    (a user trial) strategies are hidden and sessions spaced; `trial` makes the study's part of the page (consent
    first, the questionnaire after each session, the organiser's view: chatbot/trials/web.py `trial_page`).
    `reply_slots`: replies streaming at once, all users together (Settings.reply_slots; default: the bot's, when it
    is already loaded, else 4). `api_rate`: the HTTP API's requests a minute per user (chatbot/api, served with
    the page by launch_options).
    """
    ui = ChatUI(bot, worker, browser_identity=browser_identity, study=study)
    flow = Flow(ui)
    part = trial(ui.entry) if trial is not None else None
    if reply_slots is None:
        loaded = ui.backend.bot  # None while a Backend still loads its models
        reply_slots = loaded.settings.reply_slots if loaded is not None else 4
    page = Page(reply_slots=reply_slots, api_visibility="private")
    with PageBlocks(title=title, analytics_enabled=False) as app:
        app.api_open = False  # /run/predict reaches only unqueued events (the page's end button), never the rest
        app.keem_ui = ui  # type: ignore[attr-defined]
        app.keem_study = part  # type: ignore[attr-defined]
        app.keem_api = build_api(ui.ctx, api_rate)  # type: ignore[attr-defined]
        app.keem_mcp = McpEndpoint(app.keem_api.state.keem)  # type: ignore[attr-defined]
        components(page, ui, title, browser_identity, part, flow)
        chained = wire(app, page, ui, flow)
        flow.wire(page)
        # logging in; a trial's events come after the chat page's: they chain onto its end and logout
        opened = part.wire(page) if part is not None else [chat_events(page, ui)]
        wire_openings(page, Opening(ui.ctx, ui.chat), [*opened, chained[1]])  # the bot asks first (issue 23)
        for event in opened:  # an update already under way at the login (Entry.login)
            flow.watch_after(page, event)
        if ui.zero is not None:  # ZeroGPU: a user's memory updates run in their own events (chatbot/web/catch_up.py)
            sources = [*opened, *chained]
            for source, caught_up in zip(sources, wire_catch_up(page, CatchUp(ui.ctx), sources), strict=True):
                # one watch a tab: after 대화 끝내기 (or a retry) the watch chained to it sees what the catch-up
                # does; a second one after the catch-up raced it, and the first one's 대기, sent late, could stay
                # on the page after the second one's 완료 (seen on a loaded machine)
                if not flow.watches(source):
                    flow.watch_after(page, caught_up)
    return app


def components(page: Page, ui: ChatUI, title: str, browser_identity: bool, part: Trial | None, flow: Flow) -> None:
    """Every component of the page, registered under the name views use for it (chatbot/web/view.py PageView)."""
    page.add(state=gr.State(None, delete_callback=ui.entry.on_state_deleted))
    gr.Markdown(
        f"# {title}\n한 사람을 오래 기억하는 한국어 대화 상대. 대화가 끝나면 기억을 통째로 다시 씁니다.",
        elem_id="title",
    )
    # details on tap; no server addresses
    with gr.Accordion(ui.backend.info_label(), open=False, elem_id="model-info") as model_info:
        page.add(banner=gr.Markdown(ui.backend.banner(), elem_classes=["keem-banner"], elem_id="model-banner"))
    page.add(model_info=model_info)
    page.add(banner_timer=gr.Timer(2.0, active=not ui.backend.done.is_set()))
    with gr.Column(visible=True, elem_id="login") as login_box:
        page.add(
            login_box=login_box,
            name=gr.Textbox(
                label="이름 또는 참가자 코드", placeholder="예: 지우, P017", max_lines=1, elem_id="name-input"
            ),
            start=gr.Button(**ui.backend.start_button(), variant="primary", elem_id="start-button"),
            who=gr.Markdown(elem_id="login-who"),
            signout=gr.Button("로그아웃", visible=False, size="sm", elem_id="login-signout"),
        )
        if hf_login.enabled():
            page.add(hf_note=hf_login.login_controls())
        if part is not None:
            part.build_gate(page)
    if part is not None:  # a user trial: the consent text, and the questionnaire after each session
        part.build_boxes(page)
    with gr.Column(visible=False, elem_id="main") as main_box:
        page.add(main_box=main_box)
        with gr.Row():
            page.add(
                greeting=gr.Markdown(elem_id="greeting"),
                logout=gr.Button("나가기", size="sm", scale=0, elem_id="logout-button"),
            )
        with gr.Tabs() as tabs:
            page.add(tabs=tabs)
            with gr.Tab("대화", id="chat-tab"):
                chat_tab(page)
            with gr.Tab("기억", id="memory-tab"):
                memory_tab(page, flow)
            with gr.Tab("지난 대화", id="past-tab") as past_tab:
                past_conversations(page, past_tab)
    page.add(signed_as=gr.Textbox("", visible="hidden", elem_id="signed-as"))
    if browser_identity:  # only obfuscated in localStorage (Gradio sends the page its secret): it is the credential
        page.add(key=gr.BrowserState("", storage_key="keem-identity", secret="keem-identity"))


def chat_tab(page: Page) -> None:
    # with the demo model, before the first message: what it cannot do, what works, how to connect a Korean model
    with gr.Accordion(DEMO_TITLE, open=True, visible=False, elem_id="demo-note") as demo_box:
        gr.Markdown(DEMO_NOTE, elem_id="demo-note-text")
    page.add(demo_box=demo_box)
    page.add(
        chat=gr.Chatbot(
            label="대화",
            height=420,
            elem_id="chat",
            sanitize_html=True,
            buttons=["copy", "copy_all"],
            placeholder="메시지를 입력해 대화를 시작하세요.",
        )
    )
    # stop a streaming reply; ask again for the last (chatbot/web/replies.py); each shown only when it can act
    # (chatbot/web/actions.py)
    with gr.Row(elem_id="reply-actions"):
        page.add(
            stop=gr.Button("■ 멈추기", size="sm", scale=0, min_width=90, visible=False, elem_id="stop-button"),
            regenerate=gr.Button(
                "↻ 다시 생성", size="sm", scale=0, min_width=110, visible=False, elem_id="regenerate-button"
            ),
        )
    with gr.Row(elem_id="message-row"):
        page.add(
            message=gr.Textbox(
                show_label=False, placeholder=PLACEHOLDER, scale=5, max_lines=6, elem_id="message-input"
            ),
            send=gr.Button("보내기", variant="primary", scale=1, elem_id="send-button"),
        )
        with gr.Column(visible=False, scale=4, elem_id="end-card") as card:  # after 대화 끝내기: chatbot/web/ending.py
            page.add(  # the main action first: on a phone it stays on the first screen above the stages
                card=card,
                again=gr.Button("새 대화 시작", variant="primary", visible=False, elem_id="new-session-button"),
                steps=gr.Markdown(elem_id="end-steps"),
            )
    page.add(note=gr.Markdown(elem_id="pending-note"))
    with gr.Accordion("이번 답변에 쓰인 기억", open=False, elem_id="hits-accordion"):
        page.add(
            hits=gr.Markdown(elem_id="hits"),
            to_memory=gr.Button("기억 탭에서 전체 보기", size="sm", elem_id="to-memory-button"),
        )
    with gr.Row(elem_id="session-actions"):
        page.add(end=gr.Button("대화 끝내기 (기억 갱신)", variant="stop", elem_id="end-button"))
    page.add(progress=gr.Markdown(elem_id="progress"))


def memory_tab(page: Page, flow: Flow) -> None:
    """Updates not yet in memory; the one list of the current memory, a row per sentence with its actions
    (chatbot/web/editing.py), and "문장 추가" under it; what the latest update changed and why, with its undo
    buttons; the emotions; every earlier version with its changelog; forgetting everything."""
    page.add(
        jobs=gr.Markdown(elem_id="memory-jobs"),
        retry=gr.Button("실패한 갱신 다시 시도", visible=False, size="sm", elem_id="retry-button"),
    )
    with gr.Column(elem_id="memory"):
        sentence_rows(page, flow.editing)
    with gr.Row(equal_height=True, elem_id="add-row"):
        page.add(
            add_text=gr.Textbox(
                show_label=False, placeholder="기억에 더할 문장", max_lines=3, scale=5, elem_id="add-text"
            ),
            add_button=gr.Button("문장 추가", scale=0, min_width=90, elem_id="add-button"),
        )
    gr.Markdown("### 바뀐 것과 그 이유")
    page.add(changelog=gr.Markdown(elem_id="changelog"))
    with gr.Row():
        page.add(
            restore=[gr.Button(visible=False, size="sm", elem_id=f"restore-{i}") for i in range(RESTORE_SLOTS)],
            revert=gr.Button(visible=False, size="sm", elem_id="revert-button"),
        )
    with gr.Accordion("감정의 흐름", open=False):  # emotion-and-cause records, newest first
        page.add(emotions=gr.Markdown(elem_id="emotions"))
    gr.Markdown("### 버전 기록")
    page.add(history=gr.Markdown(elem_id="history"))
    with gr.Accordion("나를 잊기 (모든 데이터 삭제)", open=False):
        gr.Markdown("대화, 세션, 모든 기억 버전을 지웁니다. 되돌릴 수 없습니다. 확인을 위해 이름을 입력하세요.")
        page.add(
            confirm=gr.Textbox(label="이름 확인", max_lines=1, elem_id="forget-confirm"),
            forget_button=gr.Button("모두 삭제", variant="stop", elem_id="forget-button"),
        )


def wire_why(page: Page, ui: ChatUI) -> None:
    """One tap restores a dropped sentence; "이번 갱신 되돌리기" brings back the memory before the update."""
    why, state = WhyTab(ui.memory.ctx), page["state"]

    def restorer(slot: int) -> Any:
        def restore_dropped(state: Any) -> Any:
            return why.restore(slot, state)

        return restore_dropped

    for slot, button in enumerate(page["restore"]):
        page.on([button.click], restorer(slot), [state], PANEL)
    page.on([page["revert"].click], why.revert, [state], PANEL)


def chat_events(page: Page, ui: ChatUI) -> Any:
    """Logging in without a trial; no concurrency limit: a login is a few quick writes, and 20 at once must not
    wait in waves of 4."""
    key = [page["key"]] if "key" in page else []
    return page.on(
        [page["start"].click, page["name"].submit],
        ui.entry.login,
        [page["name"], *key],
        page.logged_in(),
        concurrency_limit=None,
    )


def past_conversations(page: Page, tab: Any) -> None:
    """The 지난 대화 tab: this user's ended conversations, read-only (chatbot/web/past.py)."""
    page.add(
        past_tab=tab,
        past_pick=gr.Dropdown(label="지난 대화 고르기", choices=[], elem_id="past-pick"),
        transcript=gr.Markdown(elem_id="past-transcript"),
    )


def wire(app: gr.Blocks, page: Page, ui: ChatUI, flow: Flow) -> list[Any]:
    """Every event of the chat page but logging in (chat_events, or the trial's); returns those after which a
    user's waiting memory updates may run (end, new conversation, retry)."""
    p, state = page, page["state"]
    p.events["load"] = app.load  # the page's load, for the parts wired elsewhere (a trial's organiser section)
    app.unload(ui.entry.on_unload)  # a closed tab's conversation ends at once (listed in 지난 대화)
    p.on(
        [app.load, p["banner_timer"].tick],
        ui.entry.banner,
        None,
        ["model_info", "banner", "banner_timer", "start", "demo_box"],
        show_progress="hidden",
        concurrency_limit=None,
    )
    # who the login is, at once and not behind queued events: a 대화 시작 clicked before a queued answer came had its
    # own line (a trial's "come back on ...") overwritten by this one's "press 대화 시작"
    if "hf_note" in p:  # a visitor signed in with Hugging Face sees that name, locked, in the name box
        p.on([app.load], hf_login.on_load, None, ["name", "hf_note"], show_progress="hidden", queue=False)
    p.on(
        [app.load],
        login.on_load,
        None,
        ["name", "who", "signout", "signed_as", "memory"],
        show_progress="hidden",
        queue=False,
    )
    p.events["signed_out"] = p.on([p["logout"].click], ui.entry.logout, [state], SIGNED_OUT)
    signed_as = [p["signed_as"]]  # a login signs this browser out (a shared lab PC)
    p.events["signed_out"].then(None, signed_as, None, js=login.LOGOUT_JS, **p.options)
    p["signout"].click(None, signed_as, None, js=login.LOGOUT_JS, **p.options)
    # sending only queues the message (never waiting behind other users' replies); `respond` then answers
    # everything queued. "multiple": a message sent while a reply streams must reach the server (Gradio's
    # default "once" would drop it); a respond started while another answers returns at once.
    sent = p.on(
        [p["send"].click, p["message"].submit],
        ui.chat.send,
        [p["message"], state],
        ["message", "chat", "note", *REPLY_ACTIONS],
        concurrency_limit=None,
        show_progress="hidden",
    )
    flow.answer_after(p, sent)
    # no queue: the answer must not wait behind streaming replies (target: under 0.5 s)
    p.events["ended"] = ended = p.on(
        [p["end"].click],
        flow.ending.end_session,
        [state, p["message"]],
        ["state", "progress", "message", "again", "card", "steps", "end", "send", *REPLY_ACTIONS],
        queue=False,
        show_progress="hidden",
    )
    flow.watch_after(p, ended)
    renewed = p.on(
        [p["again"].click],
        flow.ending.new_session,
        [state],
        ["state", "chat", "message", "again", "hits", "progress", "card", "steps", "end", "send", *REPLY_ACTIONS],
    )
    retried = p.on([p["retry"].click], ui.memory.retry_failed, [state], ["progress", *PANEL], show_progress="hidden")
    flow.watch_after(p, retried)
    p.on(
        [p["add_button"].click, p["add_text"].submit],
        ui.memory.add_sentence,
        [p["add_text"], state],
        [*PANEL, "add_text"],
    )
    p.on([p["forget_button"].click], ui.memory.forget, [p["confirm"], state], [*SIGNED_OUT, "confirm"])
    wire_why(p, ui)
    return [ended, renewed, retried]
