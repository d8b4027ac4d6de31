"""Flat inner-product FAISS indexes: on the CPU, or on a GPU for searches big enough to gain from one.

Where each search runs (docs/scaling.md "GPU indexes"):
- a chat turn searches one user's memory (tens to a few hundred sentences): always the CPU (memory/index.py). The
  exact search over them takes about 0.05 ms; a GPU adds a host-device round trip per query and would be one
  device shared by every app process;
- a whole corpus searched as one index with many queries at once (`benchmarks/retrieval_scale.py --corpus`):
  a GPU index when the `faiss` module is a GPU build, a GPU is visible and the index holds at least
  `GPU_MIN_ROWS` rows (KEEM_FAISS_GPU_MIN_ROWS), else the CPU.

faiss-cpu and faiss-gpu install the same `faiss` module: the `gpu` extra adds faiss-gpu and `make install` on a
CUDA machine reinstalls it last, so its files are the ones imported. A later install that brings faiss-cpu's files
back leaves a CPU-only module; `gpu_status` says so and how to fix it.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

GPU_MIN_ROWS = 100_000
GPU_MAX_K = 2048  # faiss GPU flat search: k <= 2048
GPU_DISTRIBUTIONS = ("faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11")


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
    if device not in ("auto", "cpu", "gpu"):
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


class FlatIndex:
    """Exact inner-product search over `vectors` (float32, one row each), row numbers as ids, on the device
    `place` picks. `search` takes many queries at once: a GPU pays only for batches over big indexes."""

    def __init__(self, vectors: np.ndarray, device: str = "auto"):
        faiss = load_faiss()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be a matrix (rows x dim), not shape {vectors.shape}")
        self.rows, self.dim = vectors.shape
        self.device = place(self.rows, device, gpu_status(faiss) if device != "cpu" else None)
        cpu = faiss.IndexFlatIP(self.dim)
        if self.device == "gpu":
            self._resources = faiss.StandardGpuResources()
            self.index = faiss.index_cpu_to_gpu(self._resources, 0, cpu)
        else:
            self.index = cpu
        self.index.add(vectors)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, row numbers), each queries x min(k, rows), best first; -1 where there is no row."""
        queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        n = min(k, self.rows)
        if self.device == "gpu" and n > GPU_MAX_K:
            raise ValueError(f"a GPU index returns at most {GPU_MAX_K} neighbours per query, not {n}: ask for fewer")
        if n <= 0:
            empty = np.zeros((len(queries), 0))
            return empty.astype(np.float32), empty.astype(np.int64)
        scores, ids = self.index.search(queries, n)
        return scores, ids
