"""Sign in with Hugging Face: the HF username is the identity, in its own namespace of the store's user names."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

from chatbot.web import identity as hf_login
from chatbot.web.chat import ChatUI
from chatbot.web.view import KEEP
from chatbot.worker import Worker
from memory.store import Sentence
from models.errors import InputError
from tests.helpers import make_bot


def profile(username: str) -> gr.OAuthProfile:
    return gr.OAuthProfile({"name": "김민수", "preferred_username": username, "profile": "", "picture": ""})


def test_the_button_is_on_where_the_space_has_oauth_or_when_asked() -> None:
    assert not hf_login.enabled({})
    assert hf_login.enabled({"OAUTH_CLIENT_ID": "abc"})  # what `hf_oauth: true` gives a Space
    assert not hf_login.enabled({"OAUTH_CLIENT_ID": "abc", "KEEM_HF_LOGIN": "0"})
    assert hf_login.enabled({"KEEM_HF_LOGIN": "1"})  # locally, with Gradio's mocked sign-in
    with pytest.raises(InputError, match="KEEM_HF_LOGIN"):
        hf_login.enabled({"KEEM_HF_LOGIN": "maybe"})
    assert hf_login.account(None) is None and hf_login.account(profile("minsu")) == "minsu"


def test_an_hf_account_never_shares_memory_with_a_typed_name_or_a_browser_identity(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "keem.db")
    worker = Worker(bot)
    ui, public = ChatUI(bot, worker), ChatUI(bot, worker, browser_identity=True)
    signed = ui.entry.login("아무 이름", profile=profile("minsu")).state
    assert signed.name == "minsu" and bot.store.users.all()[0]["name"] == "hf:minsu"
    bot.engine.commit(
        signed.user_id, [Sentence("사용자는 제주도에 산다")], base=None, strategy="keem", status="ok", author="user"
    )
    typed = ui.entry.login("minsu").state  # the same name typed, without signing in
    visitor_out = public.entry.login("minsu", None)
    visitor, key = visitor_out.state, visitor_out.key
    assert len({signed.user_id, typed.user_id, visitor.user_id}) == 3
    assert bot.engine.current(typed.user_id) is None and bot.engine.current(visitor.user_id) is None
    assert {u["name"] for u in bot.store.users.all()} == {"hf:minsu", "minsu", f"minsu#{key}"}
    with pytest.raises(InputError):
        ui.entry.login("hf:minsu")  # the namespace cannot be typed
    again = public.entry.login("", key, profile=profile("minsu"))  # signed in on a public Space: the account wins
    assert again.state.user_id == signed.user_id and bot.engine.current(again.state.user_id) is not None
    assert again.key is KEEP  # and this browser's own key is left as it was


def test_a_signed_in_user_can_forget_everything(tmp_path: Path) -> None:
    bot = make_bot(tmp_path / "keem.db")
    ui = ChatUI(bot, Worker(bot))
    state = ui.entry.login("", profile=profile("minsu")).state
    bot.engine.commit(
        state.user_id, [Sentence("사용자는 제주도에 산다")], base=None, strategy="keem", status="ok", author="user"
    )
    ui.memory.forget("minsu", state)
    assert "hf:minsu" not in {u["name"] for u in bot.store.users.all()}
