"""KEEM's memory beside a builder's own model: POST /v1/sessions/messages stores the turns of a conversation the
builder's bot held (the user's messages and its own model's replies) in the user's open API conversation, which ends
and updates the memory as any other (POST /v1/sessions/end, or the idle timeout); when the last turn stored is the
user's, the answer holds the prompt KEEM's own chat would send a model for it (ChatSession.prompt: the memory pinned
for the session, what was retrieved for the message). GET /v1/memory/search (chatbot/api/memory.py) is the search
alone."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from chatbot.api.auth import Caller
from chatbot.api.context import Api, Credentials, IdempotencyKey, api_of, presented
from chatbot.api.errors import bad_body
from chatbot.api.schemas import TurnsRequest
from chatbot.api.sessions import Attempt, body_digest
from chatbot.session import SKIPPED_ROLES, ChatSession
from models.errors import AccessError

router = APIRouter(tags=["sessions"])


@router.post(
    "/sessions/messages",
    status_code=201,
    summary="Store turns your own model held with the user; the memory update reads them as it reads KEEM's own",
)
def store_turns(
    body: TurnsRequest, request: Request, credentials: Credentials, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    api = api_of(request)
    who = api.auth.caller(presented(credentials), body.user, create=True)
    turns = said_turns(api, [(m.role, m.text()) for m in body.messages])
    skipped = len(body.messages) - len(turns)
    sent = body_digest("turns", body)  # what a retry under the Idempotency-Key must send again
    with api.sessions.turn(who.user_id):
        earlier = api.sessions.attempt(who.user_id, idempotency_key, sent) if idempotency_key else None
        if earlier is not None:  # stored before: nothing stored again; the prompt again while its reply is due
            replayed: dict[str, Any] = {"session_id": earlier.session_id, "turn_ids": list(earlier.turn_ids)}
            waiting = api.sessions.awaiting(who.user_id, who.name, earlier)
            return JSONResponse({**replayed, **(due(waiting) if waiting else {}), "replayed": True}, status_code=200)
        session, ids = record_turns(api, who, turns)
        if idempotency_key:
            made = Attempt(sent, session.session_id, ids[-1] if turns[-1][0] == "user" else None, turn_ids=tuple(ids))
            api.sessions.remember(who.user_id, idempotency_key, made)
        answer: dict[str, Any] = {"session_id": session.session_id, "turn_ids": ids, "skipped": skipped}
        if turns[-1][0] == "user":
            answer.update(due(session))
    return JSONResponse(answer, status_code=201)


def due(session: ChatSession) -> dict[str, Any]:
    """A reply is due: the prompt KEEM's own chat would send its model for it, and the memory retrieved into it."""
    prompt = session.prompt()
    return {"prompt": prompt, "memory": [{"sentence_id": h.sentence_id, "text": h.text} for h in session.last_hits]}


def said_turns(api: Api, messages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (role, text) turns to store of a conversation's next messages: user and assistant turns, in order (system,
    developer and tool messages are a prompt's parts, not what was said). Refused in a user trial, whose
    conversations are held with the study's own bot."""
    if api.ctx.study is not None:
        raise AccessError(
            "a user trial's conversations are held with the study's own bot: use POST /v1/chat/completions",
            code="study_own_model",
        )
    turns = [(role, text) for role, text in messages if role not in SKIPPED_ROLES]
    if not turns:
        raise bad_body("messages: no 'user' or 'assistant' turn to store (system and tool messages are not stored)")
    return turns


def record_turns(api: Api, who: Caller, turns: list[tuple[str, str]]) -> tuple[ChatSession, list[int]]:
    """Store the turns in the caller's open API conversation (ChatSession.record_turns: each checked as a typed
    message, all or none), which the worker then watches for idleness (call it holding the user's turn)."""
    session, ids = api.sessions.record_turns(who.user_id, who.name, turns)
    api.ctx.worker.touch(session)
    return session, ids
