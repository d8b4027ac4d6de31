"""Where a flat FAISS index runs (memory/vector_index.py): per-user sizes on the CPU, big ones on a GPU when faiss is
a GPU build that sees one, and a clear line when faiss-cpu's files shadow an installed faiss-gpu.

The GPU itself runs in benchmarks/gpu_check.py (d), on a CUDA machine; these machines have none."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from memory.engine import MemoryEngine
from memory.fusion import METHODS
from memory.index import IndexCache
from memory.store import Sentence, Store
from memory.vector_index import GPU_MAX_K, GPU_MIN_ROWS, FlatIndex, GpuStatus, gpu_min_rows, gpu_status, place
from models.embedders import NgramEmbedder
from models.errors import InputError

GPU = GpuStatus(1, "faiss sees 1 GPU")
NO_GPU = GpuStatus(0, "faiss here is the CPU build (faiss-cpu)")


def test_flat_index_finds_what_brute_force_finds() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((500, 16), dtype=np.float32)
    queries = rng.standard_normal((7, 16), dtype=np.float32)
    index = FlatIndex(vectors, device="cpu")
    scores, rows = index.search(queries, 5)
    expected = np.argsort(-(queries @ vectors.T), axis=1)[:, :5]
    assert index.device == "cpu" and rows.shape == (7, 5)
    assert (rows == expected).all()
    assert np.allclose(scores, np.take_along_axis(queries @ vectors.T, expected, axis=1), atol=1e-4)
    assert index.search(queries[0], 50)[1].shape == (1, 50)  # one query as a vector; k above the rows is capped
    assert FlatIndex(vectors[:3]).search(queries, 10)[1].shape == (7, 3)


def test_per_user_sizes_stay_on_the_cpu_even_with_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEEM_FAISS_GPU_MIN_ROWS", raising=False)
    assert place(300, "auto", GPU) == "cpu"  # one user's memory
    assert place(GPU_MIN_ROWS - 1, "auto", GPU) == "cpu"
    assert place(GPU_MIN_ROWS, "auto", GPU) == "gpu"  # a whole corpus
    assert place(10_000_000, "auto", NO_GPU) == "cpu"
    assert place(10_000_000, "cpu", GPU) == "cpu"
    monkeypatch.setenv("KEEM_FAISS_GPU_MIN_ROWS", "1_000")
    assert gpu_min_rows() == 1000 and place(1000, "auto", GPU) == "gpu"


def test_asking_for_a_gpu_where_none_is_usable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="no GPU index here: faiss here is the CPU build"):
        place(10, "gpu", NO_GPU)
    with pytest.raises(InputError, match="give auto, cpu or gpu"):
        place(10, "cuda", GPU)
    monkeypatch.setenv("KEEM_FAISS_GPU_MIN_ROWS", "lots")
    with pytest.raises(InputError, match="KEEM_FAISS_GPU_MIN_ROWS='lots': give a whole number"):
        gpu_min_rows()


def test_this_machines_faiss_is_reported_as_it_is() -> None:
    status = gpu_status()
    assert not status.usable  # no GPU on these machines: a usable one would make the next line wrong
    assert "CPU build" in status.reason or "sees no GPU" in status.reason
    assert FlatIndex(np.eye(4, dtype=np.float32), device="auto").device == "cpu"


def test_faiss_cpu_shadowing_an_installed_faiss_gpu_is_named_with_its_fix(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`pip install faiss-cpu` after faiss-gpu (a reinstall of this package can do it) overwrites the GPU build's
    files: the user hears which command puts them back, and a big index says why it stays on the CPU."""
    import faiss

    if hasattr(faiss, "StandardGpuResources"):
        pytest.skip("faiss here is a GPU build")
    info = tmp_path / "faiss_gpu-1.15.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faiss-gpu\nVersion: 1.15.1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    status = gpu_status()
    assert status.shadowed and not status.usable
    assert "pip install --force-reinstall --no-deps faiss-gpu==1.15.1" in status.reason
    with caplog.at_level(logging.WARNING, logger="memory.vector_index"):
        assert place(GPU_MIN_ROWS, "auto", status) == "cpu"
        assert place(100, "auto", status) == "cpu"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"an index of {GPU_MIN_ROWS} rows stays on the CPU"
    ]


class FakeGpuFaiss:
    """faiss as a GPU build on a machine with one GPU, whose 'GPU' indexes are CPU clones that refuse what a GPU
    index refuses (more than GPU_MAX_K neighbours): the selection and the search path a GPU takes, run here. The CPU
    index is the reference: a GPU index must return its ids and scores."""

    class StandardGpuResources:
        pass

    class _Gpu:
        def __init__(self, index: object):
            self.index = index
            self.searches = 0

        def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            assert k <= GPU_MAX_K, f"faiss GPU: k {k} > {GPU_MAX_K}"
            self.searches += 1
            return self.index.search(queries, k)  # type: ignore[attr-defined]

    def __init__(self) -> None:
        import faiss

        self._faiss = faiss
        self.moved: list[FakeGpuFaiss._Gpu] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._faiss, name)

    def get_num_gpus(self) -> int:
        return 1

    def index_cpu_to_gpu(self, resources: object, device: int, index: object) -> _Gpu:
        assert isinstance(resources, FakeGpuFaiss.StandardGpuResources) and device == 0
        self.moved.append(FakeGpuFaiss._Gpu(self._faiss.clone_index(index)))
        return self.moved[-1]


