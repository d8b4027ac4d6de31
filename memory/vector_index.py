"""Flat inner-product FAISS indexes: on the CPU, or on a GPU for searches big enough to gain from one.

Where each search runs (docs/scaling.md "GPU indexes"): every index, a user's (memory/index.py) or a whole
corpus (`benchmarks/retrieval_scale.py --corpus`), is a `FlatIndex` placed by `place`:
- KEEM_FAISS_DEVICE=auto (the default): a GPU index when the `faiss` module is a GPU build, a GPU is visible and
  the index holds at least `GPU_MIN_ROWS` rows (KEEM_FAISS_GPU_MIN_ROWS), else the CPU. A user's memory (tens to a
  few thousand sentences) so stays on the CPU: the exact search over it takes about 0.05 ms, and a GPU adds a
  host-device round trip per query on one device shared by every app process. KEEM_FAISS_GPU_MIN_ROWS=0 puts every
  user's index on the GPU;
- KEEM_FAISS_DEVICE=cpu: never a GPU; =gpu: every index on the GPU (an error saying why where none is usable).
A GPU index answers as the CPU one does: the same exact inner products (float32, so scores agree to about 1e-5),
the same ids; a search for more than `GPU_MAX_K` neighbours, which a GPU index cannot give, runs on the CPU copy
every FlatIndex keeps (a hybrid search scores every sentence of the memory).

faiss-cpu and faiss-gpu install the same `faiss` module: the `gpu` extra adds faiss-gpu and `make install` on a
CUDA machine reinstalls it last, so its files are the ones imported. A later install that brings faiss-cpu's files
back leaves a CPU-only module; `gpu_status` says so and how to fix it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

GPU_MIN_ROWS = 100_000
GPU_MAX_K = 2048  # faiss GPU flat search: k <= 2048
GPU_DISTRIBUTIONS = ("faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11")
_GPU_LOCK = threading.Lock()  # a StandardGpuResources serves one thread at a time; app threads search at once


def load_faiss() -> Any:
    """The faiss module, its loader's lines about optional CPU-feature libraries it lacks kept quiet (noise a user
    reads as an error, nothing to act on; its real errors stay)."""
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    return faiss


def gpu_min_rows() -> int:
    raw = os.environ.get("KEEM_FAISS_GPU_MIN_ROWS", "").strip()
    if not raw:
        return GPU_MIN_ROWS
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        from models.errors import InputError

        raise InputError(f"KEEM_FAISS_GPU_MIN_ROWS={raw!r}: give a whole number of rows, e.g. 100000 (the default)")
    return value


DEVICES = ("auto", "cpu", "gpu")


def device_setting() -> str:
    """KEEM_FAISS_DEVICE: auto (the default), cpu or gpu."""
    raw = os.environ.get("KEEM_FAISS_DEVICE", "").strip().lower() or "auto"
    if raw not in DEVICES:
        from models.errors import InputError

        raise InputError(f"KEEM_FAISS_DEVICE={raw!r}: give auto (the default), cpu or gpu (docs/scaling.md)")
    return raw


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class GpuStatus:
    """Whether big indexes can go to a GPU here, and if not, why (one line a user can act on)."""

    gpus: int
    reason: str
    shadowed: bool = False  # a GPU build is installed, but faiss-cpu's files are the ones imported

    @property
    def usable(self) -> bool:
        return self.gpus > 0


def gpu_status(faiss: Any | None = None) -> GpuStatus:
    faiss = faiss or load_faiss()
    gpu_build = hasattr(faiss, "StandardGpuResources")
    if not gpu_build:
        wanted = next((d for d in GPU_DISTRIBUTIONS if _installed(d)), None)
        if wanted:
            version = _installed(wanted)
            return GpuStatus(
                0,
                f"{wanted} {version} is installed but the faiss module imported is a CPU build (faiss-cpu and "
                f"{wanted} install the same files, and faiss-cpu's came last): run "
                f"`pip install --force-reinstall --no-deps {wanted}=={version}`",
                shadowed=True,
            )
        return GpuStatus(0, "faiss here is the CPU build (faiss-cpu); on a CUDA machine `make install` adds faiss-gpu")
    gpus = int(faiss.get_num_gpus())
    if gpus == 0:
        return GpuStatus(0, "faiss is a GPU build but sees no GPU (no CUDA driver, or CUDA_VISIBLE_DEVICES hides it)")
    return GpuStatus(gpus, f"faiss sees {gpus} GPU{'s' if gpus > 1 else ''}")


def place(rows: int, device: str = "auto", status: GpuStatus | None = None) -> str:
    """The device for an index of `rows` rows, "cpu" or "gpu". `device` "cpu" or "gpu" forces it ("gpu" where
    none is usable is an InputError saying why); "auto" takes a GPU for `gpu_min_rows()` rows and more when one is
    usable."""
    if device not in DEVICES:
        from models.errors import InputError

        raise InputError(f"device {device!r}: give auto, cpu or gpu")
    if device == "cpu":
        return "cpu"
    status = status or gpu_status()
    if device == "gpu":
        if not status.usable:
            from models.errors import InputError

            raise InputError(f"no GPU index here: {status.reason}")
        return "gpu"
    if rows < gpu_min_rows():
        return "cpu"
    if status.shadowed:
        logging.getLogger(__name__).warning("an index of %d rows stays on the CPU: %s", rows, status.reason)
    return "gpu" if status.usable else "cpu"


@functools.lru_cache(maxsize=4)
def _gpu_resources(faiss: Any) -> Any:
    """One StandardGpuResources per faiss module and process: each reserves scratch memory on the device, so every
    index of the process shares it."""
    return faiss.StandardGpuResources()


class FlatIndex:
    """Exact inner-product search over `vectors` (float32, one row each) on the device `place` picks; `ids` (one
    per row) are what `search` returns, row numbers when None. `search` takes many queries at once: a GPU pays
    only for batches over big indexes. The CPU index is kept beside a GPU one: it is the reference a GPU index
    must agree with, and it answers what a GPU index cannot (more than GPU_MAX_K neighbours).

    `device` "auto" follows KEEM_FAISS_DEVICE; `faiss` and `status` are for tests (a fake GPU build)."""

    def __init__(
        self,
        vectors: np.ndarray,
        device: str = "auto",
        ids: np.ndarray | list[int] | None = None,
        *,
        faiss: Any | None = None,
        status: GpuStatus | None = None,
    ):
        faiss = faiss or load_faiss()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be a matrix (rows x dim), not shape {vectors.shape}")
        self.rows, self.dim = vectors.shape
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        if self.ids is not None and self.ids.shape != (self.rows,):
            raise ValueError(f"ids must be one per row ({self.rows}), not shape {self.ids.shape}")
        device = device_setting() if device == "auto" else device
        self.device = place(self.rows, device, status or (gpu_status(faiss) if device != "cpu" else None))
        self.cpu = faiss.IndexFlatIP(self.dim)
        self.cpu.add(vectors)
        self.index = faiss.index_cpu_to_gpu(_gpu_resources(faiss), 0, self.cpu) if self.device == "gpu" else self.cpu

    @property
    def ntotal(self) -> int:
        return self.rows

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids), each queries x min(k, rows), best first; -1 where there is no row."""
        queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        n = min(k, self.rows)
        if n <= 0:
            empty = np.zeros((len(queries), 0))
            return empty.astype(np.float32), empty.astype(np.int64)
        if self.device == "gpu" and n <= GPU_MAX_K:
            with _GPU_LOCK:
                scores, rows = self.index.search(queries, n)
        else:
            scores, rows = self.cpu.search(queries, n)
        if self.ids is None:
            return scores, rows
        return scores, np.where(rows >= 0, self.ids[np.maximum(rows, 0)], -1)
