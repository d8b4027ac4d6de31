"""ZeroGPU, Hugging Face's shared on-demand GPUs: each model call runs inside a `@spaces.GPU` function that a user's
Gradio event calls, and memory updates run in that user's events instead of the background worker.

ZeroGPU lends a GPU only while a decorated function runs (the `spaces` package runs it in a forked process that
holds the GPU; arguments and results cross by pickling). So only model work crosses: the database, the memory index
and the job queue stay in this process. Two functions are decorated, before the app launches (ZeroGPU stops a Space
that has none at startup):

- `keem_reply` streams one chat reply (a generator; its `Finish` comes last, as an item);
- `keem_update` runs the model part of one memory update (memory/jobs.py JobRunner.compute), yielding its stages
  as it goes, with a duration counted from the model calls its strategy makes (below).

`keem_update`'s duration counts the model calls the chosen strategy makes for this input when its answers are good
(memory/jobs.py JobRunner.calls, from the strategy's steps: summarize, reflect, the rewrite, the guard's judge, the
verification, the records call; the operations strategy's choice per summary sentence; cue words), UPDATE_PER_CALL_S
each, plus the memory and the session read, at most UPDATE_MAX_S. It asks for the smallest realistic time, since
ZeroGPU refuses a call that asks for more than the visitor's quota has left; a failed verification or records call
asks again inside the same time, and when that runs over, ZeroGPU cuts the update and the next event asks for twice
as much.

An update that ZeroGPU cuts (its time limit, the visitor's GPU quota, no free GPU) is a failed attempt of a durable
job (code `gpu_stopped`): the job stays pending, the previous memory stays as it was, and the user's next event
(starting, ending or renewing a conversation) runs it again, asking for more time. The page's side of this, the
handler chained after those events, is chatbot/web/catch_up.py (deploy/ knows no front end).
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

from memory.jobs import Computed
from memory.updaters import UpdateInput
from models.base import ChatModel, ChatStream, Finish, GenerationOptions, Message
from models.errors import GenerationError, KeemError, describe

if TYPE_CHECKING:
    from chatbot.bot import Chatbot

REPLY_S = 60  # one reply of at most 256 tokens: seconds, with room for a 10.8B model's first call
# One memory update's GPU time: per model call the update makes (counted from its strategy's steps, memory/jobs.py
# JobRunner.calls), plus reading what it is given; doubled for each try ZeroGPU cut, never more than UPDATE_MAX_S.
UPDATE_BASE_S = 10  # the work between the calls: the input crossing over, Korean analysis, embeddings
UPDATE_PER_CALL_S = 10  # one call of an 8-11B model: answers capped at 512 tokens, summaries ~150 (unmeasured)
UPDATE_PER_SENTENCE_S = 2  # each memory sentence is read (and written back) by the update and verify calls
UPDATE_PER_TURN_S = 1
UPDATE_MAX_S = 240  # a visitor's daily quota is a few minutes: never ask for more than this at once


@functools.cache
def active() -> bool:
    """Whether this process runs on ZeroGPU: the `spaces` package is importable and its config says so.

    Called early (app.py, before torch loads): on ZeroGPU `spaces` must be imported before anything touches CUDA.
    """
    try:
        import spaces  # noqa: F401  (imported for its side effects on ZeroGPU)
        from spaces.config import Config
    except ImportError:
        return False
    return bool(getattr(Config, "zero_gpu", False))


def update_duration(calls: int, inp: UpdateInput, tries: int = 0) -> int:
    """Seconds of GPU to ask for one update that makes at most `calls` model calls: grows with the calls, the memory
    and the session, and with each try ZeroGPU cut; UPDATE_MAX_S at most."""
    need = (
        UPDATE_BASE_S
        + UPDATE_PER_CALL_S * calls
        + UPDATE_PER_SENTENCE_S * len(inp.previous)
        + UPDATE_PER_TURN_S * len(inp.dialogue)
    )
    return int(min(need * (1 + max(tries, 0)), UPDATE_MAX_S))


def reply_duration(messages: list[Message], options: GenerationOptions = GenerationOptions()) -> int:
    return REPLY_S


class GPUChatModel(ChatModel):
    """A chat model whose generation runs in a GPU function; counting tokens and the rest stay here."""

    def __init__(self, inner: ChatModel, gpu_stream: Callable[..., Generator[Any, None, None]]):
        self.inner, self.gpu_stream = inner, gpu_stream
        self.spec, self.context_window, self.description = inner.spec, inner.context_window, inner.description

    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        """The reply's pieces; the GPU call is read to its end (or closed), so the GPU goes back at once."""
        gpu, finish = self.gpu_stream(messages, options), None
        try:
            for item in gpu:
                if isinstance(item, Finish):
                    finish = item
                else:
                    yield item
        finally:
            gpu.close()  # a reader that stops early must not keep the GPU until garbage collection
        return finish

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __getattr__(self, name: str) -> Any:  # anything else a backend offers (base_url, ...) is the inner one's
        return getattr(self.inner, name)


