"""Named errors for the whole project; every message says how to fix the problem.

This module sits at the bottom of the import graph (chatbot -> memory -> models), so every layer raises these.
"""

CODES = (  # the specific codes an error may carry, with the params its Korean message uses
    "empty_message",  # chatbot/session.py: a message with no visible text
    "message_too_long",  # length, limit
    "message_too_many_tokens",  # tokens, limit: more than half the chat model's context window
    "bad_user_name",
    "models_loading",  # chatbot/web/backend.py: the models are still loading
    "storage_full",  # memory/store/connection.py: why the database cannot be written
    "storage_read_only",
    "storage_folder",
    "storage_not_sqlite",
    "storage_other",
    "storage_scheme",  # memory/store/connection.py: --db is a URL of a kind keem cannot use (mysql://)
    "storage_postgres",  # memory/store/postgres.py: the Postgres database cannot be reached or failed; path
    "storage_busy",  # memory/store/connection.py: another process held SQLite's write lock past the wait; path
    "migration_newer",  # memory/store/connection.py: a newer keem wrote the database; path
    "migration_failed",  # path
    "questionnaire_unknown",  # chatbot/study.py and the store: a user trial's questionnaire; items
    "questionnaire_missing",  # item, question
    "questionnaire_range",  # item, question, low, high
    "questionnaire_text",  # item, question
    "questionnaire_too_long",  # item, question, length, limit
    "questionnaire_no_session",
    "questionnaire_done",
    "questionnaire_empty",
    "memory_changed",  # memory/store/rebase.py: a user's edit of a memory another writer changed meanwhile; number
    "memory_recompute",  # an update computed from an older version than another update's; base, latest
    "user_forgotten",  # memory/store/users.py: the user (and so the tab's session) was deleted meanwhile
    "study_wait",  # chatbot/study.py: a session too early after the last one; when (to the minute), zone
    "study_done",  # every session of the study is held
    "study_open_elsewhere",  # another tab's session of the participant counts and is still open
    "organiser_wait",  # chatbot/trials/web.py: a guess at the organiser password within a second of the last one
    "erase_unknown_sentence",  # memory/engine.py forget_sentence: the sentence is not in the user's memory
    "erase_last_sentence",  # the sentence is all the current memory holds
    "erase_update_running",  # memory/store/erasure.py: an update of the user runs now
    "restore_unknown_sentence",  # memory/undo.py: no earlier version of the user held that sentence
    "restore_present",  # the sentence to bring back is in the current memory already
    "revert_nothing",  # no earlier version to revert to; latest (the number of the latest version)
    "model_server_down",  # models/openai_backend.py: the model server cannot be reached
    "model_refused",  # the server refused the request (400)
    "model_server_failed",  # the server answered an error status after the retries (status), or failed mid-answer
    "gpu_stopped",  # chatbot/deploy/zerogpu.py: ZeroGPU stopped a memory update (time limit, quota, no free GPU)
    "delete_last_sentence",  # chatbot/edits.py: deleting the one sentence the memory holds
    "sentence_unknown",  # no sentence with that id in the version named; number
    "token_missing",  # chatbot/api/auth.py: a request without `Authorization: Bearer <token>`
    "token_invalid",  # a token that is unknown, revoked, or whose user was forgotten
    "token_needs_user",  # an app token's request names no user (its `user` field)
    "rate_limited",  # too many requests of one token; retry_after (seconds)
    "not_found",  # chatbot/api: no such resource of this user (another user's answers the same)
    "idempotency_key_reused",  # chatbot/api/sessions.py: an Idempotency-Key sent before with another message
    "idempotency_stale",  # a retried message whose answer cannot be made in its place any more (moved on, ended)
    "if_match_required",  # a change of memory without the version it was read from (If-Match)
    "body_too_large",  # a request body over the limit; limit (bytes)
    "bad_body",  # a request body that is not what the route takes; detail
    "study_api_off",  # a user trial whose plan gives participants no API tokens
    "study_consent",  # a participant who has not agreed to the study's consent text
    "study_own_model",  # chatbot/api/messages.py: a user trial's conversations are with the study's bot only
    "not_started",  # the page: no conversation in this tab yet; start one first
    "sentence_not_picked",  # the page: pick the sentence to change first
    "sentence_not_in_list",  # the page: pick the sentence from the list
    "list_changed",  # the page: the memory changed meanwhile; pick from the list again
    "erase_unconfirmed",  # the page: tick the box to confirm the erasure first; it cannot be undone
    "forget_name_mismatch",  # the page: type the name exactly to confirm forgetting
    "past_not_found",  # the page: that conversation is not this user's or no longer exists; pick from the list again
    "reply_busy",  # the page: a reply is streaming; try again when it has ended
    "session_over",  # the page: this conversation has ended; start a new one
    "nothing_to_redo",  # the page: no message to answer again; send one first
    "nothing_to_stop",  # the page: no reply is streaming
    "consent_no_name",  # the page: enter a name or participant code first
    "consent_unticked",  # the page: tick the consent box first
    "questionnaire_none",  # the page: no questionnaire is waiting; one comes after a conversation ends
    "organiser_off",  # the page: the organiser view is off: set KEEM_ADMIN_PASSWORD on the server and restart
    "organiser_wrong",  # the page: wrong organiser password
    "organiser_locked",  # the page: type the organiser password first
    "models_failed",  # the page: the models could not be loaded (the detail is in the server's log)
    "setting_invalid",  # name: a KEEM_* setting the server was started with is not valid
)


