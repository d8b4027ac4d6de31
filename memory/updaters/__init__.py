"""Memory-update strategies behind one interface: `make_updater(name, model, embedder)`."""

from __future__ import annotations

from memory.updaters.accumulate import AccumulateUpdater
from memory.updaters.base import UpdateInput, Updater, UpdateResult
from memory.updaters.keem import KeemUpdater
from memory.updaters.operations import OperationsUpdater
from memory.updaters.steps import DEFAULT_CEILING
from models.base import ChatModel
from models.embedders import Embedder
from models.errors import InputError

STRATEGIES = ("keem", "accumulate", "operations")


def make_updater(
    strategy: str, model: ChatModel, embedder: Embedder | None = None, max_new_tokens: int = DEFAULT_CEILING
) -> Updater:
    """`max_new_tokens` is the output budget one update call plans for (KEEM_UPDATE_MAX_TOKENS): a memory whose
    rewrite needs more is rewritten in part (memory/updaters/steps.py)."""
    if strategy == "keem":
        return KeemUpdater(model, embedder, max_new_tokens=max_new_tokens)
    if strategy == "accumulate":
        return AccumulateUpdater(model, embedder, max_new_tokens=max_new_tokens)
    if strategy == "operations":
        return OperationsUpdater(model, embedder, max_new_tokens=max_new_tokens)
    raise InputError(f"unknown strategy '{strategy}'; choose one of: {', '.join(STRATEGIES)}")


__all__ = ["STRATEGIES", "UpdateInput", "UpdateResult", "Updater", "make_updater"]