class ZeroGPU:
    """The app's GPU functions, and `run`, which runs one memory update job with its model part inside them (the
    page's events call it: chatbot/web/catch_up.py).

    `backend` is the app's chatbot/web/backend.py Backend; on ZeroGPU it has loaded before the app is built (the models
    must reach ZeroGPU's GPU from the main thread, before launch), and its chat model is wrapped here once.
    """

    def __init__(self, backend: Any):
        import spaces

        self.backend = backend
        self.raw_chat: ChatModel | None = None
        self.reply_gpu = spaces.GPU(duration=reply_duration)(self.keem_reply)
        self.update_gpu = spaces.GPU(duration=self.update_time)(self.keem_update)
        backend.done.wait()
        if backend.bot is not None:
            self.prepare(backend.bot)

    def prepare(self, bot: Chatbot) -> None:
        """Route the bot's chat generation through `keem_reply` (updates go through `run`)."""
        if not isinstance(bot.chat_model, GPUChatModel):
            self.raw_chat = bot.chat_model
            bot.chat_model = GPUChatModel(bot.chat_model, self.reply_gpu)

    def update_time(self, strategy: str, inp: UpdateInput, tries: int = 0) -> int:
        """`keem_update`'s duration (ZeroGPU calls it with the same arguments, here, before the GPU call): the model
        calls the chosen strategy makes for this input, by `update_duration`."""
        return update_duration(self.backend.bot.runner.calls(strategy, inp), inp, tries)

    # -- inside the GPU (plain arguments in, plain values out: they cross processes by pickling) ---------------
    def keem_reply(self, messages: list[Message], options: GenerationOptions) -> Iterator[str | Finish]:
        """Stream one reply, then its Finish (a generator's return value does not cross processes)."""
        assert self.raw_chat is not None
        stream = self.raw_chat.stream(messages, options)
        while True:
            try:
                piece = next(stream)
            except StopIteration as done:
                yield done.value or Finish()
                return
            yield piece

    def keem_update(self, strategy: str, inp: UpdateInput, tries: int = 0) -> Iterator[tuple[str, Any]]:
        """The model part of one update: ("stage", name) as each stage begins, then ("done", Computed)."""
        runner = self.backend.bot.runner
        events: queue.Queue[tuple[str, Any]] = queue.Queue()

        def work() -> None:
            try:
                events.put(("done", runner.compute(strategy, inp, lambda name: events.put(("stage", name)))))
            except BaseException as exc:  # raised below, in the caller's thread
                events.put(("error", exc))

        threading.Thread(target=work, name="keem-update-gpu", daemon=True).start()
        while True:
            kind, value = events.get()
            if kind == "error":
                raise value
            yield kind, value
            if kind == "done":
                return

    # -- here ------------------------------------------------------------------------------------------------
    def run(self, job_id: int) -> Any:
        """Run one job: claim, stages and commit here, the model part inside `keem_update`."""
        bot = self.backend.bot

        def compute(strategy: str, inp: UpdateInput, stage: Callable[[str], None]) -> Computed:
            tries = bot.store.queue.get(job_id)["attempts"] - 1  # the tries ZeroGPU cut before this one
            done = None
            try:
                for kind, value in self.update_gpu(strategy, inp, tries):
                    if kind == "stage":
                        stage(value)
                    else:
                        done = value
            except KeemError:  # the update's own (a model server down, ...), crossed as it was raised
                raise
            except Exception as exc:  # ZeroGPU's: its time limit, the visitor's quota, no free GPU
                raise GenerationError(
                    f"ZeroGPU stopped the update ({describe(exc)}); it runs again at the user's next event",
                    code="gpu_stopped",
                ) from exc
            if not isinstance(done, Computed):
                raise GenerationError(
                    "the GPU function ended without an update; it runs again at the user's next event",
                    code="gpu_stopped",
                )
            return done

        return bot.runner.run(job_id, compute=compute)