def test_the_device_setting_picks_where_each_index_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGpuFaiss()
    vectors = np.eye(8, dtype=np.float32)
    monkeypatch.delenv("KEEM_FAISS_GPU_MIN_ROWS", raising=False)
    for setting, rows, device in (("", 8, "cpu"), ("auto", 8, "cpu"), ("gpu", 8, "gpu"), ("cpu", 8, "cpu")):
        monkeypatch.setenv("KEEM_FAISS_DEVICE", setting)
        assert FlatIndex(vectors[:rows], faiss=fake).device == device, setting
    monkeypatch.setenv("KEEM_FAISS_DEVICE", "auto")
    monkeypatch.setenv("KEEM_FAISS_GPU_MIN_ROWS", "0")  # every user's index on the GPU
    assert FlatIndex(vectors, faiss=fake).device == "gpu" and FlatIndex(vectors).device == "cpu"  # real faiss: no GPU
    assert FlatIndex(vectors, device="cpu", faiss=fake).device == "cpu"  # a caller's choice wins
    monkeypatch.setenv("KEEM_FAISS_DEVICE", "cuda")
    with pytest.raises(InputError, match="KEEM_FAISS_DEVICE='cuda': give auto"):
        FlatIndex(vectors, faiss=fake)
    monkeypatch.setenv("KEEM_FAISS_DEVICE", "gpu")
    with pytest.raises(InputError, match="no GPU index here"):
        FlatIndex(vectors)  # this machine's faiss: asked for a GPU it does not have, it says why
    with pytest.raises(InputError, match="no GPU index here"):
        IndexCache(NgramEmbedder())  # at an engine's start, not at its first search
    assert IndexCache(NgramEmbedder(), faiss=fake)


def test_a_gpu_index_returns_the_cpu_indexs_ids_and_scores_beyond_its_k_limit_too() -> None:
    fake = FakeGpuFaiss()
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((GPU_MAX_K + 500, 16), dtype=np.float32)
    ids = rng.permutation(10 * len(vectors))[: len(vectors)]  # sentence ids, not row numbers
    queries = rng.standard_normal((3, 16), dtype=np.float32)
    cpu, gpu = FlatIndex(vectors, "cpu", ids=ids), FlatIndex(vectors, "gpu", ids=ids, faiss=fake)
    assert (cpu.device, gpu.device) == ("cpu", "gpu")
    for k in (1, 5, GPU_MAX_K, len(vectors) + 9):
        (cs, ci), (gs, gi) = cpu.search(queries, k), gpu.search(queries, k)
        assert (ci == gi).all() and np.allclose(cs, gs, atol=1e-5), k
        assert set(gi[0]) <= set(ids)
    assert fake.moved[0].searches == 3  # k up to GPU_MAX_K on the GPU; more from the CPU copy it keeps


def test_per_user_search_through_a_gpu_index_answers_as_the_cpu_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeGpuFaiss()
    memory = [f"사용자는 {thing}을 좋아한다" for thing in ("등산", "요리", "독서", "수영", "낚시", "바둑", "캠핑")]
    memory.append("사용자는 2026년 3월에 판교의 게임 회사로 이직했다")
    cues = {memory[0]: "산, 주말, 북한산"}
    uid = store.users.get_or_create("minsu")
    MemoryEngine(store, NgramEmbedder()).commit(
        uid, [Sentence(t) for t in memory], cues, base=None, strategy="import", status="ok", author="import"
    )
    for method in METHODS:
        monkeypatch.setenv("KEEM_FAISS_DEVICE", "cpu")
        on_cpu = MemoryEngine(store, NgramEmbedder(), method=method)
        on_gpu = MemoryEngine(store, NgramEmbedder(), method=method)
        on_gpu.index = IndexCache(on_gpu.embedder, faiss=fake)
        expected = [on_cpu.search(uid, q, k=4) for q in ("회사 어때?", "주말에 산에 갔어", "😀", "")]
        monkeypatch.setenv("KEEM_FAISS_DEVICE", "gpu")
        got = [on_gpu.search(uid, q, k=4) for q in ("회사 어때?", "주말에 산에 갔어", "😀", "")]
        assert [[h.sentence_id for h in hits] for hits in got] == [[h.sentence_id for h in hits] for hits in expected]
        for hits, want in zip(got, expected):
            assert [h.score for h in hits] == pytest.approx([h.score for h in want], abs=1e-5), method
    entry = on_gpu.index.entry(uid, store.versions.latest_id(uid), lambda: store.versions.latest(uid))
    assert entry.index.device == "gpu" and entry.cue_index is not None and entry.cue_index.device == "gpu"
