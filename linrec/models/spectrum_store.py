"""Eigendecompositions of XᵀX on disk, shared by the processes of a sweep.

A sweep over (rank, λ) of LRR, PureSVD or closed-form MF fits one spectrum per training matrix.
Jobs in one process share it through `spectral`'s in-memory cache; jobs in other processes
(a parallel launcher, a cluster, a sweep run again) find it here:
`<cache_home>/spectra/<matrix key>-<dtype>-<components>/` with `eigenvalues.npy` and
`vectors.npy`, written to a temporary directory and renamed into place (a killed writer leaves
no partial entry). The first job computes under an exclusive lock on `<matrix key>-<dtype>.lock`;
the others wait for it and read the result (the vectors memory-mapped, read-only). Disable with
LINREC_SPECTRUM_CACHE=0; an entry larger than LINREC_SPECTRUM_CACHE_MAX_GB (default 8) is not
written.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from linrec.atomic import make_dir_readable
from linrec.cache import cache_home

log = logging.getLogger(__name__)
ENABLE_ENV = "LINREC_SPECTRUM_CACHE"
MAX_GB_ENV = "LINREC_SPECTRUM_CACHE_MAX_GB"
_DEFAULT_MAX_GB = 8.0


def enabled() -> bool:
    """Whether spectra are shared on disk ($LINREC_SPECTRUM_CACHE, default on)."""
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def root() -> Path:
    return cache_home() / "spectra"


def lock_path(key: str, dtype: np.dtype) -> Path:
    """The lock the job that computes the spectrum of (key, dtype) holds."""
    return root() / f"{key}-{np.dtype(dtype).name}.lock"


def load(key: str, dtype: np.dtype, needed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(eigenvalues float64 (r,), vectors (n, r) read-only memory map) of a stored spectrum of
    (key, dtype) with at least `needed` components (the smallest such), or None."""
    name = np.dtype(dtype).name
    best: tuple[int, Path] | None = None
    for entry in root().glob(f"{key}-{name}-*"):
        try:
            components = int(entry.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if entry.is_dir() and components >= needed and (best is None or components < best[0]):
            best = (components, entry)
    if best is None:
        return None
    try:
        eigenvalues = np.load(best[1] / "eigenvalues.npy")
        vectors = np.load(best[1] / "vectors.npy", mmap_mode="r")
    except (OSError, ValueError) as exc:  # unreadable: compute again
        log.warning("spectrum cache: ignoring %s (%s)", best[1], exc)
        return None
    if vectors.shape[1] != eigenvalues.shape[0] or vectors.dtype != np.dtype(dtype):
        log.warning("spectrum cache: ignoring %s (inconsistent arrays)", best[1])
        return None
    eigenvalues.flags.writeable = False
    log.info("spectrum cache: read %s", best[1])
    return eigenvalues, vectors


def save(key: str, dtype: np.dtype, eigenvalues: np.ndarray, vectors: np.ndarray) -> None:
    """Store a spectrum (atomically: temporary directory, then rename). Too large (see the
    module docstring) or a failing disk: logged and skipped, never an error."""
    max_gb = float(os.environ.get(MAX_GB_ENV, _DEFAULT_MAX_GB))
    size = eigenvalues.nbytes + vectors.nbytes
    if size > max_gb * 2**30:
        log.info("spectrum cache: %.1f GB exceeds %s=%g; not stored", size / 2**30, MAX_GB_ENV,
                 max_gb)
        return
    final = root() / f"{key}-{np.dtype(dtype).name}-{eigenvalues.shape[0]}"
    if final.exists():
        return
    try:
        root().mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root()))
        try:
            np.save(tmp / "eigenvalues.npy", np.asarray(eigenvalues))
            np.save(tmp / "vectors.npy", np.asarray(vectors))
            make_dir_readable(tmp)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as exc:
        log.warning("spectrum cache: could not store %s (%s)", final, exc)
        return
    log.info("spectrum cache: stored %s (%.2f GB)", final, size / 2**30)