class KeemError(Exception):
    """Base class: an error whose message is meant for the user, one line, with a fix.

    `code` (one of CODES, with `params`) names the error for front ends that show it in another language, so they
    never parse the English message; without one, the class's `kind` names it. chatbot/web/messages.py has the
    Korean message of every code and kind.
    """

    kind = "error"

    def __init__(self, message: str = "", *, code: str | None = None, **params: object):
        super().__init__(message)
        self.code = code
        self.params = params


class InputError(KeemError):
    """The user gave input the system refuses (empty, too long, malformed)."""

    kind = "input"


class ContextOverflowError(KeemError):
    """A prompt does not fit the model's context (a local model's positions, a server's context length): the
    model gives no answer to it. Not the user's input as such: the memory, the history or the budget is too large."""

    kind = "context_overflow"


class UnknownUserError(KeemError):
    """No such user in the database."""

    kind = "unknown_user"


class UserForgottenError(UnknownUserError):
    """The user an open tab or session acts for was deleted ("나를 잊기", `keem memory forget`) meanwhile, from any
    tab or process: nothing more is stored or shown for them; log in again to start anew."""

    kind = "user_forgotten"  # its code too: one Korean message (chatbot/web/messages.py)

    def __init__(self, message: str = "", **params: object):
        super().__init__(message, code="user_forgotten", **params)


class AccessError(KeemError):
    """A request of the HTTP API that its token does not allow: no token, an unknown or revoked one, too many
    requests, or a user trial that gives participants no API access."""

    kind = "access"


class ModelSpecError(KeemError):
    """A model or embedder spec string that does not name a usable backend."""

    kind = "model_spec"


class ModelUnavailableError(KeemError):
    """A backend could not be reached or loaded (server down, package missing, weights missing)."""

    kind = "model_unavailable"


class GenerationError(KeemError):
    """A model call failed after retries, or timed out."""

    kind = "generation"


class NotSupportedError(KeemError):
    """The backend cannot do what was asked (for example log-probability scoring over an API without it)."""

    kind = "not_supported"


class UpdateError(KeemError):
    """A memory update could not run; the previous memory is untouched."""

    kind = "update"


class MemoryChangedError(KeemError):
    """A commit's base version is no longer the user's latest and the change cannot be rebased onto it: a user's
    edit of a sentence changed meanwhile (reload and edit again), or an update after another update (recompute it
    from the latest version; memory/jobs.py does)."""

    kind = "memory_changed"


class JobTakenError(KeemError):
    """An update job this process ran is no longer its own: its lease ran out and another worker took the job over
    (or finished it), its worker stopped and gave it back to the queue, or its user was forgotten. This copy stops
    and writes nothing: no stage, no failure, no version; the job's owner carries on. Nothing to fix: a worker that
    freezes longer than KEEM_JOB_LEASE_S loses its jobs by design."""

    kind = "job_taken"


class StorageError(KeemError):
    """The database cannot be opened or written: a folder or another kind of file, read-only, a full disk."""

    kind = "storage"


class MigrationError(KeemError):
    """The database schema is newer than this program, or a migration failed."""

    kind = "migration"


def describe(exc: BaseException) -> str:
    """One line naming an error for a log or a stored record (an update job's last error): its class, its code in
    brackets when it has one, and its message: "GenerationError[model_server_down]: lost the ..."."""
    code = getattr(exc, "code", None) if isinstance(exc, KeemError) else None
    return f"{type(exc).__name__}{f'[{code}]' if code else ''}: {exc}"


def described(text: str) -> tuple[str | None, str | None]:
    """(kind, code) of an error that `describe` wrote (None, None for any other text): front ends show a stored
    error in their own language from these, never from its message."""
    head = (text or "").split(":", 1)[0]
    name, _, code = head.partition("[")
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, KeemError)):
        return None, None
    named = code.rstrip("]")
    return cls.kind, named if named in CODES else None
