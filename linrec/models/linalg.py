"""Shared dense linear algebra for the item-item models: Gram matrix, memory guard.
(Owned by the EASE/linalg engineer; signatures here are the contract other modules use.)"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from linrec.errors import MemoryBudgetError


def available_memory_bytes() -> int:
    """Memory the OS reports as available (MemAvailable), or 8 GiB when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def check_dense_memory(n: int, dtype: np.dtype | str, n_matrices: float, what: str,
                       alternative: str = "", budget_bytes: int | None = None) -> int:
    """Refuse (MemoryBudgetError) when `n_matrices` dense n x n arrays of `dtype` would not fit in
    `budget_bytes` (default: available memory). Returns the estimate in bytes."""
    need = int(n_matrices * n * n * np.dtype(dtype).itemsize)
    budget = available_memory_bytes() if budget_bytes is None else budget_bytes
    if need > budget:
        hint = f" {alternative}" if alternative else ""
        raise MemoryBudgetError(
            f"{what}: needs about {need / 2**30:.1f} GiB ({n_matrices:g} dense {n}x{n} "
            f"{np.dtype(dtype).name} matrices) but only {budget / 2**30:.1f} GiB is available.{hint}"
        )
    return need


def gram(X: sp.csr_matrix, dtype: np.dtype | str = np.float64) -> np.ndarray:
    """Dense item Gram matrix G = X^T X (n_items x n_items) of a users x items CSR matrix."""
    return (X.T @ X).toarray().astype(dtype, copy=False)
