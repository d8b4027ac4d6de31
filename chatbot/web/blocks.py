"""The page's gr.Blocks: an output an event leaves as it is costs nothing.

Gradio 6 treats an output an event does not set (a `{component: value}` answer without it, or `gr.skip()`) as an
update with no properties, and for each one builds a new instance of the component and its config twice (about
0.3-1 ms an output). Every event that takes a tab's state lists the start screen's 30 parts among its outputs (to
show them when the tab's user was forgotten: chatbot/web/view.py `Page.on`), so one send, poll or check paid for 30
components it did not change; with the reply actions and the memory panel that was most of the 178 ms of app CPU a
page turn (docs/scaling.md, "Capacity measured"). Here those outputs skip Gradio's work: the browser gets the same
`{"__type__": "update"}` it got, and the tab's session keeps its copy of the component as it was.

An update that only shows or hides a part the tab already shows or hides (the reply actions, set from the tab's state
on the first and last frame of every reply: about 4-5% of the busy app's CPU) is such an output too: the tab's copy
(Gradio's session state, which every answer the tab was sent updates) already says so. Only `visible` is compared:
the browser never changes it, whereas it does change what the user toggles (an accordion's `open`, a tab's
`selected`), so a copy of those may be stale.
"""

from __future__ import annotations

import copy
from typing import Any

import gradio as gr
from gradio.blocks import Block

SKIP: dict[str, Any] = gr.skip()  # {"__type__": "update"}: what Gradio sends for an output left as it is
SERVER_SET = frozenset({"visible"})  # the properties only the server sets (see the module's docstring)


def shown_already(state: Any, block: Block, update: Any) -> bool:
    """Whether `update` only sets server-set properties to what the tab's copy of `block` already has."""
    if not (isinstance(update, dict) and update.get("__type__") == "update") or state is None:
        return False
    props = {k: v for k, v in update.items() if k != "__type__"}
    if not props or not props.keys() <= SERVER_SET:
        return False
    args = state.get(block._id, block).constructor_args  # what the tab was last sent (or the page's own)
    return all(k in args and args[k] == v for k, v in props.items())


class PageBlocks(gr.Blocks):
    """gr.Blocks whose events pay only for the outputs they set (see the module's docstring)."""

    async def postprocess_data(
        self, block_fn: Any, predictions: Any, state: Any, *more: Any, **named: Any
    ) -> list[Any]:
        outputs = list(block_fn.outputs)
        if len(outputs) > 1 and isinstance(predictions, dict) and predictions == SKIP:
            predictions = {}  # one gr.skip() for every output
        if (
            len(outputs) < 2
            or not isinstance(predictions, dict)
            or not all(isinstance(k, Block) for k in predictions)
            or getattr(block_fn, "batch", False)
        ):
            return list(await super().postprocess_data(block_fn, predictions, state, *more, **named))
        set_ids = {
            k._id
            for k, v in predictions.items()
            if not (isinstance(v, dict) and v == SKIP) and not shown_already(state, k, v)
        }
        # a gr.State output goes through Gradio whatever it is given (it keeps the value server-side, sends None)
        kept = [b for b in outputs if b._id in set_ids or getattr(b, "stateful", False)]
        if len(kept) == len(outputs):
            return list(await super().postprocess_data(block_fn, predictions, state, *more, **named))
        done: list[Any] = []
        if kept:
            only = copy.copy(block_fn)
            only.outputs = kept
            by_id = {k._id: v for k, v in predictions.items()}
            view = {b: by_id.get(b._id, SKIP) for b in kept}
            done = list(await super().postprocess_data(only, view, state, *more, **named))
        out, kept_ids = iter(done), {b._id for b in kept}
        return [next(out) if b._id in kept_ids else dict(SKIP) for b in outputs]
