"""Where a closed-form fit runs: a config's `device` ("cpu", "cuda" or "cuda:<n>") checked and
resolved, and the dense algebra of the item-item and spectral models on torch tensors
(docs/concepts/models.md, "On a GPU"; the device's memory guard is `linalg.check_device_memory`).

The CPU path never comes here: it stays numpy/LAPACK and keeps its bits. On a device the Gram
matrix is built on the host (sparse, cheap), copied once, and everything dense — the SPD
inverse (Cholesky, then the inverse from the factor), the column scaling of EASE-type weights,
an eigendecomposition — runs there; the result comes back to the host once. The functions
below take torch tensors on any device, so the CPU tests run the same code as a GPU.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from linrec.errors import ConfigError

#: the doc line of every closed-form model's `device` parameter
DEVICE_DOC = ("cpu | cuda | cuda:<n>; cuda: the dense fit runs there through torch (results "
              "differ from the CPU's in the last bits)")

_DEVICE_NAME = re.compile(r"cpu|cuda(:\d+)?")


def check_device_name(value: Any, owner: str) -> None:
    """ConfigError unless `value` is "cpu", "cuda" or "cuda:<n>"; `owner` names the setting."""
    if not isinstance(value, str) or not _DEVICE_NAME.fullmatch(value):
        raise ConfigError(f"{owner}={value!r} is not allowed; allowed: cpu, cuda, cuda:<n>")


def is_tensor(value: Any) -> bool:
    """Whether `value` is a torch tensor (torch is not imported to find out)."""
    return type(value).__module__.startswith("torch")


def torch_device(name: str, owner: str) -> Any:
    """The torch.device of a checked device name; ConfigError (naming `owner`) when CUDA or the
    numbered device is not there."""
    import torch

    check_device_name(name, owner)
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{owner}={name!r}: CUDA is not available here; use cpu")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"{owner}={name!r}: this machine has {torch.cuda.device_count()} "
                              f"CUDA device(s) (0..{torch.cuda.device_count() - 1})")
    return device


def torch_dtype(dtype: np.dtype | str) -> Any:
    import torch

    return {np.dtype(np.float32): torch.float32,
            np.dtype(np.float64): torch.float64}[np.dtype(dtype)]


def to_device(A: np.ndarray, device: Any) -> Any:
    """A host array as a tensor on `device` (one copy; the host array may be freed after)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(A)).to(device)


def to_host(A: Any) -> np.ndarray:
    """A tensor as a writable host array (C order)."""
    return np.ascontiguousarray(A.detach().cpu().numpy())


# --- the dense algebra on tensors (linrec.models.linalg dispatches here for a tensor) -----------


def cholesky_inverse(A: Any) -> tuple[Any, int]:
    """(A⁻¹, 0) of the symmetric positive definite tensor A (n x n) from its Cholesky factor
    (one triangle read), or (None, k) when the leading minor k is not positive. Peak: three
    n x n tensors."""
    import torch

    if A.shape[0] == 0:
        return A, 0
    factor, info = torch.linalg.cholesky_ex(A)
    bad = int(info)
    if bad:
        return None, bad
    del A
    return torch.cholesky_inverse(factor), 0


def add_to_diagonal(A: Any, values: Any) -> Any:
    """A[i, i] += values[i] in place (a scalar, or a length-n array or tensor). Returns A."""
    import torch

    if not isinstance(values, int | float):
        values = torch.as_tensor(values, dtype=A.dtype, device=A.device)
    A.diagonal().add_(values)
    return A


def cast_like(values: Any, like: Any) -> Any:
    """`values` (array or tensor) as a tensor of `like`'s dtype on its device."""
    import torch

    return torch.as_tensor(values).to(dtype=like.dtype, device=like.device)


def zero_diagonal_weights(P: Any, scale: float) -> Any:
    """In place: W_ij = −scale·P_ij / P_jj, W_jj = 0 (linalg.zero_diagonal_weights)."""
    column_scale = -scale / P.diagonal()
    P.mul_(column_scale[None, :])
    P.diagonal().zero_()
    return P


def eigh(A: Any, needed: int) -> tuple[np.ndarray, np.ndarray]:
    """The top `needed` eigenpairs of the symmetric tensor A, ascending as scipy's eigh returns
    them, on the host: (values float64 (needed,), vectors (n, needed) in A's dtype). The full
    decomposition runs on the device (torch has no partial one) and only the kept columns are
    copied back."""
    import torch

    values, vectors = torch.linalg.eigh(A)
    n = A.shape[0]
    return (values[n - needed:].double().cpu().numpy(),
            to_host(vectors[:, n - needed:]))
