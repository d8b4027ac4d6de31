"""POST /v1/chat/completions: OpenAI's chat completions, plain and streamed, with the user's memory. The server keeps
the conversation (chatbot/api/sessions.py): the request's last user message is the new turn, stored before the reply
is made (ChatSession.record), and answered as the page answers (ChatSession.reply: memory retrieved into the prompt,
what streamed stored even when it stops half-way)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from chatbot.api.context import Credentials, api_of, presented
from chatbot.api.errors import bad_body, error_body
from chatbot.api.schemas import ChatRequest
from chatbot.session import ChatSession
from models.errors import KeemError

router = APIRouter(tags=["chat"])


def new_turn(body: ChatRequest) -> str:
    """The new turn: the last user message (what follows it, e.g. an assistant message a client added, is not)."""
    for message in reversed(body.messages):
        if message.role == "user":
            return message.text()
    raise bad_body("messages: no message with role 'user'; the last user message is what the bot answers")


@router.post(
    "/chat/completions",
    summary="Chat with the user's memory (OpenAI-compatible)",
    response_model=None,
    responses={200: {"description": "a chat.completion, or with stream: text/event-stream chunks ending [DONE]"}},
)
def completions(body: ChatRequest, request: Request, credentials: Credentials) -> JSONResponse | StreamingResponse:
    api = api_of(request)
    who = api.auth.caller(presented(credentials), body.user, create=True)
    text = new_turn(body)
    lock = api.sessions.acquire(who.user_id)
    try:
        session = api.sessions.record(who.user_id, who.name, text)  # stored before the reply; a study's rules hold
        api.ctx.worker.touch(session)
        pieces = session.reply()
        first = next(pieces, None)  # a model that fails at once answers an error status, not a broken stream
    except BaseException:
        lock.release()
        raise
    ident, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model or "keem"
    if not body.stream:
        try:
            reply = (first or "") + "".join(pieces)
        finally:
            pieces.close()
            api.ctx.worker.touch(session)
            lock.release()
        return JSONResponse(
            {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply.strip()}, "finish_reason": "stop"}
                ],
                "usage": usage(session, text, reply),
                "keem": extension(session),
            }
        )
    return StreamingResponse(
        closing(stream(session, first, pieces, lock, ident, created, model, api.ctx.worker.touch)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def closing(events: Generator[str, None, None]) -> AsyncIterator[str]:
    """`events`, each made in a worker thread; when the client leaves (Starlette cancels the response) they are
    closed at once, so the reply is stored as stopped and the user's turn is free for their next request (a
    generator left to the garbage collector kept it for as long as a traceback held it)."""
    try:
        while (event := await anyio.to_thread.run_sync(next, events, None)) is not None:
            yield event
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(events.close)


def stream(
    session: ChatSession,
    first: str | None,
    pieces: Iterator[str],
    lock: threading.Lock,
    ident: str,
    created: int,
    model: str,
    touch: Any,
) -> Generator[str, None, None]:
    """OpenAI's chunks as server-sent events: the role, the pieces, the finish, then `data: [DONE]`. A failure
    after the first piece is an `error` event (what streamed is stored, marked failed)."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **more,
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    try:
        yield chunk({"role": "assistant", "content": ""})
        if first:
            yield chunk({"content": first})
        try:
            for piece in pieces:
                yield chunk({"content": piece})
        except KeemError as exc:
            yield f"data: {json.dumps(error_body(exc), ensure_ascii=False)}\n\n"
        else:
            yield chunk({}, "stop", keem=extension(session))
        yield "data: [DONE]\n\n"
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()  # a client that left: what streamed is stored, marked stopped
        touch(session)
        lock.release()


def usage(session: ChatSession, text: str, reply: str) -> dict[str, int]:
    count = session.chat_model.count_tokens
    prompt, completion = count(text), count(reply)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def extension(session: ChatSession) -> dict[str, Any]:
    """KEEM's own part of a reply: its session and the memory sentences retrieved for it."""
    return {"session_id": session.session_id, "memory": [h.text for h in session.last_hits]}
