"""The bodies the API takes (pydantic models: FastAPI checks them where they enter and lists them in the OpenAPI
schema). The chat's follow OpenAI's chat completions; fields it does not use (temperature, ...) are accepted and
ignored, so any OpenAI client's request is taken as sent."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = "text"
    text: str = ""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content if p.type == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    """OpenAI's chat completion request. `model` may be `keem` (any name is taken: the server's model answers);
    the token says whose memory; `user` names the user for an app token."""

    model_config = ConfigDict(extra="allow")

    model: str = "keem"
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    user: str | None = None


class TurnsRequest(BaseModel):
    """Turns of a conversation held with the builder's own model, in order (OpenAI's message shape); `user` names
    the user for an app token."""

    messages: list[ChatMessage] = Field(min_length=1)
    user: str | None = None


class SentenceBody(BaseModel):
    text: str = Field(min_length=1, max_length=2000)


SEARCH_MAX_CHARS = 100_000  # a search text may be a pasted document: only its start is searched (memory/lexical.py
# MAX_CHARS), and this bound only stops a runaway body


class SearchBody(BaseModel):
    """POST /v1/memory/search: the text to find memory for (any length up to SEARCH_MAX_CHARS; a long paste does not
    fit a URL) and how many sentences."""

    q: str = Field(min_length=1, max_length=SEARCH_MAX_CHARS, description="the text to find memory for")
    k: int = Field(5, ge=1, le=50, description="how many sentences")


class RestoreBody(BaseModel):
    sentence_id: int


class RevertBody(BaseModel):
    to: int


JsonObject = dict[str, Any]


class Turn(BaseModel):
    """One turn of a conversation (the MCP tool add_turns): what the user said, or the bot's reply to it."""

    role: Literal["user", "assistant"] = Field(description="'user': the person's message; 'assistant': the bot's reply")
    content: str = Field(min_length=1, description="the message as it was said")
