"""The user's memory: read it (current version with sentence ids, emotion records, ETag = version number), its
history, why a sentence is there, what an update changed; change it through the same core as the page's memory tab
(chatbot/edits.py, memory/undo.py, Chatbot.forget_sentence / forget). A change of what was read names the version it
was read from (`If-Match`); a stale one is 412 memory_changed, and nothing is written."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse

from chatbot import edits
from chatbot.api.context import Api, Who, api_of
from chatbot.api.errors import bad_body
from chatbot.api.schemas import SEARCH_MAX_CHARS, RestoreBody, RevertBody, SearchBody, SentenceBody
from memory.changelog import changelog
from memory.dates import as_read, read_on
from memory.provenance import explain_all
from memory.store import Version
from memory.undo import dropped_sentence, restore, revert
from models.errors import InputError, MemoryChangedError

router = APIRouter(tags=["memory"])
IfMatch = Annotated[str | None, Header(description="the memory version the change was read from (its ETag)")]


def version_json(api: Api, version: Version | None, today: date | None = None, *, read: bool = True) -> dict[str, Any]:
    """A version as the API shows it: number, when, by whom, sentences with their ids (and, `read`, where a sentence's
    times read differently on `today`, default the server's today, how the chat reads it: "as_read"), emotion
    records."""
    if version is None:
        return {"version": 0, "sentences": [], "emotions": []}
    shown = version.as_json()
    if read:
        shown = read_on(shown, today or api.ctx.bot.settings.local_time.today())
    if api.ctx.blind:  # a trial participant never learns their strategy
        shown.pop("strategy", None)
        shown.pop("model", None)
        shown.pop("prompt_hash", None)
    return {**shown, "emotions": [r.as_json() for r in version.records]}


def answer(api: Api, version: Version | None, status: int = 200, today: date | None = None) -> JSONResponse:
    body = version_json(api, version, today)
    return JSONResponse(body, status_code=status, headers={"ETag": f'"{body["version"]}"'})


def fresh(api: Api, user_id: int, if_match: str | None, *, required: bool = True) -> Version | None:
    """The latest version, when it is the one `If-Match` names (0: no memory yet); a stale one is refused."""
    latest = api.ctx.bot.engine.current(user_id)
    number = latest.number if latest else 0
    if if_match is None:
        if required:
            raise InputError(
                "this change needs the memory version it was read from: send GET /v1/memory's ETag as If-Match",
                code="if_match_required",
            )
        return latest
    given = if_match.strip().removeprefix("W/").strip('"')
    if not given.isdigit():
        raise bad_body(f'If-Match must be a version number such as "{number}" (GET /v1/memory\'s ETag)')
    if int(given) != number:
        raise MemoryChangedError(
            f"the memory is v{number} now, not v{given}: read it again (GET /v1/memory) and decide again",
            code="memory_changed",
            number=number,
        )
    return latest


def current(api: Api, user_id: int) -> Version:
    latest = api.ctx.bot.engine.current(user_id)
    if latest is None:
        raise InputError("this user has no memory yet: it is written when a conversation ends", code="not_found")
    return latest


@router.get("/memory", summary="The current memory (or as it stood on as_of): sentences with ids, emotion records")
def get_memory(
    request: Request,
    who: Who,
    as_of: Annotated[
        date | None,
        Query(description="YYYY-MM-DD: the memory as it stood at the end of that day (KEEM_TIMEZONE), read as then"),
    ] = None,
) -> JSONResponse:
    """ETag is the version's number (for If-Match); with `as_of`, the version of that day (version 0 if none yet),
    each sentence's times read as on that day."""
    api = api_of(request)
    if as_of is None:
        return answer(api, api.ctx.bot.engine.current(who.user_id))
    end = api.ctx.bot.settings.local_time.end_of(as_of)
    return answer(api, api.ctx.bot.store.versions.as_of(who.user_id, end), today=as_of)


@router.get("/memory/search", summary="The memory sentences most relevant to a text, best first, as a reply finds them")
def search(
    request: Request,
    who: Who,
    q: Annotated[
        str, Query(max_length=SEARCH_MAX_CHARS, description="the text to find memory for, e.g. the user's message")
    ],
    k: Annotated[int, Query(ge=1, le=50, description="how many sentences")] = 5,
) -> dict[str, Any]:
    return search_json(api_of(request), who.user_id, q, k)


@router.post("/memory/search", summary="The same search for a text too long for a URL (a pasted document), as JSON")
def search_posted(request: Request, who: Who, body: SearchBody) -> dict[str, Any]:
    return search_json(api_of(request), who.user_id, body.q, body.k)


def search_json(api: Api, user_id: int, q: str, k: int) -> dict[str, Any]:
    """The search a reply makes (MemoryEngine.search), best first: each sentence with its id, how the chat reads its
    times today ("as_read", where that differs), the words its times were said in ("dates"), score, the emotion
    records it holds (emotion, cause, status, dates) and when the conversations it comes from began."""
    if not q.strip():
        raise bad_body("q: give the text to search the memory for, e.g. the user's message")
    bot = api.ctx.bot
    hits = bot.engine.search(user_id, q, k=k)
    latest = bot.engine.current(user_id)
    ids = [s.id for s in latest.sentences] if latest else []
    said = explain_all(bot.store, latest) if latest and hits else []
    when, today = bot.settings.local_time.iso, bot.settings.local_time.today()
    results = []
    for h in hits:
        place = ids.index(h.sentence_id) if h.sentence_id in ids else None
        records = [r.as_json() for r in latest.records if r.sentence_id == h.sentence_id] if latest else []
        results.append(
            {
                "sentence_id": h.sentence_id,
                "text": h.text,
                **({"as_read": read} if (read := as_read(h.text, today)) else {}),
                "dates": list(latest.sentences[place].dates) if latest and place is not None else [],
                "score": round(h.score, 4),
                "emotions": records,
                "said_in": [when(at) for at in said[place].sessions] if place is not None else [],
            }
        )
    return {"version": latest.number if latest else 0, "results": results}


@router.get("/memory/history", summary="Every version, oldest first, without its sentences")
def history(request: Request, who: Who) -> dict[str, Any]:
    api = api_of(request)
    versions = api.ctx.bot.store.versions.of_user(who.user_id)
    out = []
    for v in versions:
        shown = version_json(api, v, read=False)
        shown["size"] = len(shown.pop("sentences"))
        shown.pop("emotions")
        out.append(shown)
    return {"versions": out}


@router.get("/memory/versions/{number}", summary="One version of the memory, whole")
def get_version(number: int, request: Request, who: Who) -> JSONResponse:
    return JSONResponse(numbered_json(api_of(request), who.user_id, number))


def numbered_json(api: Api, user_id: int, number: int) -> dict[str, Any]:
    """One version of the user's memory, whole; not_found for a number they have none of."""
    try:
        version = api.ctx.bot.store.versions.get(user_id, number)
    except InputError:
        raise InputError(f"no memory version {number} of this user", code="not_found") from None
    return version_json(api, version)


@router.get("/memory/changes", summary="What a version changed over the one before it, and why")
def changes(request: Request, who: Who, version: int | None = None) -> dict[str, Any]:
    return changes_json(api_of(request), who.user_id, version)


def changes_json(api: Api, user_id: int, version: int | None) -> dict[str, Any]:
    """What `version` (default: the latest) changed over the one before it, and why (memory/changelog.py)."""
    store = api.ctx.bot.store
    try:
        shown = store.versions.get(user_id, version) if version else current(api, user_id)
    except InputError:
        raise InputError(f"no memory version {version} of this user", code="not_found") from None
    previous = store.versions.get(user_id, shown.number - 1) if shown.number > 1 else None
    log = changelog(store, previous, shown, blind=api.ctx.blind)
    return log.as_json(api.ctx.bot.settings.local_time.iso)


@router.get("/memory/sentences/{sentence_id}/why", summary="Where a sentence of the current memory came from")
def why(sentence_id: int, request: Request, who: Who) -> dict[str, Any]:
    return why_json(api_of(request), who.user_id, sentence_id)


def why_json(api: Api, user_id: int, sentence_id: int) -> dict[str, Any]:
    """Where a sentence of the current memory came from (memory/provenance.py); sentence_unknown for another id."""
    latest = current(api, user_id)
    index = edits.index_of(latest, sentence_id)
    shown = explain_all(api.ctx.bot.store, latest)[index]
    return {"version": latest.number, **shown.as_json(api.ctx.bot.settings.local_time.iso)}


@router.post("/memory/sentences", status_code=201, summary="Add a sentence (If-Match optional)")
def add_sentence(body: SentenceBody, request: Request, who: Who, if_match: IfMatch = None) -> JSONResponse:
    api = api_of(request)
    fresh(api, who.user_id, if_match, required=False)
    return answer(api, edits.add(api.ctx.bot.engine, who.user_id, body.text), 201)


@router.patch("/memory/sentences/{sentence_id}", summary="Rewrite a sentence (If-Match required)")
def edit_sentence(
    sentence_id: int, body: SentenceBody, request: Request, who: Who, if_match: IfMatch = None
) -> JSONResponse:
    api = api_of(request)
    latest = fresh(api, who.user_id, if_match) or current(api, who.user_id)
    index = edits.index_of(latest, sentence_id)
    return answer(api, edits.edit(api.ctx.bot.engine, who.user_id, latest, index, body.text))


@router.delete("/memory/sentences/{sentence_id}", summary="Leave a sentence out of a new version (If-Match required)")
def delete_sentence(sentence_id: int, request: Request, who: Who, if_match: IfMatch = None) -> JSONResponse:
    api = api_of(request)
    latest = fresh(api, who.user_id, if_match) or current(api, who.user_id)
    index = edits.index_of(latest, sentence_id)
    return answer(api, edits.delete(api.ctx.bot.engine, who.user_id, latest, index))


@router.post(
    "/memory/sentences/{sentence_id}/erase",
    summary="Erase a sentence completely: from every version, the turns that said it redacted, no copy kept",
)
def erase_sentence(sentence_id: int, request: Request, who: Who, if_match: IfMatch = None) -> JSONResponse:
    api = api_of(request)
    latest = fresh(api, who.user_id, if_match, required=False) or current(api, who.user_id)
    return JSONResponse(erase_json(api, who.user_id, latest, sentence_id))


def erase_json(api: Api, user_id: int, latest: Version, sentence_id: int) -> dict[str, Any]:
    """Erase a sentence of `latest` as the page's 완전히 지우기 does (Chatbot.forget_sentence: every version, the
    turns that said it, no copy); what was erased and the memory now."""
    index = edits.index_of(latest, sentence_id)
    erased = api.ctx.bot.forget_sentence(user_id, latest.sentences[index].text)
    return {"erased": erased.counts, **version_json(api, api.ctx.bot.engine.current(user_id))}


@router.post("/memory/restore", summary="Bring back a sentence an earlier version held")
def restore_sentence(body: RestoreBody, request: Request, who: Who) -> JSONResponse:
    api = api_of(request)
    engine = api.ctx.bot.engine
    sentence = dropped_sentence(engine, who.user_id, body.sentence_id)  # 404 unless it was this user's
    return answer(api, restore(engine, who.user_id, sentence))


@router.post("/memory/revert", summary="A new version equal to an earlier one (If-Match required)")
def revert_to(body: RevertBody, request: Request, who: Who, if_match: IfMatch = None) -> JSONResponse:
    api = api_of(request)
    latest = fresh(api, who.user_id, if_match) or current(api, who.user_id)
    return answer(api, revert(api.ctx.bot.engine, who.user_id, body.to, base=latest.number))


@router.delete("/user", summary="Forget the user: every conversation, version and token; no copy kept")
def forget(
    request: Request, who: Who, confirm: Annotated[bool, Query(description="true: forgetting is final")] = False
) -> dict[str, Any]:
    if confirm is not True:
        raise bad_body("forgetting is final: send ?confirm=true")
    api = api_of(request)
    api.sessions.drop(who.user_id)
    erased = api.ctx.bot.forget(who.user_id)
    return {"forgotten": True, "erased": erased.counts}
