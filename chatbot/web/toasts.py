"""The page's pop-up notices (Gradio's toasts), titled in Korean (Gradio's own titles are English)."""

from __future__ import annotations

import gradio as gr

from chatbot.web.messages import TOAST_TITLES


def info(message: str) -> None:
    """A notice that something was done."""
    gr.Info(message, title=TOAST_TITLES["info"])


def warning(message: str) -> None:
    """A notice that something could not be done, or needs the user's attention."""
    gr.Warning(message, title=TOAST_TITLES["warning"])
