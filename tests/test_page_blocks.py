"""The page's gr.Blocks (chatbot/web/blocks.py): an output an event leaves as it is costs nothing, and the browser
gets exactly what plain gr.Blocks sends, but for a part shown or hidden as the tab already has it (nothing changes)."""

from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.state_holder import SessionState

from chatbot.web.blocks import PageBlocks
from tests.helpers import run_async


def page(kind: type[gr.Blocks]) -> tuple[gr.Blocks, dict[str, Any], Any]:
    """A page of four parts and one event that outputs all of them."""
    with kind() as app:
        parts = {
            "state": gr.State(None),
            "button": gr.Button("■ 멈추기", visible=False),
            "note": gr.Markdown(""),
            "box": gr.Textbox(""),
        }
        parts["button"].click(lambda: None, None, list(parts.values()))
    return app, parts, next(iter(app.fns.values()))


def answer(kind: type[gr.Blocks], view: Any) -> tuple[list[Any], SessionState, dict[str, Any]]:
    """What the event's answer `view(parts)` becomes for the browser, and the tab's session after it."""
    app, parts, fn = page(kind)
    session = SessionState(app)
    out = run_async(app.postprocess_data(fn, view(parts), session))
    return out, session, parts


VIEWS = {
    "one part set": lambda p: {p["note"]: "답변을 기다리는 메시지 1개"},
    "the state and a shown button": lambda p: {p["state"]: "tab", p["button"]: gr.update(visible=True)},
    "everything set": lambda p: {
        p["state"]: 1,
        p["button"]: gr.update(visible=True),
        p["note"]: "n",
        p["box"]: gr.update(value="", interactive=False),
    },
    "nothing set": lambda p: gr.skip(),
    "parts skipped by name": lambda p: {p["note"]: gr.skip(), p["box"]: "안녕"},
}


def test_the_browser_gets_what_plain_blocks_send() -> None:
    for name, view in VIEWS.items():
        ours, plain = answer(PageBlocks, view)[0], answer(gr.Blocks, view)[0]
        assert ours == plain, name


def test_a_part_left_as_it_is_keeps_the_tabs_copy_and_a_set_one_changes_it() -> None:
    out, session, parts = answer(PageBlocks, VIEWS["the state and a shown button"])
    assert out[2] == out[3] == {"__type__": "update"}  # the note and the box: nothing changes in the browser
    for left in ("note", "box"):  # and no copy of them was built for the tab
        assert session[parts[left]._id] is parts[left]
    assert session[parts["button"]._id].visible is True  # the button's update is the tab's from now on
    assert session[parts["state"]._id] == "tab"
    # plain gr.Blocks built the tab a new note and box for an update that changed nothing
    _, plain, parts = answer(gr.Blocks, VIEWS["the state and a shown button"])
    assert plain[parts["note"]._id] is not parts["note"] and plain[parts["box"]._id] is not parts["box"]


def test_a_single_output_and_a_list_answer_go_through_gradio_as_before() -> None:
    for kind in (PageBlocks, gr.Blocks):
        with kind() as app:
            note = gr.Markdown("")
            box = gr.Textbox("")
            note.change(lambda: None, None, [note])
            box.change(lambda: None, None, [note, box])
        single, pair = list(app.fns.values())
        session = SessionState(app)
        assert run_async(app.postprocess_data(single, "글", session)) == ["글"]
        assert run_async(app.postprocess_data(pair, ["글", gr.skip()], session))[1] == {"__type__": "update"}


def test_showing_or_hiding_a_part_as_the_tab_already_does_is_left_as_it_is() -> None:
    """The reply actions are set on the first and last frame of every reply: only a change reaches the browser."""
    app, parts, fn = page(PageBlocks)
    session = SessionState(app)

    def sent(view: dict[Any, Any]) -> Any:
        return run_async(app.postprocess_data(fn, view, session))[1]  # what the button's output became

    button = parts["button"]
    assert sent({button: gr.update(visible=False)}) == {"__type__": "update"}  # hidden from the start
    assert sent({button: gr.update(visible=True)}) == {"__type__": "update", "visible": True}
    assert sent({button: gr.update(visible=True)}) == {"__type__": "update"}  # shown already: nothing to send
    assert sent({button: gr.update(visible=False)}) == {"__type__": "update", "visible": False}
    assert sent({button: gr.update(visible=False, interactive=False)})["interactive"] is False  # another property
    assert session[button._id].visible is False


def test_a_property_the_browser_changes_is_always_sent() -> None:
    """An accordion the user opened and closed in the browser: the server's copy still says it is open."""
    with PageBlocks() as app:
        fold = gr.Accordion(open=True)
        with fold:
            note = gr.Markdown("")
        note.change(lambda: None, None, [fold, note])
    fn = next(iter(app.fns.values()))
    session = SessionState(app)
    out = run_async(app.postprocess_data(fn, {fold: gr.update(open=True)}, session))
    assert out[0] == {"__type__": "update", "open": True}
