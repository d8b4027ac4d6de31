"""Who a request acts for: its bearer token (memory/store/tokens.py), which names a user, or an app token with the
user the request names; a rate limit per user (an app token: per user it names); in a user trial only participants
the plan lets use the API and who agreed to its consent text. A token never appears in a message or a log line."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from chatbot.session import check_user_name
from chatbot.study import has_consented
from chatbot.web.backend import AppContext
from memory.store import Token
from memory.store.tokens import Tokens
from models.errors import AccessError, InputError

USED_EVERY_S = 60.0  # how often a token's last use is written (not on every request)


@dataclass(frozen=True)
class Caller:
    """The user a request acts for and the token that says so."""

    user_id: int
    name: str
    token_id: int


class Limiter:
    """Requests per minute per caller (a user's token, or an app token with the user it names), a burst of as many:
    counted in the store (memory/store/tokens.py `Tokens.take`, one statement a request), so every app process of
    the store shares one count per caller."""

    def __init__(self, per_min: int, clock: Callable[[], float] = time.time):
        self.per_min, self.clock = max(1, per_min), clock  # wall-clock seconds: processes on other machines share it

    def take(self, tokens: Tokens, token_id: int, user: str | None = None) -> None:
        """One request of the token's caller (`user`: the user an app token names), or AccessError (rate_limited,
        with the seconds to wait)."""
        wait = tokens.take(token_id, user, self.per_min, self.clock())
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise AccessError(
                f"too many requests for this user (at most {self.per_min} a minute, KEEM_API_RATE); retry in "
                f"{seconds} s",
                code="rate_limited",
                retry_after=seconds,
            )


def require(token: str | None) -> str:
    """The token a request presented (`Authorization: Bearer <token>`), or AccessError token_missing."""
    if not token or not token.strip():
        raise AccessError(
            "no API token: send the header 'Authorization: Bearer <token>' (make one with: keem token create --user "
            "NAME)",
            code="token_missing",
        )
    return token.strip()


class Auth:
    """Tokens to callers, with the limiter and the user trial's rules."""

    def __init__(self, ctx: AppContext, per_min: int):
        self.ctx = ctx
        self.limiter = Limiter(per_min)
        self._used: dict[int, float] = {}

    def token(self, presented: str | None) -> Token:
        store = self.ctx.bot.store  # 503 while the models load
        found = store.tokens.verify(require(presented))
        if found is None:
            raise AccessError(
                "this API token is unknown or revoked (or its user was forgotten); make a new one with: keem token "
                "create --user NAME",
                code="token_invalid",
            )
        now = time.monotonic()
        if now - self._used.get(found.id, -USED_EVERY_S) >= USED_EVERY_S:
            self._used[found.id] = now
            store.tokens.used(found.id)
        return found

    def caller(self, presented: str | None, user: str | None = None, *, create: bool = False) -> Caller:
        """Who the request acts for: the token's user; for an app token the `user` the request names (made on its
        first chat when `create`, else it must exist: an unknown one is 404 as another's resources are). In a user
        trial an app token makes no one: nobody is stored before they agree to the consent text."""
        token = self.token(presented)
        store = self.ctx.bot.store
        if token.app:
            if not user:
                raise InputError(
                    "an app token acts for the user the request names: give 'user' (the body's field, or ?user=)",
                    code="token_needs_user",
                )
            name = check_user_name(user)
            self.limiter.take(store.tokens, token.id, name)  # each user an app acts for has the rate a user's token has
            new = create and self.ctx.study is None
            user_id = store.users.get_or_create(name) if new else store.users.find(name)
            if user_id is None and self.ctx.study is not None:
                raise AccessError("this participant has not agreed to the study's consent text", code="study_consent")
            if user_id is None:
                raise InputError(f"no user '{name}' has talked through the API yet", code="not_found")
        else:
            assert token.user_id is not None
            self.limiter.take(store.tokens, token.id)
            user_id = token.user_id
            row = store.one("select name from users where id = ?", [user_id])
            if row is None:  # forgotten while the request came in
                raise AccessError("this API token's user was forgotten", code="token_invalid")
            name = shown_name(row["name"])
        self.check_study(user_id)
        return Caller(user_id, name, token.id)

    def check_study(self, user_id: int) -> None:
        """In a user trial: only when its plan gives participants the API, and only after they agreed to it."""
        study = self.ctx.study
        if study is None:
            return
        if not study.api:
            raise AccessError(
                "this user trial's plan gives participants no API access (set api = true in the study plan)",
                code="study_api_off",
            )
        if not has_consented(self.ctx.bot.store, user_id, study):
            raise AccessError(
                "this participant has not agreed to the study's consent text; agree on the page first",
                code="study_consent",
            )


def shown_name(key: str) -> str:
    """A user's name as the chat knows it, from the store's key (chatbot/bot.py Chatbot.user_key)."""
    return key.split("#", 1)[0].removeprefix("hf:")
