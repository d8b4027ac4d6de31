"""Sign in with Hugging Face (a Space with `hf_oauth: true`): the HF username is the identity, on every device.

Visitors who do not sign in keep the identity they had (the typed name, within this browser on a public Space).
A signed-in user is stored as "hf:<username>" (chatbot/session.py Chatbot.start): a typed name can never contain
':' (USER_NAME) and a per-browser identity is "name#key", so no one reaches an HF user's memory by typing a name.

Off the Space, Gradio mocks the sign-in with the account this machine is logged in to (`huggingface-cli login`),
which is how to try it locally: `KEEM_HF_LOGIN=1 python app.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import gradio as gr

from chatbot.web.render import md
from chatbot.web.view import PageView
from models.errors import InputError

BUTTON = "Hugging Face로 로그인"
SIGNED_IN = "로그아웃 ({})"
HINT = (
    "Hugging Face로 로그인하면 어느 기기에서든 같은 기억으로 이어집니다. 로그인하지 않으면 입력한 이름으로 대화합니다."
)


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """KEEM_HF_LOGIN=1 or 0 decides; unset, it is on where the Space has OAuth (`hf_oauth: true` sets
    OAUTH_CLIENT_ID)."""
    env = os.environ if env is None else env
    choice = env.get("KEEM_HF_LOGIN", "").strip().lower()
    if choice in ("1", "true", "yes"):
        return True
    if choice in ("0", "false", "no"):
        return False
    if choice:
        raise InputError(
            f"KEEM_HF_LOGIN={choice!r}: use 1 (the page's Hugging Face login button), 0, or leave it unset",
            code="setting_invalid",
            name="KEEM_HF_LOGIN",
        )
    return bool(env.get("OAUTH_CLIENT_ID"))


def account(profile: Any) -> str | None:
    """The username of a signed-in visitor (a gr.OAuthProfile), or None."""
    if not profile:
        return None
    name = profile.get("preferred_username") if isinstance(profile, Mapping) else None
    return str(getattr(profile, "username", None) or name or "") or None


def login_controls() -> gr.Markdown:
    """The sign-in button and its hint, placed in the login box; returns the hint (the page load rewrites it)."""
    gr.LoginButton(BUTTON, logout_value=SIGNED_IN, elem_id="hf-login-button")
    return gr.Markdown(HINT, elem_id="hf-login-note")


def on_load(profile: gr.OAuthProfile | None = None) -> PageView:
    """Page load: a signed-in visitor sees their HF name in the name box (locked); others type a name."""
    username = account(profile)
    if username is None:
        return PageView(name=gr.update(interactive=True), hf_note=HINT)
    return PageView(
        name=gr.update(value=username, interactive=False),
        hf_note=f"Hugging Face 계정 **{md(username)}** 으로 로그인했습니다. "
        "'대화 시작'을 누르면 이 계정의 기억으로 이어집니다.",
    )
