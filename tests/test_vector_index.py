"""Where a flat FAISS index runs (memory/vector_index.py): per-user sizes on the CPU, big ones on a GPU when faiss is
a GPU build that sees one, and a clear line when faiss-cpu's files shadow an installed faiss-gpu.

The GPU itself runs in benchmarks/gpu_check.py (d), on a CUDA machine; these machines have none."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from memory.vector_index import GPU_MIN_ROWS, FlatIndex, GpuStatus, gpu_min_rows, gpu_status, place
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
