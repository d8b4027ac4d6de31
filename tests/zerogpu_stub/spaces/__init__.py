"""A stand-in for Hugging Face's `spaces` package, for tests: put tests/zerogpu_stub on sys.path (PYTHONPATH).

`GPU` decorates plain and generator functions like the real one (`@GPU`, `@GPU()`, `@GPU(duration=int or
callable)`), runs them in this process, and passes arguments and results (each item of a generator) through
pickle as ZeroGPU does between the app's process and the GPU's, so whatever cannot cross fails here too. It records
every call: in `calls`, and with SPACES_STUB_LOG set as JSON
lines in that file ({"event": "import" | "decorated" | "start" | "end" | "aborted", "function", "duration", ...}).
`running()` names the decorated calls under way (a generator's lasts until it is exhausted or closed), so a fake
model can check that it runs inside one. SPACES_STUB_ABORT=<function name>:<n> makes the first n calls of that
function stop after their first item (or, for a plain function, after it ran) with "GPU task aborted", the way
ZeroGPU's time limit cuts a call.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import config

calls: list[dict[str, Any]] = []
_lock = threading.Lock()
_running: list[str] = []
_aborts: dict[str, int] = {}
if os.environ.get("SPACES_STUB_ABORT"):
    name, _, count = os.environ["SPACES_STUB_ABORT"].partition(":")
    _aborts[name] = int(count or 1)


class GPUAborted(Exception):
    """What ZeroGPU raises in the caller when a call runs past its duration."""


def _record(event: str, **data: Any) -> None:
    entry = {"event": event, "time": time.time(), **data}
    with _lock:
        calls.append(entry)
        path = os.environ.get("SPACES_STUB_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as log:
                log.write(json.dumps(entry, default=str) + "\n")


def _cross(value: Any) -> Any:
    """What arrives on the other side of ZeroGPU's process boundary: a pickled copy."""
    return pickle.loads(pickle.dumps(value))


def running() -> list[str]:
    with _lock:
        return list(_running)


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _take_abort(name: str) -> bool:
    with _lock:
        if _aborts.get(name, 0) > 0:
            _aborts[name] -= 1
            return True
    return False


def GPU(task: Callable[..., Any] | None = None, *, duration: Any = None, **_: Any) -> Any:
    if task is None:
        return lambda fn: GPU(fn, duration=duration)
    name = task.__name__

    def asked(args: tuple, kwargs: dict) -> Any:
        return duration(*args, **kwargs) if callable(duration) else duration

    def enter(args: tuple, kwargs: dict) -> None:
        _record("start", function=name, duration=asked(args, kwargs))
        with _lock:
            _running.append(name)

    def leave(event: str) -> None:
        with _lock:
            _running.remove(name)
        _record(event, function=name)

    if inspect.isgeneratorfunction(task):

        @functools.wraps(task)
        def generator(*args: Any, **kwargs: Any) -> Any:
            enter(args, kwargs)
            abort, event = _take_abort(name), "end"
            try:
                for item in task(*_cross(args), **_cross(kwargs)):
                    yield _cross(item)
                    if abort:
                        event = "aborted"
                        raise GPUAborted("GPU task aborted")
            finally:
                leave(event)

        wrapper: Any = generator
    else:

        @functools.wraps(task)
        def plain(*args: Any, **kwargs: Any) -> Any:
            enter(args, kwargs)
            abort = _take_abort(name)
            try:
                result = task(*_cross(args), **_cross(kwargs))
            finally:
                leave("aborted" if abort else "end")
            if abort:
                raise GPUAborted("GPU task aborted")
            return _cross(result)

        wrapper = plain
    _record("decorated", function=name, cuda_initialized=_cuda_initialized())
    return wrapper


_record("import", torch_loaded="torch" in sys.modules, zero_gpu=config.Config.zero_gpu)
