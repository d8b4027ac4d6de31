"""Ending the user's API conversation (its memory update is queued: 202 with the job's id), following an update job,
and the user's past conversations: the same records the page's 지난 대화 shows (store.sessions.past, turns.of_session),
whichever front end held them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from chatbot.api.auth import Caller
from chatbot.api.context import Who, api_of
from memory.store import Store
from models.errors import InputError, described

router = APIRouter(tags=["sessions"])
JOB_FIELDS = ("id", "session_id", "status", "stage", "attempts", "created_at", "updated_at")
FINISHED = ("done", "failed")  # a job waited for (`?wait=`) is answered as soon as it is in one of these
WAIT_MAX_S = 30.0  # the longest `?wait=`: under HAProxy's and most proxies' idle timeouts
WAIT_EVERY_S = 0.5


def not_found(what: str) -> InputError:
    return InputError(f"no {what} of this user", code="not_found")


@router.post("/sessions/end", status_code=202, summary="End the open API conversation; its memory update is queued")
def end_session(request: Request, who: Who) -> JSONResponse:
    api = api_of(request)
    session_id, job_id = api.sessions.end(who.user_id)
    return JSONResponse({"session_id": session_id, "job_id": job_id}, status_code=202)


def owned(get: Callable[[int], dict[str, Any]], row_id: int, who: Caller, what: str) -> dict[str, Any]:
    """The row `get` finds for `row_id` when it is the caller's; another user's answers as one that does not exist
    (404, never 403), as a missing one does."""
    try:
        row = get(row_id)
    except InputError:
        raise not_found(f"{what} {row_id}") from None
    if row["user_id"] != who.user_id:
        raise not_found(f"{what} {row_id}")
    return row


@router.get("/jobs/{job_id}", summary="A memory update job: status, stage, and the version it made")
async def job(
    job_id: int,
    request: Request,
    who: Who,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=WAIT_MAX_S,
            description=f"seconds (at most {WAIT_MAX_S:.0f}) to wait for the job to finish before answering: one "
            "request instead of a poll every half second; 0 (the default) answers at once",
        ),
    ] = 0,
) -> dict[str, Any]:
    return await waited_job(api_of(request).ctx.bot.store, job_id, who, wait)


async def waited_job(store: Store, job_id: int, who: Caller, wait: float) -> dict[str, Any]:
    """The caller's job (`job_json`) once it is done or failed, or when `wait` seconds are over (the HTTP route's
    `?wait=`, the MCP job tool's `wait`)."""
    return await asyncio.to_thread(row_json, store, await finished(store, job_id, who, wait))


async def finished(store: Store, job_id: int, who: Caller, wait: float) -> dict[str, Any]:
    """The caller's job row once it is done or failed, or when `wait` seconds are over: it is read (one indexed
    lookup, in a thread) every WAIT_EVERY_S meanwhile, and a job of another user, or one gone with its forgotten
    user, is not found at once or at the next read."""
    deadline = time.monotonic() + wait
    row = await asyncio.to_thread(owned, store.queue.get, job_id, who, "job")
    while row["status"] not in FINISHED and (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(WAIT_EVERY_S, left))
        row = await asyncio.to_thread(owned, store.queue.get, job_id, who, "job")
    return row


def job_json(store: Store, job_id: int, who: Caller) -> dict[str, Any]:
    """A memory update job of the caller's: status (pending, running, done, failed), stage, the version it made."""
    return row_json(store, owned(store.queue.get, job_id, who, "job"))


def row_json(store: Store, row: dict[str, Any]) -> dict[str, Any]:
    """`job_json` of a job row already read (and checked to be the caller's)."""
    made = store.one("select number from memory_versions where id = ?", [row["version_id"]])
    kind, code = described(row.get("last_error") or "")
    return {
        **{k: row.get(k) for k in JOB_FIELDS},
        "version": made["number"] if made else None,
        "error": {"type": kind, "code": code} if row.get("last_error") else None,
    }


@router.get("/sessions", summary="The user's ended conversations, newest first (the page's 지난 대화)")
def past(request: Request, who: Who) -> dict[str, Any]:
    store = api_of(request).ctx.bot.store
    return {"sessions": store.sessions.past(who.user_id)}


@router.get("/sessions/{session_id}", summary="One conversation's turns, as stored")
def transcript(session_id: int, request: Request, who: Who) -> dict[str, Any]:
    store = api_of(request).ctx.bot.store
    session = owned(store.sessions.get, session_id, who, "session")
    turns = store.turns.of_session(session_id, replaced=True)
    return {
        "id": session_id,
        "started_at": session["started_at"],
        "ended_at": session["ended_at"],
        "status": session["status"],
        "turns": [{"id": t["id"], "role": t["role"], "text": t["text"], "mark": t.get("mark")} for t in turns],
    }
