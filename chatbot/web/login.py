"""Logins (`keem chat --auth-file`, KEEM_AUTH): Gradio's login page with a Korean message, no name box once a login
says who this is, and 나가기 that signs the browser out (a shared lab PC must not stay logged in).

Gradio's own words on its login page (사용자 이름, 비밀번호, 로그인) follow the browser's language; the message
above them, `MESSAGE`, is always Korean and says what to type.
"""

from __future__ import annotations

import gradio as gr

from chatbot.web.messages import GRADIO_WORDS
from chatbot.web.render import md
from chatbot.web.view import PageView

MESSAGE = (
    "<p><strong>KEEM 채팅에 오신 것을 환영합니다.</strong></p>"
    "<p>안내받은 <strong>아이디</strong>(참가자 코드, 예: P017)를 <strong>사용자 이름</strong>(username) 칸에, "
    "함께 받은 비밀번호를 <strong>비밀번호</strong>(password) 칸에 입력한 뒤 <strong>로그인</strong>(Login)을 "
    "눌러 주세요.</p>"
    "<p>여러 사람이 함께 쓰는 컴퓨터라면 대화를 마친 뒤 꼭 <strong>나가기</strong>를 눌러 주세요.</p>"
    # Gradio's login page takes no translations (its Korean says "잘못된 자격 증명"): a wrong login's line is drawn
    # in plain Korean over it
    "<style>.creds {font-size: 0 !important} .creds::before {content: "
    f'"{GRADIO_WORDS["login.incorrect_credentials"]}"; font-size: var(--text-md, 14px)}}</style>'
)
# After the server has ended the tab's session: a browser signed in with a login (the hidden `signed_as` box holds
# its name) leaves through Gradio's /logout for this browser only, which returns to the login page; without a login
# nothing more happens.
LOGOUT_JS = """(who) => {
  if (who) { window.location.href = 'logout?all_session=false'; }
  return [];
}"""


def on_load(request: gr.Request | None = None) -> PageView:
    """Page load: with a login the name box is gone and the login box says who is signed in; else it stays.

    It also gives the memory list's State its first value in the browser (None, as on the server). Gradio's page
    knows a State's value only from the outputs it receives (None for a State) and fires the State's change the
    first time one arrives; left to the login, that drew the whole list twice, and a tap on a row between the two
    draws (왜?, 고치기) reached an event the second draw had removed and was lost."""
    username = getattr(request, "username", None) if request is not None else None
    if not username:
        return PageView(who="", signout=gr.update(visible=False), signed_as="", memory=None)
    return PageView(
        memory=None,
        name=gr.update(value=username, visible=False),
        who=f"**{md(username)}** 님으로 로그인했습니다. **대화 시작**을 눌러 주세요. 본인이 아니면 **로그아웃**을 "
        "누르세요.",
        signout=gr.update(visible=True),
        signed_as=username,
    )
