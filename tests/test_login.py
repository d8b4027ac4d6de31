"""Logins in the page (chatbot/web/login.py) and what a visitor never sees: the model servers' addresses."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from chatbot.web.app import launch_options
from chatbot.web.backend import Backend
from chatbot.web.login import MESSAGE, on_load
from chatbot.web.render import model_banner, without_addresses
from models.errors import ModelUnavailableError
from models.openai_backend import OpenAIChatModel
from tests.helpers import make_bot


def test_a_login_hides_the_name_box_and_says_who_is_signed_in() -> None:
    signed = on_load(SimpleNamespace(username="P001"))  # type: ignore[arg-type]
    assert signed.name["visible"] is False and signed.name["value"] == "P001"
    assert "**P001** 님으로 로그인했습니다" in signed.who and signed.signout["visible"] is True
    assert signed.signed_as == "P001"  # the page's sign-out script leaves through /logout only with a login
    anonymous = on_load(SimpleNamespace(username=None))  # type: ignore[arg-type]
    assert anonymous.name is not None and anonymous.who == "" and anonymous.signed_as == ""
    assert anonymous.signout["visible"] is False
    assert launch_options()["auth_message"] == MESSAGE and "비밀번호" in MESSAGE and "나가기" in MESSAGE


def test_the_banner_and_a_load_error_never_show_a_server_address(tmp_path: Path) -> None:
    url = "http://10.0.0.5:8000/v1"
    assert without_addresses(f"korean at {url}") == "korean"
    assert without_addresses(f"lost the server at {url}; check it") == "lost the server; check it"
    model = OpenAIChatModel("korean-chat", base_url=url, api_key="")
    bot = make_bot(tmp_path / "k.db", model)  # type: ignore[arg-type]
    shown = model_banner(bot)
    assert "korean" in shown and "10.0.0.5" not in shown and "10\\.0" not in shown and "http" not in shown
    failed = Backend(None)
    failed.error = ModelUnavailableError(f"cannot reach the OpenAI-compatible server at {url}; is it running?")
    failed.done.set()
    assert "10.0.0.5" not in failed.banner() and "http" not in failed.banner()
