"""What every route shares (the page's AppContext, the token checks, the open API sessions) and the dependency that
turns a request's token into its Caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from chatbot.api.auth import Auth, Caller
from chatbot.api.sessions import ApiSessions
from chatbot.web.backend import AppContext


class Api:
    """The API's state: the same AppContext as the page's handlers (backend, study, worker)."""

    def __init__(self, ctx: AppContext, rate_per_min: int):
        self.ctx = ctx
        self.auth = Auth(ctx, rate_per_min)
        self.sessions = ApiSessions(ctx)


def api_of(request: Request) -> Api:
    api = request.app.state.keem
    assert isinstance(api, Api)
    return api


def caller(
    request: Request,
    authorization: Annotated[str | None, Header(description="Bearer <token> (keem token create)")] = None,
    user: Annotated[str | None, Query(description="the user an app token acts for")] = None,
) -> Caller:
    return api_of(request).auth.caller(authorization, user)


Who = Annotated[Caller, Depends(caller)]
