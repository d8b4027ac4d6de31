"""The API's errors: every failure is JSON `{"error": {"code", "message", "message_ko", "params"}}` with an HTTP
status from its code (models/errors.py CODES) or kind. Messages never hold a token."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from chatbot.web.messages import korean_error
from models.errors import InputError, KeemError

log = logging.getLogger(__name__)

STATUS_OF_CODE = {
    "token_missing": 401,
    "token_invalid": 401,
    "rate_limited": 429,
    "not_found": 404,
    "sentence_unknown": 404,
    "restore_unknown_sentence": 404,
    "erase_unknown_sentence": 404,
    "user_forgotten": 404,
    "if_match_required": 428,
    "body_too_large": 413,
    "message_too_long": 413,
    "bad_body": 422,
    "idempotency_key_reused": 422,
    "idempotency_stale": 409,
    "token_needs_user": 422,
    "study_api_off": 403,
    "study_consent": 403,
    "study_own_model": 403,
    "study_wait": 403,
    "study_done": 403,
    "study_open_elsewhere": 409,
    "models_loading": 503,
    "memory_changed": 412,
    "memory_recompute": 409,
    "erase_update_running": 409,
    "restore_present": 409,
}
STATUS_OF_KIND = {
    "input": 422,
    "access": 403,
    "unknown_user": 404,
    "user_forgotten": 404,
    "memory_changed": 412,
    "model_unavailable": 503,
    "model_spec": 503,
    "generation": 502,
    "context_overflow": 413,
    "storage": 503,
    "migration": 503,
    "update": 409,
    "job_taken": 409,
}


def status_of(exc: KeemError) -> int:
    return STATUS_OF_CODE.get(exc.code or "", STATUS_OF_KIND.get(exc.kind, 400))


def error_body(exc: KeemError) -> dict[str, Any]:
    """The JSON of an error, as the body of a response or an SSE event of a stream that failed."""
    params = {k: v for k, v in exc.params.items() if isinstance(v, str | int | float | bool | list | tuple)}
    return {
        "error": {
            "code": exc.code or exc.kind,
            "type": exc.kind,
            "message": str(exc),
            "message_ko": korean_error(exc),
            "params": params,
        }
    }


def error_response(exc: KeemError) -> JSONResponse:
    status = status_of(exc)
    headers = {}
    if status == 429 and "retry_after" in exc.params:
        headers["Retry-After"] = str(exc.params["retry_after"])
    if status == 503:
        headers["Retry-After"] = "5"
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="keem"'
    return JSONResponse(error_body(exc), status_code=status, headers=headers)


def bad_body(detail: str, part: str = "the request body") -> InputError:
    """422 `bad_body`: `part` of the request (its body, or its parameters) is not what the route takes."""
    return InputError(f"{part} is not what this route takes: {detail}", code="bad_body", detail=detail)


async def on_keem_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KeemError)
    return error_response(exc)


async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
    """A body or a parameter (query, path) FastAPI could not read as the route takes it: 422 `bad_body` (the code
    API clients know) with where and what, never the values sent; a parameter's message names the parameter, not a
    body ("query.wait: Input should be less than or equal to 30")."""
    assert isinstance(exc, RequestValidationError)
    parts, places = [], set()
    for e in exc.errors()[:5]:
        loc = e.get("loc", ())
        places.add(str(loc[0]) if loc else "body")
        where = ".".join(str(p) for p in loc if p != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    detail = "; ".join(parts) or "invalid JSON"
    if places and places <= {"query", "path"}:
        return error_response(bad_body(detail, "a parameter of the request"))
    return error_response(bad_body(detail))


async def on_http(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own refusals (an unknown route, a method the route does not take) in the same JSON."""
    status = getattr(exc, "status_code", 404)
    if status == 404:
        return error_response(InputError("no such route; see /v1/openapi.json", code="not_found"))
    error = bad_body(f"{request.method} is not a method of {request.url.path}; see /v1/openapi.json")
    return JSONResponse(error_body(error), status_code=status)


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("API %s %s failed", request.method, request.url.path)
    return JSONResponse(
        {"error": {"code": "internal", "type": "internal", "message": "unexpected error; the server log has it"}},
        status_code=500,
    )
