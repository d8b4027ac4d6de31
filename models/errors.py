"""Named errors for the whole project; every message says how to fix the problem.

This module sits at the bottom of the import graph (chatbot -> memory -> models), so every layer raises these.
"""


class KeemError(Exception):
    """Base class: an error whose message is meant for the user, one line, with a fix.

    `code` (with `params`) names the error for front ends that show it in another language (chatbot/web/render.py),
    so they never parse the English message.
    """

    def __init__(self, message: str = "", *, code: str | None = None, **params: object):
        super().__init__(message)
        self.code = code
        self.params = params


class InputError(KeemError):
    """The user gave input the system refuses (empty, too long, malformed)."""


class UnknownUserError(KeemError):
    """No such user in the database."""


class ModelSpecError(KeemError):
    """A model or embedder spec string that does not name a usable backend."""


class ModelUnavailableError(KeemError):
    """A backend could not be reached or loaded (server down, package missing, weights missing)."""


class GenerationError(KeemError):
    """A model call failed after retries, or timed out."""


class NotSupportedError(KeemError):
    """The backend cannot do what was asked (for example log-probability scoring over an API without it)."""


class UpdateError(KeemError):
    """A memory update could not run; the previous memory is untouched."""


class StorageError(KeemError):
    """The database cannot be opened or written: a folder or another kind of file, read-only, a full disk."""


class MigrationError(KeemError):
    """The database schema is newer than this program, or a migration failed."""
