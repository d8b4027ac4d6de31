"""POST /v1/chat/completions: OpenAI's chat completions, plain and streamed, with the user's memory. The server keeps
the conversation (chatbot/api/sessions.py): the request's last user message is the new turn, stored before the reply
is made (ChatSession.record), and answered as the page answers (ChatSession.reply: memory retrieved into the prompt,
what streamed stored even when it stops half-way)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from chatbot.api.context import Credentials, IdempotencyKey, api_of, presented
from chatbot.api.errors import bad_body, error_body
from chatbot.api.schemas import ChatRequest
from chatbot.api.sessions import Attempt, body_digest
from chatbot.session import ChatSession
from chatbot.web.frames import Frames
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
def completions(
    body: ChatRequest,
    request: Request,
    credentials: Credentials,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse | StreamingResponse:
    api = api_of(request)
    who = api.auth.caller(presented(credentials), body.user, create=True)
    text = new_turn(body)
    ident, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model or "keem"
    lock = api.sessions.acquire(who.user_id)
    try:
        sent = body_digest("chat", body, ignore=("stream",))  # what a retry under the key must send again
        earlier = api.sessions.attempt(who.user_id, idempotency_key, sent) if idempotency_key is not None else None
        if earlier is not None and (stored := api.sessions.stored_reply(earlier)) is not None:
            keem = {"session_id": earlier.session_id, "memory": [], "replayed": True}
            lock.release()  # answered before: no model call, nothing stored
            return answer(body.stream, ident, created, model, stored, None, keem, api.chunks)
        attempt: Attempt | None = earlier
        if earlier is not None:  # stored, its answer missing or cut: answer it again
            session = api.sessions.again(who.user_id, who.name, earlier)
        else:
            session = api.sessions.record(who.user_id, who.name, text)  # stored before the reply; study rules hold
            if idempotency_key:
                made = Attempt(sent, session.session_id, session.replying_to)
                attempt = api.sessions.remember(who.user_id, idempotency_key, made)
        api.ctx.worker.touch(session)
        pieces = session.reply()
        first = next(pieces, None)  # a model that fails at once answers an error status, not a broken stream
    except BaseException:
        lock.release()
        raise

    def finish() -> None:
        try:
            if attempt is not None and idempotency_key:
                api.sessions.replied(who.user_id, idempotency_key, attempt, session.stored_reply)
            api.ctx.worker.touch(session)
        finally:
            lock.release()

    if not body.stream:
        try:
            reply = (first or "") + "".join(pieces)
        finally:
            pieces.close()
            finish()
        counts = usage(session, text, reply)
        return answer(False, ident, created, model, reply.strip(), counts, extension(session), api.chunks)
    return StreamingResponse(
        closing(stream(first, pieces, finish, ident, created, model, lambda: extension(session), api.chunks)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def answer(
    streamed: bool,
    ident: str,
    created: int,
    model: str,
    reply: str,
    counts: dict[str, int] | None,
    keem: dict[str, Any],
    chunks: Frames,
) -> JSONResponse | StreamingResponse:
    """A whole reply as a chat.completion, or as the stream of one (a stored reply given again)."""
    if streamed:
        return StreamingResponse(
            closing(stream(reply, iter(()), lambda: None, ident, created, model, lambda: keem, chunks)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    completion = {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        **({"usage": counts} if counts is not None else {}),
        "keem": keem,
    }
    return JSONResponse(completion)


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
    first: str | None,
    pieces: Iterator[str],
    finish: Callable[[], None],
    ident: str,
    created: int,
    model: str,
    keem: Callable[[], dict[str, Any]],
    chunks: Frames,
) -> Generator[str, None, None]:
    """OpenAI's chunks as server-sent events: the role, the pieces, the finish, then `data: [DONE]`. The first piece
    goes at once; then, paced by `chunks` (the process's budget of chunks a second), the pieces that came since the
    last chunk go together in the next one, and the last ones with the end. A failure after the first piece is an
    `error` event after the pieces before it (what streamed is stored, marked failed). `finish` runs last, however
    the stream ends."""

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
        came: list[str] = []  # pieces not sent yet
        try:
            with chunks.stream() as due:
                due()  # the first piece's chunk went just now
                for piece in pieces:
                    came.append(piece)
                    if due():
                        yield chunk({"content": "".join(came)})
                        came.clear()
        except KeemError as exc:
            if came:
                yield chunk({"content": "".join(came)})
            yield f"data: {json.dumps(error_body(exc), ensure_ascii=False)}\n\n"
        else:
            if came:
                yield chunk({"content": "".join(came)})
            yield chunk({}, "stop", keem=keem())
        yield "data: [DONE]\n\n"
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()  # a client that left: what streamed is stored, marked stopped
        finish()


def usage(session: ChatSession, text: str, reply: str) -> dict[str, int]:
    count = session.chat_model.count_tokens
    prompt, completion = count(text), count(reply)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def extension(session: ChatSession) -> dict[str, Any]:
    """KEEM's own part of a reply: its session and the memory sentences retrieved for it."""
    return {"session_id": session.session_id, "memory": [h.text for h in session.last_hits]}
