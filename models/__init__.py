"""Model backends: chat models behind one protocol, and sentence embedders; a spec string picks one."""

from models.base import ChatModel, ContinuationScore, GenerationOptions, Message
from models.embedders import Embedder
from models.spec import cuda_available, load_chat_model, load_embedder, resolve_auto

__all__ = [
    "ChatModel",
    "ContinuationScore",
    "Embedder",
    "GenerationOptions",
    "Message",
    "cuda_available",
    "load_chat_model",
    "load_embedder",
    "resolve_auto",
]
