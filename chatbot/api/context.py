"""What every route shares (the page's AppContext, the token checks, the open API sessions) and the dependency that
turns a request's token into its Caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from chatbot.api.auth import Auth, Caller
from chatbot.api.sessions import ApiSessions
from chatbot.web.backend import AppContext
from chatbot.web.frames import Frames

# A streamed reply sends at most 20 chunks a second (each with the pieces that came since the last), and the replies
# streaming at once in a process share 200 a second: chatbot/web/frames.py
CHUNK_S = 0.05
CHUNKS_PER_S = 200


class Api:
    """The API's state: the same AppContext as the page's handlers (backend, study, worker)."""

    def __init__(self, ctx: AppContext, rate_per_min: int):
        self.ctx = ctx
        self.auth = Auth(ctx, rate_per_min)
        self.sessions = ApiSessions(ctx)
        self.chunks = Frames(per_s=CHUNKS_PER_S, min_s=CHUNK_S)  # the streamed replies' chunks (chat.py `stream`)


def api_of(request: Request) -> Api:
    api = request.app.state.keem
    assert isinstance(api, Api)
    return api


# `Authorization: Bearer <token>` (keem token create); checked by Auth, so the schema lists it as the API's security
BEARER = HTTPBearer(auto_error=False, description="a token from: keem token create --user NAME (or --app)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


def presented(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials if credentials is not None else None


def caller(
    request: Request,
    credentials: Credentials,
    user: Annotated[str | None, Query(description="the user an app token acts for")] = None,
) -> Caller:
    return api_of(request).auth.caller(presented(credentials), user)


Who = Annotated[Caller, Depends(caller)]

# One key per new message or batch of turns (a UUID): the same request sent again with it stores nothing twice
IdempotencyKey = Annotated[
    str | None,
    Header(
        description="one key per new message (a UUID): the same request sent again with it (a retry after a "
        "lost answer) stores nothing twice and gets the stored answer"
    ),
]
