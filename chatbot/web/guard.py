"""What the app's server refuses before Gradio handles a request (one FastAPI dependency on every route): uploads of
any kind, direct REST calls of its events, and a private file (an organiser's export) to any login but the one it
was made for.

The page itself needs none of these: it runs its events through Gradio's queue (queue/join) and the one unqueued
event (ending a session) through /run/predict, which `build_app` limits to unqueued events (Blocks.api_open off).
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path
from urllib.parse import unquote

import fastapi

API = "/gradio_api"
UPLOAD_ROUTES = ("/upload", "/process_recording")  # Gradio 6's upload routes (multipart bodies)
DIRECT_ROUTES = ("/call/",)  # REST calls by api name, private events included (through the queue)
PRIVATE_PREFIX = "keem-private-"  # the name of a file served only to the login it was made for


class PrivateFiles:
    """Files served only to the login they were made for (an organiser's export), by file name. Held in this
    process only: after a restart no such file is served to anyone."""

    def __init__(self) -> None:
        self._owners: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def name(self, stem: str) -> str:
        """A private file's name: the prefix, a random part nobody guesses, then `stem` (e.g. the study's id)."""
        return f"{PRIVATE_PREFIX}{secrets.token_hex(12)}-{stem}"

    def grant(self, path: str | Path, login: str | None) -> None:
        """`path` (named by `name`) may be fetched by `login` (None: the app runs without logins) and nobody else."""
        with self._lock:
            self._owners[Path(path).name] = login

    def forget_all(self) -> None:
        """No file is private to anyone any more, so none is served (as after a restart)."""
        with self._lock:
            self._owners.clear()

    def allowed(self, name: str, login: str | None) -> bool:
        with self._lock:
            return name in self._owners and self._owners[name] == login


PRIVATE = PrivateFiles()


def login_of(request: fastapi.Request) -> str | None:
    """The Gradio login behind a request (its auth cookie), as Gradio's own routes read it; None without one."""
    app = request.app
    dependency = getattr(app, "auth_dependency", None)
    if dependency is not None:
        user = dependency(request)
        return user if isinstance(user, str) else None
    cookie_id = getattr(app, "cookie_id", "")
    token = request.cookies.get(f"access-token-{cookie_id}") or request.cookies.get(
        f"access-token-unsecure-{cookie_id}"
    )
    tokens = getattr(app, "tokens", {}) or {}
    return tokens.get(token) if token else None


def refuse_routes(request: fastapi.Request) -> None:
    """A FastAPI dependency on every route: uploads (Gradio's upload routes, any multipart body to its API) answer
    403, direct REST calls 404, and a private file 404 unless the request's login is the one it was made for."""
    path = request.url.path.rstrip("/")
    tail = path.split(API, 1)[1] if API in path else None
    if tail is not None:
        multipart = request.headers.get("content-type", "").lower().startswith("multipart/")
        if tail in UPLOAD_ROUTES or multipart:
            raise fastapi.HTTPException(status_code=403, detail="uploads are off: this app takes no files")
        if tail.startswith(DIRECT_ROUTES):
            raise fastapi.HTTPException(status_code=404, detail="no direct API: this app is used through its page")
        if tail.startswith("/file="):
            name = unquote(tail).rsplit("/", 1)[-1]
            # an organiser's export: chatbot/exports.py puts its own prefix before the private name
            if PRIVATE_PREFIX in name and not PRIVATE.allowed(name, login_of(request)):
                raise fastapi.HTTPException(status_code=404, detail="not found")
